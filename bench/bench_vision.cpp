// Vision classifier forward-pass timing for bench/bench_vision_vs_ort.py (the ONNX Runtime
// comparison): loads a Hugging Face model directory (ResNet through models/convnet.h, ViT / DINOv2
// through models/vision.h, by config.json model_type), reads one preprocessed pixel tensor
// [1, 3, H, W] f32 from a raw file, runs the forward pass `warmup` + `iters` times and prints one
// JSON object: the median / min seconds of the timed calls, the median process CPU seconds per
// call (cpu_median_s) and the thread count. Image decode and
// preprocessing are not timed (the input is already pixels), nor is the load. The logits of the
// last call go to --logits (raw f32) so the driver can compare them with ORT's.
//
//   bench_vision --model=DIR --pixels=in.f32 --size=224 [--logits=out.f32] [--iters=5]
//                [--warmup=1] [--threads=2]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "models/convnet.h"
#include "models/vision.h"

namespace {

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  return fallback;
}

xdna::Tensor read_pixels(const std::string& path, int64_t size) {
  xdna::Tensor t = xdna::Tensor::empty({1, 3, size, size});
  std::ifstream f(path, std::ios::binary);
  const auto bytes = static_cast<std::streamsize>(t.numel() * sizeof(float));
  if (!f.read(reinterpret_cast<char*>(t.data<float>()), bytes))
    throw std::runtime_error(path + ": expected " + std::to_string(bytes) + " bytes of f32 pixels");
  return t;
}

int run(int argc, char** argv) {
  const std::string dir = arg(argc, argv, "model", ""), pixels_path = arg(argc, argv, "pixels", "");
  if (dir.empty() || pixels_path.empty()) throw std::invalid_argument("usage: bench_vision --model=DIR --pixels=FILE ...");
  const int64_t size = std::stoll(arg(argc, argv, "size", "224"));
  const int iters = std::stoi(arg(argc, argv, "iters", "5")), warmup = std::stoi(arg(argc, argv, "warmup", "1"));
  xdna::set_num_threads(std::stoi(arg(argc, argv, "threads", "2")));

  std::ifstream cf(dir + "/config.json");
  if (!cf) throw std::runtime_error(dir + ": no config.json");
  const std::string type = nlohmann::json::parse(cf).value("model_type", "");
  const xdna::Tensor pixels = read_pixels(pixels_path, size);

  std::function<xdna::Tensor()> forward;
  std::unique_ptr<xdna::ConvNet> conv;
  std::unique_ptr<xdna::VisionModel> vit;
  if (type == "resnet") {
    conv = xdna::ConvNet::load(dir);
    forward = [&] { return conv->forward(pixels); };
  } else {
    vit = xdna::VisionModel::load(dir);
    forward = [&] { return vit->forward(pixels).logits; };
  }
  xdna::Tensor logits;
  for (int i = 0; i < warmup; ++i) logits = forward();
  // Process CPU time per call as well (all threads, user + sys; a spinning worker counts): on a
  // shared, loaded machine it moves far less than wall time, so old and new builds compare better.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  std::vector<double> times, cpu;
  for (int i = 0; i < iters; ++i) {
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    logits = forward();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_now() - c0);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu.begin(), cpu.end());
  const std::string logits_path = arg(argc, argv, "logits", "");
  if (!logits_path.empty()) {
    std::ofstream o(logits_path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(logits.data<float>()), static_cast<std::streamsize>(logits.numel() * sizeof(float)));
  }
  const nlohmann::json out = {{"model_type", type},
                              {"threads", xdna::num_threads()},
                              {"iters", iters},
                              {"median_s", times.empty() ? 0.0 : times[times.size() / 2]},
                              {"min_s", times.empty() ? 0.0 : times.front()},
                              {"cpu_median_s", cpu.empty() ? 0.0 : cpu[cpu.size() / 2]},
                              {"times_s", times},
                              {"logits", logits.numel()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_vision: %s\n", e.what());
    return 1;
  }
}

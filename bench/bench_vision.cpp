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
//   bench_vision --layers=resnet50 [--iters=5] [--threads=2] [--cold] [--only=7x7]
//
// --layers times host::conv2d_into alone on each distinct convolution of ResNet-50 (v1.5, 224x224;
// random weights, bias + ReLU epilogue, constant weights) and prints per shape the median ms per
// call (and the minimum, and the median process CPU time), its count in the network, the share of
// the summed time and GFLOP/s: a per-layer profile without a model directory. --cold writes a
// 64 MiB buffer before every call, as a whole forward pass does between two uses of a layer: its
// weights (all of ResNet-50's are 100 MB) then come from memory, not from the cache.
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
#include "host/conv.h"
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

// One distinct convolution of ResNet-50 at 224x224 and how often the network runs it.
struct LayerShape {
  int64_t cin, hw, cout, k, stride, count;
};
constexpr LayerShape kResNet50Layers[] = {
    {3, 224, 64, 7, 2, 1},                                                         // stem
    {64, 56, 64, 1, 1, 1},    {256, 56, 64, 1, 1, 2},  {64, 56, 64, 3, 1, 3},   {64, 56, 256, 1, 1, 4},
    {256, 56, 128, 1, 1, 1},  {128, 56, 128, 3, 2, 1}, {256, 56, 512, 1, 2, 1}, {128, 28, 512, 1, 1, 4},
    {512, 28, 128, 1, 1, 3},  {128, 28, 128, 3, 1, 3},
    {512, 28, 256, 1, 1, 1},  {256, 28, 256, 3, 2, 1}, {512, 28, 1024, 1, 2, 1}, {256, 14, 1024, 1, 1, 6},
    {1024, 14, 256, 1, 1, 5}, {256, 14, 256, 3, 1, 5},
    {1024, 14, 512, 1, 1, 1}, {512, 14, 512, 3, 2, 1}, {1024, 14, 2048, 1, 2, 1}, {512, 7, 2048, 1, 1, 3},
    {2048, 7, 512, 1, 1, 2},  {512, 7, 512, 3, 1, 2},
};

double cpu_seconds() {  // process CPU time, all threads (user + sys)
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

float pattern(int64_t i, float scale) { return scale * float((i * 2654435761u) % 2001 - 1000) / 1000.0f; }

int run_layers(int argc, char** argv) {
  if (arg(argc, argv, "layers", "") != "resnet50") throw std::invalid_argument("--layers takes resnet50");
  const int iters = std::stoi(arg(argc, argv, "iters", "5"));
  bool cold = false;
  for (int i = 1; i < argc; ++i) cold = cold || std::strcmp(argv[i], "--cold") == 0;
  std::vector<float> evict(cold ? size_t{16} << 20 : 0);
  xdna::set_num_threads(std::stoi(arg(argc, argv, "threads", "2")));
  struct Row {
    std::string name;
    int64_t count;
    double ms, min_ms, cpu_ms, gflop;
  };
  std::vector<Row> rows;
  double total = 0, total_min = 0, total_cpu = 0;
  const std::string only = arg(argc, argv, "only", "");  // e.g. "7x7": the layers whose name contains it
  for (const LayerShape& l : kResNet50Layers) {
    const std::string name = std::to_string(l.k) + "x" + std::to_string(l.k) + " s" + std::to_string(l.stride) + " " +
                             std::to_string(l.cin) + "->" + std::to_string(l.cout) + " @" + std::to_string(l.hw);
    if (name.find(only) == std::string::npos) continue;
    xdna::Tensor x = xdna::Tensor::empty({l.cin, l.hw, l.hw}), w = xdna::Tensor::empty({l.cout, l.cin, l.k, l.k});
    xdna::Tensor b = xdna::Tensor::empty({l.cout}), y;
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = pattern(i, 1.0f);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = pattern(i + 7, 0.05f);
    for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = pattern(i + 3, 0.1f);
    xdna::host::ConvParams p;
    p.stride[0] = p.stride[1] = l.stride;
    p.padding[0] = p.padding[1] = l.k / 2;
    xdna::host::ConvEpilogue e;
    e.lo = 0.0f;
    e.constant_weights = true;
    xdna::host::conv2d_into(x, w, &b, p, y, e);  // warm-up: packs and caches the weights
    std::vector<double> t, cpu;
    for (int i = 0; i < iters; ++i) {
      for (size_t j = 0; j < evict.size(); j += 16) evict[j] += 1.0f;  // one write per cache line
      const double c0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      xdna::host::conv2d_into(x, w, &b, p, y, e);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      cpu.push_back(cpu_seconds() - c0);
    }
    std::sort(t.begin(), t.end());
    std::sort(cpu.begin(), cpu.end());
    const double ms = t[t.size() / 2] * 1e3, min_ms = t.front() * 1e3, cpu_ms = cpu[cpu.size() / 2] * 1e3;
    const double gflop = 2.0 * double(y.numel()) * double(l.cin * l.k * l.k) * 1e-9;
    rows.push_back({name, l.count, ms, min_ms, cpu_ms, gflop});
    total += ms * double(l.count);
    total_min += min_ms * double(l.count);
    total_cpu += cpu_ms * double(l.count);
  }
  std::printf("%-26s %5s %9s %8s %8s %7s %8s\n", "conv", "count", "ms/call", "min ms", "CPU ms", "share", "GFLOP/s");
  for (const Row& r : rows)
    std::printf("%-26s %5lld %9.3f %8.3f %8.3f %6.1f%% %8.1f\n", r.name.c_str(), static_cast<long long>(r.count), r.ms,
                r.min_ms, r.cpu_ms, 100.0 * r.ms * double(r.count) / total, r.gflop / (r.ms * 1e-3));
  std::printf("sum of convolutions (x count): median %.2f ms, min %.2f ms, process CPU %.2f ms "
              "(%d threads, %d calls each%s)\n",
              total, total_min, total_cpu, xdna::num_threads(), iters, cold ? ", cache flushed before each" : "");
  return 0;
}

int run(int argc, char** argv) {
  if (!arg(argc, argv, "layers", "").empty()) return run_layers(argc, argv);
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

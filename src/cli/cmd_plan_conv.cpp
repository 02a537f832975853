#include "cli/cmd_plan_conv.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/config.h"
#include "models/convnet.h"
#include "models/model_store.h"
#include "models/upscaler.h"
#include "npu/planner_conv.h"
#include "pipeline/conv_npu_sim.h"

namespace fs = std::filesystem;

namespace xdna::cli {

namespace {

// The model file or directory MODEL names (a path, or a name in the store), or "".
std::string locate(const ConvPlanCliOptions& o) {
  if (fs::exists(o.model)) return o.model;
  const ModelStore store(resolve_store(o.store));
  if (!valid_model_name(o.model) || !store.find(o.model)) return "";
  return store.model_dir(o.model);
}

// An upscaler's network file at `path` (a TF.js model.json, a dir with x2/ (or the smallest
// x<N>/) model.json, or a PyTorch / safetensors ESPCN or EDSR), or "".
std::string upscaler_file(const std::string& path) {
  if (fs::is_regular_file(path)) {
    const std::string ext = fs::path(path).extension().string();
    if (ext == ".json" || ext == ".pt" || ext == ".pth" || ext == ".safetensors") return path;
    return "";
  }
  for (int n = 2; n <= 16; ++n)
    if (fs::is_regular_file(fs::path(path) / ("x" + std::to_string(n)) / "model.json"))
      return (fs::path(path) / ("x" + std::to_string(n)) / "model.json").string();
  if (fs::is_regular_file(fs::path(path) / "model.json")) return (fs::path(path) / "model.json").string();
  return "";
}

bool is_conv_classifier_dir(const std::string& dir) {
  if (!fs::is_directory(dir)) return false;
  if (std::ifstream in(fs::path(dir) / "config.json"); in) {
    const nlohmann::json cfg = nlohmann::json::parse(in, nullptr, false);
    return cfg.is_object() && cfg.value("model_type", "") == "resnet";
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".pth" || e.path().extension() == ".pt") return true;
  return false;
}

std::pair<int64_t, int64_t> parse_size(const std::string& s, int64_t dh, int64_t dw) {
  if (s.empty()) return {dh, dw};
  const size_t x = s.find('x');
  try {
    if (x != std::string::npos) {
      size_t used = 0;
      const long long h = std::stoll(s.substr(0, x), &used);
      if (used == x) {
        const std::string rest = s.substr(x + 1);
        const long long w = std::stoll(rest, &used);
        if (used == rest.size() && h > 0 && w > 0 && h <= 8192 && w <= 8192) return {h, w};
      }
    }
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("plan: --image-size '" + s + "' is not HxW (1..8192 each)");
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a;
  in >> a;
  return a.empty() ? "unknown" : a;
}

// Median of 3 timed runs after one warm-up, in ms (measured on this CPU).
double median_ms(const std::function<void()>& f) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[1];
}

Tensor random_input(std::vector<int64_t> shape, float lo, float hi) {
  Tensor t = Tensor::empty(shape);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

}  // namespace

bool run_conv_plan_if_conv_model(const ConvPlanCliOptions& o) {
  const std::string path = locate(o);
  if (path.empty()) return false;
  const npu::XclbinPolicy policy = o.xclbin == "per-design" ? npu::XclbinPolicy::PerDesign : npu::XclbinPolicy::Single;
  std::optional<npu::ConvPlan> plan;
  std::function<void()> host_forward;
  std::unique_ptr<ConvNet> net;
  UpscalerNet up;
  if (is_conv_classifier_dir(path)) {
    net = ConvNet::load(path);
    const auto [h, w] = parse_size(o.image_size, net->spec().image_size, net->spec().image_size);
    plan = npu::plan_conv_model(convnet_plan_input(*net, h, w, o.model), policy);
    const Tensor px = random_input({1, net->spec().channels, h, w}, -2, 2);
    host_forward = [&, px] { net->forward(px); };
  } else if (const std::string file = upscaler_file(path); !file.empty()) {
    try {
      up = load_upscaler(file);
    } catch (const std::exception&) {
      if (fs::path(file).extension() == ".safetensors") return false;  // some other model's weights
      throw;
    }
    const auto [h, w] = parse_size(o.image_size, 256, 256);
    plan = npu::plan_conv_model(upscaler_plan_input(up, h, w, o.model), policy);
    const Tensor x = random_input({3, h, w}, 0, 255);
    host_forward = [&, x] { run_upscaler(up, x); };
  } else {
    return false;
  }
  double host_ms = -1;
  if (o.measure_host) host_ms = median_ms(host_forward);
  if (o.json) {
    nlohmann::json j = plan->to_json();
    if (host_ms >= 0)
      j["host_measured"] = {{"ms", host_ms}, {"label", "host backend (measured, this CPU, median of 3)"},
                            {"load_average", load_average()}};
    std::printf("%s\n", j.dump(2).c_str());
    return true;
  }
  std::printf("%s", plan->text().c_str());
  if (host_ms >= 0)
    std::printf("host backend (measured, this CPU, 1-min load average %s): %.2f ms per image (median of 3)\n",
                load_average().c_str(), host_ms);
  return true;
}

}  // namespace xdna::cli

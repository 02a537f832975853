// `npu bench upscale --model M (--image IN | --size N) [--scale S] [--tile T] [--runs R] [--warmup W]
// [--out PNG] [--json]`: super-resolution timed warm, in-process. The model is loaded once, the
// image upscaled W times untimed (first-touch page faults, thread start), then R times timed; the
// median is the figure. That is how a peer runtime is timed (ONNX Runtime's session.run after a
// warm-up, its arena reused: bench/bench_sr_vs_ort.py), so the two are comparable. The first
// upscale of the process (what one `npu upscale` run times, cold) is reported too, labelled.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/cpu.h"
#include "core/parallel.h"
#include "pipeline/upscale.h"

namespace fs = std::filesystem;

namespace xdna::cli {
namespace {

struct BenchUpscaleOptions {
  std::string model;  // a model file (.json, .pt, .pth, .safetensors) or a directory with x<S>/model.json
  std::string image;  // input image; empty: a synthetic --size x --size one
  int size = 256;
  int scale = 0;  // 0: whatever the model does; else it must match
  int tile = 0;
  int runs = 5;
  int warmup = 1;
  float range = 255;
  std::string out;  // optional PNG of the last output (for comparing against a peer)
  bool json = false;
};

std::string model_file(const BenchUpscaleOptions& o) {
  if (o.model.empty()) throw std::invalid_argument("bench upscale: --model is required");
  if (fs::is_regular_file(o.model)) return o.model;
  if (fs::is_directory(o.model)) {
    if (o.scale > 0 && fs::is_regular_file(fs::path(o.model) / ("x" + std::to_string(o.scale)) / "model.json"))
      return (fs::path(o.model) / ("x" + std::to_string(o.scale)) / "model.json").string();
    if (fs::is_regular_file(fs::path(o.model) / "model.json")) return (fs::path(o.model) / "model.json").string();
    throw std::invalid_argument("bench upscale: directory " + o.model + " has no model.json" +
                                (o.scale > 0 ? " nor x" + std::to_string(o.scale) + "/model.json" : ""));
  }
  throw std::invalid_argument("bench upscale: --model " + o.model + " is not a file or directory");
}

// A fixed, deterministic image with edges and gradients in every channel.
Image synthetic_image(int side) {
  Image img;
  img.width = img.height = side;
  img.rgb.resize(static_cast<size_t>(side) * side * 3);
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x)
      for (int c = 0; c < 3; ++c)
        img.rgb[(static_cast<size_t>(y) * side + x) * 3 + c] = static_cast<uint8_t>((x * 7 + y * 13 + c * 50 + (x ^ y)) % 256);
  return img;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_bench_upscale(const BenchUpscaleOptions& o) {
  if (o.runs < 1 || o.warmup < 1 || o.size < 1)
    throw std::invalid_argument("bench upscale: --runs, --warmup and --size must be >= 1");
  if (o.range != 1 && o.range != 255) throw std::invalid_argument("bench upscale: --range must be 1 or 255");
  Upscaler up;
  up.net = load_upscaler(model_file(o));
  up.input_max = up.output_max = o.range;
  if (o.scale > 0 && up.net.scale != o.scale)
    throw std::invalid_argument("bench upscale: " + up.net.origin + " upscales " + std::to_string(up.net.scale) +
                                "x, not " + std::to_string(o.scale) + "x");
  const Image img = o.image.empty() ? synthetic_image(o.size) : load_image(o.image);
  UpscaleOptions opts;
  opts.tile = o.tile;

  // The first upscale of the process is the cold one (what a one-shot `npu upscale` times); any
  // further warm-up runs are untimed.
  Image out;
  auto t0 = std::chrono::steady_clock::now();
  out = upscale_image(up, img, opts);
  const double first = seconds_since(t0);
  for (int i = 1; i < o.warmup; ++i) out = upscale_image(up, img, opts);
  std::vector<double> seconds;
  for (int i = 0; i < o.runs; ++i) {
    t0 = std::chrono::steady_clock::now();
    out = upscale_image(up, img, opts);
    seconds.push_back(seconds_since(t0));
  }
  if (!o.out.empty()) encode_png(out, o.out);
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  const int tile = auto_tile_size(up.net, opts);

  if (o.json) {
    const nlohmann::json j = {{"model", up.net.origin},
                              {"width", img.width},
                              {"height", img.height},
                              {"scale", up.net.scale},
                              {"tile", tile},
                              {"threads", num_threads()},
                              {"isa", isa_name(active_isa())},
                              {"warmup", o.warmup},
                              {"runs", o.runs},
                              {"median_s", median},
                              {"min_s", sorted.front()},
                              {"max_s", sorted.back()},
                              {"run_s", seconds},
                              {"first_s", first}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s: %dx%d -> %dx%d (x%d, tile %d), %d threads, isa %s\n", up.net.origin.c_str(), img.width, img.height,
              out.width, out.height, up.net.scale, tile, num_threads(), isa_name(active_isa()).c_str());
  std::printf("warm: median %.1f ms (min %.1f, max %.1f over %d runs, after %d warm-up)\n", median * 1e3,
              sorted.front() * 1e3, sorted.back() * 1e3, o.runs, o.warmup);
  std::printf("cold: first upscale of the process %.1f ms (what one `npu upscale` run times)\n", first * 1e3);
}

}  // namespace

void add_bench_upscale_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("upscale", "Super-resolution timed warm in-process (median of --runs)");
  static BenchUpscaleOptions o;
  cmd->add_option("--model,-m", o.model,
                  "Model file (TF.js model.json, PyTorch .pt/.pth, .safetensors) or a directory with x<S>/model.json")
      ->required();
  cmd->add_option("--image", o.image, "Input image (PNG, JPEG, WebP); default a synthetic --size square");
  cmd->add_option("--size", o.size, "Side of the synthetic input image")->capture_default_str();
  cmd->add_option("--scale,-s", o.scale, "Expected upscaling factor (picks x<S>/ in a directory)");
  cmd->add_option("--tile", o.tile, "Tile side in input pixels (default: chosen for ~200 MB of activations)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--runs", o.runs, "Timed upscales (the median is reported)")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed upscales first (the first is reported as the cold figure)")
      ->capture_default_str();
  cmd->add_option("--range", o.range, "Model pixel range: 255 (the default) or 1");
  cmd->add_option("--out", o.out, "Write the last output as this PNG");
  cmd->add_flag("--json", o.json, "Print the figures as one JSON object");
  cmd->callback([] { run_bench_upscale(o); });
}

}  // namespace xdna::cli

// `npu upscale IN OUT [--model M] [--scale N] [--tile T]`: image super-resolution with a TF.js
// upscaler (the UpscalerJS packages). IN is any image decode_image reads; OUT is written as PNG.
// With `--video WxH`, IN and OUT are raw rgb24 frame streams ("-": stdin / stdout) for an ffmpeg
// pipe (pipeline/upscale_video.h).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "cli/commands.h"
#include "cli/config.h"
#include "models/catalog.h"
#include "models/model_store.h"
#include "pipeline/conv_npu_sim.h"
#include "pipeline/upscale.h"
#include "pipeline/upscale_precision.h"
#include "pipeline/upscale_video.h"

namespace fs = std::filesystem;

namespace xdna::cli {

namespace {

struct UpscaleCliOptions {
  std::string in, out;
  std::string model = "esrgan-slim";
  std::string store;
  int scale = 2;
  int tile = 0;
  float range = 255;
  std::string video;  // WxH of raw input frames; empty = image mode
  std::string pix_fmt = "rgb24";
  std::string precision;  // f32, bf16 (npu-sim conv numerics) or auto (the PSNR gate); "": by device
  std::string device = "host";    // host or npu-sim (convs on npu-sim's conv designs: bf16)
};

// --precision / --device -> the precision to run at, after the PSNR gate for `auto` (measured on
// a centred crop of the input, at most 128 x 128, so that its cost stays bounded).
std::string choose_precision(const UpscaleCliOptions& o, const Upscaler& up, const Image& img) {
  const std::string p = o.precision.empty() ? (o.device == "npu-sim" ? "bf16" : "f32") : o.precision;
  if (o.device == "npu-sim" && p == "f32")
    throw std::runtime_error("upscale: --device npu-sim runs the convs in bf16 (use --precision bf16 or auto)");
  if (p == "f32") return "f32";
  const PrecisionGate g = gate_upscale_precision(up, center_crop(img, 128));
  std::fprintf(stderr, "%s", g.text().c_str());
  if (p == "bf16") return "bf16";
  std::fprintf(stderr, "upscale: --precision auto chose %s (PSNR drop within %.2f dB of f32)\n", g.chosen.c_str(),
               g.max_drop_db);
  if (o.device == "npu-sim" && g.chosen != "bf16")
    throw std::runtime_error("upscale: --device npu-sim needs bf16, which the PSNR gate refused for this image");
  return g.chosen;
}

// "2, 3, 4, 8": the x<N>/model.json directories a model directory has.
std::string scales_in(const fs::path& dir) {
  std::string s;
  for (int n = 1; n <= 16; ++n)
    if (fs::is_regular_file(dir / ("x" + std::to_string(n)) / "model.json")) s += (s.empty() ? "" : ", ") + std::to_string(n);
  return s.empty() ? "none" : s;
}

// --model as a model.json, a directory with x<N>/model.json (or model.json), or a store name.
std::string resolve_model_json(const UpscaleCliOptions& o) {
  fs::path dir;
  if (fs::is_regular_file(o.model)) return o.model;
  if (fs::is_directory(o.model)) {
    dir = o.model;
  } else {
    const ModelStore store(resolve_store(o.store));
    const CatalogEntry* e = find_in_catalog(o.model);
    const std::string name = e ? e->name : o.model;
    if (!valid_model_name(name) || !store.find(name)) {
      if (e) throw std::runtime_error("upscale: model '" + name + "' is not pulled: run `npu model pull " + name + "`");
      throw std::runtime_error("upscale: unknown model '" + o.model +
                               "' (not a file, a directory or a store name; known: esrgan-slim, esrgan-default)");
    }
    dir = store.model_dir(name);
  }
  const fs::path scaled = dir / ("x" + std::to_string(o.scale)) / "model.json";
  if (fs::is_regular_file(scaled)) return scaled.string();
  if (scales_in(dir) == "none" && fs::is_regular_file(dir / "model.json")) return (dir / "model.json").string();
  throw std::runtime_error("upscale: model '" + o.model + "' has no x" + std::to_string(o.scale) +
                           " network (scales it has: " + scales_in(dir) + ")");
}

// Raw frames IN -> OUT ("-" = stdin / stdout); progress and frames per second on stderr.
void run_upscale_video(const UpscaleCliOptions& o, const Upscaler& up) {
  const VideoFrameSize size = parse_frame_size(o.video);
  std::ifstream fin;
  std::ofstream fout;
  if (o.in != "-") fin.open(o.in, std::ios::binary);
  if (o.out != "-") fout.open(o.out, std::ios::binary);
  if (o.in != "-" && !fin) throw std::runtime_error("upscale: cannot open " + o.in);
  if (o.out != "-" && !fout) throw std::runtime_error("upscale: cannot write " + o.out);
  VideoOptions vo;
  vo.upscale.tile = o.tile;
  vo.stop = install_stop_on_interrupt();
  double last_report = 0;
  vo.on_frame = [&](const VideoStats& s) {
    if (s.seconds - last_report < 5) return;
    last_report = s.seconds;
    std::fprintf(stderr, "upscale: %lld frames, %.2f frames/s\n", static_cast<long long>(s.frames), s.fps());
  };
  const VideoStats s = upscale_video(up, size, o.in == "-" ? std::cin : fin, o.out == "-" ? std::cout : fout, vo);
  std::fprintf(stderr, "upscale: %lld frames %dx%d -> %dx%d (x%d, tile %d) in %.2f s: %.2f frames/s (model %.2f s)%s\n",
               static_cast<long long>(s.frames), size.width, size.height, size.width * up.net.scale,
               size.height * up.net.scale, up.net.scale, auto_tile_size(up.net, vo.upscale), s.seconds, s.fps(),
               s.model_seconds, s.interrupted ? "; interrupted" : "");
  if (s.interrupted) throw CLI::RuntimeError(130);
}

void run_upscale(const UpscaleCliOptions& o) {
  const std::string ext = fs::path(o.out).extension().string();
  if (!o.video.empty() && o.pix_fmt != "rgb24")
    throw std::runtime_error("upscale: --pix-fmt " + o.pix_fmt + " is not supported (only rgb24)");
  if (o.video.empty() && ext != ".png" && ext != ".PNG") throw std::runtime_error("upscale: OUT must be a .png file: " + o.out);
  if (o.range != 1 && o.range != 255) throw std::runtime_error("upscale: --range must be 1 or 255");
  Upscaler up;
  up.net = load_upscaler(resolve_model_json(o));
  up.input_max = up.output_max = o.range;
  if (up.net.scale != o.scale)
    throw std::runtime_error("upscale: " + up.net.origin + " upscales " + std::to_string(up.net.scale) + "x, not " +
                             std::to_string(o.scale) + "x");
  if (!o.video.empty()) {
    if ((!o.precision.empty() && o.precision != "f32") || o.device != "host")
      throw std::runtime_error("upscale: --video runs on the host in f32 (--precision / --device are for images)");
    return run_upscale_video(o, up);
  }
  const Image img = load_image(o.in);
  UpscaleOptions opts;
  opts.tile = o.tile;
  ConvSimRun sim;
  opts.precision = choose_precision(o, up, img);
  opts.sim_run = &sim;
  const auto t0 = std::chrono::steady_clock::now();
  const Image out = upscale_image(up, img, opts);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  encode_png(out, o.out);
  std::fprintf(stderr, "%s: %dx%d -> %dx%d (x%d, tile %d) in %.2f s (%.2f s per input megapixel)\n", o.out.c_str(),
               img.width, img.height, out.width, out.height, o.scale, auto_tile_size(up.net, opts), s,
               s / (double(img.width) * img.height / 1e6));
  if (opts.precision == "bf16") {
    std::fprintf(stderr, "npu-sim: %lld convs in %lld invocations of the conv designs (bf16); on the host:\n",
                 (long long)sim.stats.convs, (long long)sim.stats.invocations);
    for (const auto& [op, why] : sim.host_ops) std::fprintf(stderr, "  %s: %s\n", op.c_str(), why.c_str());
  }
}

}  // namespace

void add_upscale_command(CLI::App& app) {
  auto o = std::make_shared<UpscaleCliOptions>();
  CLI::App* cmd = app.add_subcommand("upscale", "Super-resolution of an image (writes a PNG)");
  cmd->add_option("in", o->in, "Input image (PNG, JPEG, WebP)")->required();
  cmd->add_option("out", o->out, "Output PNG")->required();
  cmd->add_option("--model,-m", o->model,
                  "Store name (esrgan-slim, esrgan-default), a directory with x<N>/model.json, or a TF.js model.json")
      ->capture_default_str();
  cmd->add_option("--scale,-s", o->scale, "Upscaling factor (esrgan-slim: 2, 3, 4, 8)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--tile", o->tile, "Tile side in input pixels (default: chosen for ~200 MB of activations)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--range", o->range, "Model pixel range: 255 (RDN models, the default) or 1")
      ->capture_default_str();
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_option("--video", o->video,
                  "Raw video mode: IN and OUT are rgb24 frames of this size (WxH), '-' for stdin / stdout");
  cmd->add_option("--precision", o->precision,
                  "f32 (host; the default), bf16 (npu-sim's conv numerics; the default with --device npu-sim) or auto (the lowest whose PSNR drop vs f32 is <= 0.1 dB, "
                  "measured on the input by downscaling and upscaling it back)")
      ->check(CLI::IsMember({"f32", "bf16", "auto"}));
  cmd->add_option("--device", o->device, "host, or npu-sim (every conv a conv design takes on npu-sim, bf16)")
      ->check(CLI::IsMember({"host", "npu-sim"}))
      ->capture_default_str();
  cmd->add_option("--pix-fmt", o->pix_fmt, "Raw frame format with --video (rgb24)")->capture_default_str();
  cmd->callback([o] { run_upscale(*o); });
}

}  // namespace xdna::cli

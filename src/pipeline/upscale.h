// Image super-resolution: 8-bit RGB -> the model's input range -> network -> clamp and round ->
// 8-bit RGB, in tiles with overlap so that memory stays bounded for large frames. Each tile is
// run with `receptive_radius` pixels of context on every side (clamped at the image border, where
// the network's own zero padding applies as for the whole image), so the tiled result equals the
// untiled one.
#pragma once
#include <string>

#include "models/upscaler.h"
#include "pipeline/image.h"

namespace xdna {

struct Upscaler {
  UpscalerNet net;
  // UpscalerJS's modelDefinition inputRange / outputRange upper bounds: 255 for the RDN models
  // (esrgan-slim, default-model), 1 for the ESRGAN/GANs ones.
  float input_max = 255.0f, output_max = 255.0f;
};

struct ConvSimRun;  // pipeline/conv_npu_sim.h

struct UpscaleOptions {
  // "f32": the host backend; "bf16": every conv a conv design takes runs on npu-sim (bf16
  // operands and activations, f32 accumulation: pipeline/conv_npu_sim.h), the rest on the host.
  std::string precision = "f32";
  ConvSimRun* sim_run = nullptr;  // optional: collects the npu-sim convs and host ops (bf16)
  int tile = 0;  // interior tile side in input pixels; 0 = largest that fits `memory_budget`
  double memory_budget = 192.0 * (1 << 20);  // bytes of activations per tile (when tile = 0)
};

// The tile side chosen for `net` (what tile = 0 means).
int auto_tile_size(const UpscalerNet& net, const UpscaleOptions& opts);

// Alpha is dropped (the result is opaque RGB).
Image upscale_image(const Upscaler& up, const Image& img, const UpscaleOptions& opts = {});

// The model's f32 output [3, H, W] for a whole image, in output range, before clamping: for tests.
Tensor upscale_raw(const Upscaler& up, const Image& img);
Tensor upscale_raw(const Upscaler& up, const Image& img, const UpscaleOptions& opts);

// Writes 8-bit RGB PNG (libpng). Throws std::runtime_error naming the path on failure.
void encode_png(const Image& img, const std::string& path);

// PSNR in dB of two same-sized 8-bit RGB images (peak 255); +inf when identical.
double psnr_rgb(const Image& a, const Image& b);

}  // namespace xdna

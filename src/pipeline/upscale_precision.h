// The super-resolution precision gate (issue 9: "lower precisions gated on PSNR drop <= 0.1 dB
// against f32"). A high-resolution reference image is box-downscaled by the model's scale,
// upscaled back at each precision and compared with the reference (PSNR, peak 255); a
// precision's drop is PSNR(f32) - PSNR(precision). `auto` takes the lowest precision whose drop
// is within the limit. Precisions: f32 (host) and bf16 (npu-sim's conv numerics,
// pipeline/conv_npu_sim.h).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "pipeline/upscale.h"

namespace xdna {

inline constexpr double kMaxPsnrDropDb = 0.1;

struct PrecisionProbe {
  std::string precision;
  double psnr_db = 0;         // upscaled vs the reference
  double drop_db = 0;         // PSNR(f32) - psnr_db
  double psnr_vs_f32_db = 0;  // upscaled vs the f32 upscale (+inf for f32 itself)
  bool passes = false;        // drop_db <= max_drop_db
  double seconds = 0;         // host wall time of the upscale (measured)
};

struct PrecisionGate {
  double max_drop_db = kMaxPsnrDropDb;
  int width = 0, height = 0;  // the reference used (after trimming to a multiple of the scale)
  std::vector<PrecisionProbe> probes;  // f32 first, then lower precisions
  std::string chosen;                  // the lowest precision that passes
  std::string text() const;
  nlohmann::json to_json() const;
};

// Throws std::invalid_argument when the reference is smaller than one scale x scale block.
PrecisionGate gate_upscale_precision(const Upscaler& up, const Image& reference, double max_drop_db = kMaxPsnrDropDb);

// Box average of each scale x scale block (rounded): the reference's low-resolution input.
Image downscale_box(const Image& img, int scale);
// The centred crop of at most `side` x `side` pixels.
Image center_crop(const Image& img, int side);

}  // namespace xdna

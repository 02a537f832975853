// npu-sim's functional execution of a conv layer on the conv designs (design_families.h, "Conv
// designs"): the layer's output tiles are staged exactly as the design moves them (input window
// with its zero border, weights and epilogue constants per channel tile) and each core's tile is
// computed by the core kernel source aie_kernels/conv2d_bf16.cc: bf16 operands, f32 accumulation
// (one rounding per mac, in (ky, kx, ci) order), bias + activation in f32, stored to bf16 rounding
// to nearest even. Activations between layers are bf16 (returned here as f32 holding bf16 values).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "npu/design_families.h"

namespace xdna::npu {

// A conv as the npu layer needs it (the models fill it; the npu layer does not depend on them).
// w [Cout, Cin / groups, K, K] f32 (square kernel), bias [Cout] f32 or undefined. groups: 1
// (dense) or Cin == Cout (depthwise). pad: top, bottom, left, right zeros. Epilogue:
// y = clamp(v < 0 ? v * neg_slope : v, lo, hi) with v = conv + bias.
struct ConvSimLayer {
  Tensor w, bias;
  int64_t stride = 1, groups = 1;
  int64_t pad[4] = {0, 0, 0, 0};
  float lo = -3.4028235e38f, hi = 3.4028235e38f, neg_slope = 1.0f;
};

// Why a layer cannot run on the conv designs ("" when it can): groups other than 1 / depthwise,
// a non-square kernel. Shape errors throw.
std::string conv_sim_unsupported(const ConvSimLayer& l);
// The ConvShape of a layer for an input [C, H, W].
ConvShape conv_sim_shape(const ConvSimLayer& l, int64_t c, int64_t h, int64_t w);

struct ConvSimStats {
  int64_t convs = 0, invocations = 0;
  std::vector<std::string> designs;  // per conv, in order
};

// x [Cin, H, W] f32 (rounded to bf16 on the way in, as the host writes bf16 activations) ->
// [Cout, Ho, Wo] f32 holding bf16 values. Throws std::invalid_argument for a layer
// conv_sim_unsupported names or mismatched shapes.
Tensor conv2d_npu_sim(const Tensor& x, const ConvSimLayer& l, ConvSimStats* stats = nullptr, int columns = 8);

// Every value rounded to bf16 (nearest even) and back: the host side of a bf16 activation.
Tensor round_bf16(const Tensor& x);

}  // namespace xdna::npu

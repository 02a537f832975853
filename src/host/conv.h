// Convolutions, pixel shuffle and pooling on the host, channels-first without a batch dimension
// (x [C, H, W] / [C, L]), following PyTorch's definitions (no ceil mode).
#pragma once
#include <limits>

#include "core/op.h"
#include "core/tensor.h"

namespace xdna::host {

struct ConvParams {
  int64_t stride[2] = {1, 1};    // (height, width); conv1d uses index 1
  int64_t padding[2] = {0, 0};   // zeros on both sides
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

// What conv2d does to each output value while its tile is still in cache (one pass instead of
// separate bias / ReLU / residual passes over the activations):
//   y = clamp(res_scale (conv + bias) + residual, lo, hi)
// ReLU is lo = 0; ReLU6 adds hi = 6; residual (optional) has the output's shape and must not
// share y's buffer. pixel_shuffle r > 1 makes y pixel_shuffle(result, r), [Cout / r^2, Ho r, Wo r]
// (the residual still has the unshuffled shape): the direct kernel stores r = 2 straight into
// that layout, sparing super-resolution's largest buffer. constant_weights says w is never rewritten: its GEMM packing is then kept
// (keyed by w's buffer, which the cache holds) instead of being redone on every call.
struct ConvEpilogue {
  float lo = -std::numeric_limits<float>::infinity();
  float hi = std::numeric_limits<float>::infinity();
  const Tensor* residual = nullptr;
  float res_scale = 1.0f;
  bool constant_weights = false;
  int64_t pixel_shuffle = 1;
};

// x [Cin, H, W] f32, w [Cout, Cin / groups, Kh, Kw] any weight dtype, bias [Cout] -> [Cout, Ho, Wo]
// with Ho = (H + 2 pad - dil (Kh - 1) - 1) / stride + 1. Dense and grouped convolutions run as
// patches packed per thread into the f32 GEMM microkernel's panels (conv.cpp;
// conv_few_positions.cpp for few positions and whole 32-channel panels: the GEMM transposed,
// positions as the microkernel's rows); 1x1 ones on AVX-512 read x in place instead
// (conv_pointwise_avx512.cpp); depthwise ones (one input channel per group) as a direct loop.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvParams& p);
// conv2d writing into `y` when y already holds a contiguous f32 buffer of the output's size (it
// is reshaped; not when it shares x's buffer), else into a new tensor: lets a caller reuse activations.
void conv2d_into(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvParams& p, Tensor& y,
                 const ConvEpilogue& epilogue = {});
// Bytes held by the packed-weight cache of constant_weights convolutions (tests, diagnostics).
size_t conv_weight_cache_bytes();
// x [Cin, L], w [Cout, Cin / groups, K] -> [Cout, Lo]: conv2d with a height of 1.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups);

// [C r^2, H, W] -> [C, H r, W r]: out[c, h r + i, w r + j] = in[c r^2 + i r + j, h, w].
Tensor pixel_shuffle(const Tensor& x, int64_t r);

// x [C, H, W] -> [C, Ho, Wo], Ho = (H + 2 pad - k) / stride + 1; pad <= k / 2. Max ignores the
// padding; Avg divides by the full window (PyTorch's count_include_pad=True). GlobalAvg ignores
// kernel/stride/padding and gives [C, 1, 1].
Tensor pool2d(const Tensor& x, PoolKind kind, const int64_t kernel[2], const int64_t stride[2],
              const int64_t padding[2]);

}  // namespace xdna::host

// rmsnorm_bf16: one row of `hidden` values, y = x * rsqrt(mean(x^2) + eps) * (gamma + offset)
// (design family rmsnorm). npu (needs hardware and the toolchain, unverified here).
// Numerical reference: the simulator's xdna::aie::rmsnorm_bf16 (src/npu/aie_kernels.cpp): sum of squares
// in 16-lane f32 accumulators (lane l sums i = l mod 16; a tail shorter than 16 adds zeros),
// pairwise reduction, inv = 1 / sqrt(sum / n + eps) in f32, y = bf16(x * inv * (gamma + offset))
// rounding to nearest even. eps and offset are compile-time (-DXDNA_RMS_EPS, -DXDNA_RMS_OFFSET:
// Gemma stores gamma - 1, so its offset is 1); the design passes only `hidden`.
// Called by the emitted design.py as rmsnorm_bf16(x, gamma, y, hidden).
#include <cmath>

#include "xdna_aie_api.h"

#ifndef XDNA_RMS_EPS
#define XDNA_RMS_EPS 1e-6f
#endif
#ifndef XDNA_RMS_OFFSET
#define XDNA_RMS_OFFSET 0.0f
#endif

namespace {
constexpr int kRmsLanes = 16;
}

extern "C" void rmsnorm_bf16(const xk::bf16* x, const xk::bf16* gamma, xk::bf16* y, int32_t hidden) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk::accum<xk::accfloat, kRmsLanes> acc = xk::zeros<xk::accfloat, kRmsLanes>();
  for (int32_t i = 0; i < hidden; i += kRmsLanes) {
    alignas(32) xk::bf16 tail[kRmsLanes] = {};
    const xk::bf16* p = x + i;
    if (i + kRmsLanes > hidden) {  // zero-padded tail
      for (int32_t l = 0; i + l < hidden; ++l) tail[l] = x[i + l];
      p = tail;
    }
    const xk::vector<xk::bf16, kRmsLanes> v = xk::load_v<kRmsLanes>(p);
    acc = xk::mac(acc, v, v);
  }
  const float inv = 1.0f / std::sqrt(xk::reduce_add_pairwise(acc) / float(hidden) + XDNA_RMS_EPS);
  for (int32_t i = 0; i < hidden; ++i)
    y[i] = xk::to_bf16(xk::to_float(x[i]) * inv * (xk::to_float(gamma[i]) + XDNA_RMS_OFFSET), scope.mode);
}

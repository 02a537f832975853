// rmsnorm_bf16: one row of `hidden` values, y = x * rsqrt(mean(x^2) + eps) * (gamma + offset)
// (design family rmsnorm; the norms of the fused decode designs). npu (needs hardware and the
// toolchain, unverified here). Numerical reference: sum of squares in 16-lane f32 accumulators
// (lane l sums i = l mod 16; a tail shorter than 16 adds zeros), pairwise reduction,
// inv = 1 / sqrt(sum / n + eps) in f32, y = bf16(x * inv * (gamma + offset)) rounding to nearest
// even; tests/npu/test_aie_kernels.cpp checks it against a plain f32 loop in that order.
// eps and offset are runtime scalars (f32 bit patterns, as design.py passes every scalar as int32;
// Gemma stores gamma - 1, so its offset is 1), so one build serves every model.
// Called by the emitted design.py as rmsnorm_bf16(x, gamma, y, hidden, eps_bits, offset_bits).
// Status: npu (needs hardware and the toolchain, unverified here).
#include <cmath>

#include "kernels.h"

namespace {
constexpr int kRmsLanes = 16;
}

namespace xk_impl {
void rmsnorm_bf16(const xk::bf16* x, const xk::bf16* gamma, xk::bf16* y, int32_t hidden, float eps, float offset,
                  xk::Rounding rnd) {
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
  const float inv = 1.0f / std::sqrt(xk::reduce_add_pairwise(acc) / float(hidden) + eps);
  for (int32_t i = 0; i < hidden; ++i)
    y[i] = xk::to_bf16(xk::to_float(x[i]) * inv * (xk::to_float(gamma[i]) + offset), rnd);
}
}  // namespace xk_impl

extern "C" void rmsnorm_bf16(const xk::bf16* x, const xk::bf16* gamma, xk::bf16* y, int32_t hidden, int32_t eps_bits,
                             int32_t offset_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::rmsnorm_bf16(x, gamma, y, hidden, xk::f32_from_bits(eps_bits), xk::f32_from_bits(offset_bits), scope.mode);
}

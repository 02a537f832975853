// layernorm_bf16: one row of `hidden` values, y = (x - mean) * rsqrt(var + eps) * gamma + beta
// (design family layernorm: the encoders' norms). npu (needs hardware and the toolchain,
// unverified here). Numerical reference (tests/npu/test_aie_kernels.cpp): f32 sums in increasing
// i, mean = sum / n, var = sum (x - mean)^2 / n, inv = 1 / sqrt(var + eps) (exact f32 sqrt and
// divide), y = bf16((x - mean) * inv * gamma + beta) rounding to nearest even. Scalar loops here.
// Called by the emitted design.py as layernorm_bf16(x, gamma_beta, y, hidden, eps_bits):
// gamma_beta is the design's broadcast constant, gamma[hidden] then beta[hidden].
// Status: npu (needs hardware and the toolchain, unverified here).
#include <cmath>

#include "kernels.h"

namespace xk_impl {
void layernorm_bf16(const xk::bf16* x, const xk::bf16* gamma, const xk::bf16* beta, xk::bf16* y, int32_t hidden,
                    float eps, xk::Rounding rnd) {
  float sum = 0.0f;
  for (int32_t i = 0; i < hidden; ++i) sum += xk::to_float(x[i]);
  const float mean = sum / float(hidden);
  float sq = 0.0f;
  for (int32_t i = 0; i < hidden; ++i) {
    const float c = xk::to_float(x[i]) - mean;
    sq += c * c;
  }
  const float inv = 1.0f / std::sqrt(sq / float(hidden) + eps);
  for (int32_t i = 0; i < hidden; ++i)
    y[i] = xk::to_bf16((xk::to_float(x[i]) - mean) * inv * xk::to_float(gamma[i]) + xk::to_float(beta[i]), rnd);
}
}  // namespace xk_impl

extern "C" void layernorm_bf16(const xk::bf16* x, const xk::bf16* gamma_beta, xk::bf16* y, int32_t hidden,
                               int32_t eps_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::layernorm_bf16(x, gamma_beta, gamma_beta + hidden, y, hidden, xk::f32_from_bits(eps_bits), scope.mode);
}

// softmax_bf16: one row of `len` values, y = exp(x - max) / sum (design family softmax).
// npu (needs hardware and the toolchain, unverified here). Numerical reference
// (tests/npu/test_aie_kernels.cpp): max of the row, e_j = exp_lut(x_j - max) in f32, sum in
// increasing j, y_j = bf16(e_j * reciprocal_lut(sum)) rounding to nearest even. The exponentials
// are computed twice (sum pass, store pass) rather than kept: no f32 row buffer in L1.
// Called by the emitted design.py as softmax_bf16(x, y, len).
#include <limits>

#include "kernels.h"

namespace xk_impl {
void softmax_bf16(const xk::bf16* x, xk::bf16* y, int32_t len, xk::Rounding rnd) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j < len; ++j)
    if (mx < xk::to_float(x[j])) mx = xk::to_float(x[j]);
  float sum = 0.0f;
  for (int32_t j = 0; j < len; ++j) sum += xk::exp_lut(xk::to_float(x[j]) - mx);
  const float inv = xk::reciprocal_lut(sum);
  for (int32_t j = 0; j < len; ++j) y[j] = xk::to_bf16(xk::exp_lut(xk::to_float(x[j]) - mx) * inv, rnd);
}
}  // namespace xk_impl

extern "C" void softmax_bf16(const xk::bf16* x, xk::bf16* y, int32_t len) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::softmax_bf16(x, y, len, scope.mode);
}

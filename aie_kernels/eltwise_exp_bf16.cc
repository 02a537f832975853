// eltwise_exp_bf16: y = exp(x) through the exp lookup table (design family elementwise, op
// "exp"). npu (needs hardware and the toolchain, unverified here). Numerical reference:
// xdna::aie::exp_lut (src/npu/aie_numerics.h) per value, stored to bf16 rounding to nearest even
// (tests/npu/test_aie_kernels.cpp). Called by the emitted design.py as eltwise_exp_bf16(x, y, n).
#include "kernels.h"

extern "C" void eltwise_exp_bf16(const xk::bf16* x, xk::bf16* y, int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  for (int32_t i = 0; i < n; ++i) y[i] = xk::to_bf16(xk::exp_lut(xk::to_float(x[i])), scope.mode);
}

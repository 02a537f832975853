// eltwise_silu_bf16: y = x * recip(1 + exp(-x)) (design family elementwise, op "silu"; the SwiGLU
// activation). npu (needs hardware and the toolchain, unverified here). Numerical reference:
// f32 arithmetic with exp and reciprocal from the lookup tables of aie_numerics.h, stored to
// bf16 rounding to nearest even (tests/npu/test_aie_kernels.cpp). Ours rather than mlir-aie's
// silu.cc so the cores compute what npu-sim computes (silu.cc has its own formula and a fixed
// 1024 values per call). Called by the emitted design.py as eltwise_silu_bf16(x, y, n).
#include "kernels.h"

namespace xk_impl {
void silu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n, xk::Rounding rnd) {
  for (int32_t i = 0; i < n; ++i) {
    const float v = xk::to_float(x[i]);
    y[i] = xk::to_bf16(v * xk::reciprocal_lut(1.0f + xk::exp_lut(-v)), rnd);
  }
}
}  // namespace xk_impl

extern "C" void eltwise_silu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::silu_bf16(x, y, n, scope.mode);
}

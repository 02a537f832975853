// eltwise_add_bf16: c[i] = a[i] + b[i] (design family elementwise, op "add"; the residual adds).
// npu (needs hardware and the toolchain, unverified here). Numerical reference: one f32 add per
// value, stored to bf16 rounding to nearest even (tests/npu/test_aie_kernels.cpp).
// Called by the emitted design.py as eltwise_add_bf16(a, b, c, n), n values each.
// Scalar per value here; a 16-lane aie::add is the obvious speed-up once it is checked on hardware.
#include "kernels.h"

namespace xk_impl {
void add_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n, xk::Rounding rnd) {
  for (int32_t i = 0; i < n; ++i) c[i] = xk::to_bf16(xk::to_float(a[i]) + xk::to_float(b[i]), rnd);
}
}  // namespace xk_impl

extern "C" void eltwise_add_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::add_bf16(a, b, c, n, scope.mode);
}

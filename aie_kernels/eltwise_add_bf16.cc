// eltwise_add_bf16: c[i] = a[i] + b[i] (design family elementwise, op "add"; the residual
// add / the SiLU * up product of the unfused MLP). npu (needs hardware and the toolchain,
// unverified here). Numerical reference: the simulator's xdna::aie::add_bf16
// (src/npu/aie_kernels.cpp): one f32 op per value, stored to bf16 rounding to nearest even.
// Called by the emitted design.py as eltwise_add_bf16(a, b, c, n), n values each.
// Scalar per value here; a 16-lane aie::add is the obvious speed-up once it is checked on hardware.
// Status: npu (needs hardware and the toolchain, unverified here).
#include "xdna_aie_api.h"

extern "C" void eltwise_add_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  for (int32_t i = 0; i < n; ++i) c[i] = xk::to_bf16(xk::to_float(a[i]) + xk::to_float(b[i]), scope.mode);
}

// eltwise_scale_bf16: y = x * s with one f32 scale s (the 4-byte constant the design broadcasts
// to every core; design family elementwise, op "scale"). npu (needs hardware and the toolchain,
// unverified here). Numerical reference: one f32 multiply per value stored to bf16 rounding to
// nearest even (tests/npu/test_aie_kernels.cpp).
// Called by the emitted design.py as eltwise_scale_bf16(x, s, y, n).
// Status: npu (needs hardware and the toolchain, unverified here).
#include <cstring>

#include "kernels.h"

namespace xk_impl {
void scale_bf16(const xk::bf16* x, float s, xk::bf16* y, int32_t n, xk::Rounding rnd) {
  for (int32_t i = 0; i < n; ++i) y[i] = xk::to_bf16(xk::to_float(x[i]) * s, rnd);
}
}  // namespace xk_impl

extern "C" void eltwise_scale_bf16(const xk::bf16* x, const uint8_t* s_bytes, xk::bf16* y, int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  float s;
  std::memcpy(&s, s_bytes, sizeof s);  // little-endian f32, as the host writes it
  xk_impl::scale_bf16(x, s, y, n, scope.mode);
}

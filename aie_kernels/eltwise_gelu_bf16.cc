// eltwise_gelu_bf16: tanh GELU, y = x * recip(1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3)
// (design family elementwise, op "gelu": Gemma's GeGLU). npu (needs hardware and the
// toolchain, unverified here). Numerical reference: f32 arithmetic with exp and reciprocal from
// the lookup tables of aie_numerics.h, stored to bf16 rounding to nearest even
// (tests/npu/test_aie_kernels.cpp). Called by the emitted design.py as eltwise_gelu_bf16(x, y, n).
// Status: npu (needs hardware and the toolchain, unverified here).
#include "kernels.h"

namespace xk_impl {
void gelu_tanh_bf16(const xk::bf16* x, xk::bf16* y, int32_t n, xk::Rounding rnd) {
  for (int32_t i = 0; i < n; ++i) {
    const float v = xk::to_float(x[i]);
    const float u = 0.7978845608f * (v + 0.044715f * v * v * v);
    y[i] = xk::to_bf16(v * xk::reciprocal_lut(1.0f + xk::exp_lut(-2.0f * u)), rnd);
  }
}
}  // namespace xk_impl

extern "C" void eltwise_gelu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::gelu_tanh_bf16(x, y, n, scope.mode);
}

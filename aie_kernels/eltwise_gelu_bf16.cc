// eltwise_gelu_bf16: tanh GELU, y = x * recip(1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3)
// (design family elementwise, op "gelu": Gemma's GeGLU). npu (needs hardware and the
// toolchain, unverified here). Numerical reference: the simulator's xdna::aie::gelu_tanh_bf16
// (src/npu/aie_kernels.cpp), exp and reciprocal from lookup tables; stored to bf16 rounding to
// nearest even. Called by the emitted design.py as eltwise_gelu_bf16(x, y, n).
// Status: npu (needs hardware and the toolchain, unverified here).
#include "xdna_aie_api.h"

extern "C" void eltwise_gelu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  for (int32_t i = 0; i < n; ++i) {
    const float v = xk::to_float(x[i]);
    const float u = 0.7978845608f * (v + 0.044715f * v * v * v);
    y[i] = xk::to_bf16(v * xk::reciprocal_lut(1.0f + xk::exp_lut(-2.0f * u)), scope.mode);
  }
}

// gemv_bf16: y[r] = sum_k W[r][k] x[k] for one chunk of rows (design family gemv, dtype bf16),
// and gemv_bf16_f32, the same sum stored unrounded (the LM head's f32 logits).
// npu (needs hardware and the toolchain, unverified here). Numerical reference: 16-lane f32
// accumulators, lane l sums k = l mod 16 in increasing k, pairwise reduction, stored to bf16
// rounding to nearest even (the bf16 GEMV kernel sets conv_even and restores the mode: aie2p.md);
// tests/npu/test_aie_kernels.cpp checks it against a plain f32 loop in that order.
// Called by the emitted design.py as gemv_bf16(W, x, y, k, rows): W `rows` x `k` bf16 row-major
// (the core's chunk), x `k` bf16, y `rows` bf16. k must be a multiple of 16.
#include "kernels.h"

namespace {
constexpr int kGemvBf16Lanes = 16;

float dot_row(const xk::bf16* w, const xk::bf16* x, int32_t k) {
  xk::accum<xk::accfloat, kGemvBf16Lanes> acc = xk::zeros<xk::accfloat, kGemvBf16Lanes>();
  for (int32_t i = 0; i < k; i += kGemvBf16Lanes)
    acc = xk::mac(acc, xk::load_v<kGemvBf16Lanes>(w + i), xk::load_v<kGemvBf16Lanes>(x + i));
  return xk::reduce_add_pairwise(acc);
}
}  // namespace

namespace xk_impl {
void gemv_bf16(const xk::bf16* W, const xk::bf16* x, xk::bf16* y, int32_t k, int32_t rows, xk::Rounding rnd) {
  for (int32_t r = 0; r < rows; ++r) y[r] = xk::to_bf16(dot_row(W + int64_t(r) * k, x, k), rnd);
}
}  // namespace xk_impl

extern "C" void gemv_bf16(const xk::bf16* W, const xk::bf16* x, xk::bf16* y, int32_t k, int32_t rows) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::gemv_bf16(W, x, y, k, rows, scope.mode);
}

extern "C" void gemv_bf16_f32(const xk::bf16* W, const xk::bf16* x, float* y, int32_t k, int32_t rows) {
  for (int32_t r = 0; r < rows; ++r) y[r] = dot_row(W + int64_t(r) * k, x, k);
}

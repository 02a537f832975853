// gemv_bf16: y[r] = sum_k W[r][k] x[k] for one chunk of rows (design family gemv, dtype bf16).
// npu (needs hardware and the toolchain, unverified here). Numerical reference: the
// simulator's xdna::aie::gemv_bf16 (src/npu/aie_kernels.cpp): 16-lane f32 accumulators, lane l
// sums k = l mod 16 in increasing k, pairwise reduction, stored to bf16 rounding to nearest
// even (the bf16 GEMV kernel sets conv_even and restores the mode: aie2p.md).
// Called by the emitted design.py as gemv_bf16(W, x, y, k, rows): W `rows` x `k` bf16 row-major
// (the core's chunk), x `k` bf16, y `rows` bf16. k must be a multiple of 16.
#include "xdna_aie_api.h"

namespace {
constexpr int kGemvBf16Lanes = 16;

void gemv_bf16_rows(const xk::bf16* W, const xk::bf16* x, xk::bf16* y, int32_t k, int32_t rows, xk::Rounding rnd) {
  for (int32_t r = 0; r < rows; ++r) {
    xk::accum<xk::accfloat, kGemvBf16Lanes> acc = xk::zeros<xk::accfloat, kGemvBf16Lanes>();
    for (int32_t i = 0; i < k; i += kGemvBf16Lanes)
      acc = xk::mac(acc, xk::load_v<kGemvBf16Lanes>(W + r * k + i), xk::load_v<kGemvBf16Lanes>(x + i));
    y[r] = xk::to_bf16(xk::reduce_add_pairwise(acc), rnd);
  }
}
}  // namespace

extern "C" void gemv_bf16(const xk::bf16* W, const xk::bf16* x, xk::bf16* y, int32_t k, int32_t rows) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  gemv_bf16_rows(W, x, y, k, rows, scope.mode);
}

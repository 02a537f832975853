// gemv_bfp16: y[r] = sum_k W[r][k] x[k] for one chunk of rows (design family gemv, dtype bfp16),
// W and x in bfp16ebs8 (blocks of 8 values: a shared exponent byte and 8 int8 mantissas, 9
// bytes; the host encodes x truncating its mantissas), y bf16.
// npu (needs hardware and the toolchain, unverified here). The core has no bfp16 vector MAC,
// only the 8x8x8 mmul, so a GEMV is an mmul whose A holds x in row 0 (rows 1-7 zero blocks)
// and whose B holds 8 rows of W, one k-block each. Numerical reference: what npu-sim's bfp16 matmul computes for M = 1
// (aie_numerics.h mmul_bfp16_888 through src/npu/aie_kernels.cpp gemm_bfp16): per output,
// each block dot product exact, added to an f32 accumulator in increasing k with one rounding
// each, stored to bf16 rounding to nearest even; tests/npu/test_gemv_bfp16.cpp checks it bit
// for bit. Called by the emitted design.py as gemv_bfp16(W, x, y, k, rows): W `rows` rows of
// k/8 blocks (row-major), x k/8 blocks, y `rows` bf16. k must be a multiple of 8.
#include "kernels.h"

namespace {
constexpr int32_t kBfpBlock = 9;     // bytes per block of 8 values
constexpr int32_t kBfpTile = 72;     // one 8 x 8 mmul operand: 8 blocks
}  // namespace

namespace xk_impl {
void gemv_bfp16(const uint8_t* W, const uint8_t* x, xk::bf16* y, int32_t k, int32_t rows, xk::Rounding rnd) {
  const int32_t kb = k / 8;
  alignas(32) uint8_t a[kBfpTile] = {}, b[kBfpTile];  // rows 1-7 of A stay zero blocks
  for (int32_t r0 = 0; r0 < rows; r0 += 8) {
    const int32_t n = rows - r0 < 8 ? rows - r0 : 8;
    xk::mmul_bfp16 mm;
    for (int32_t i = n * kBfpBlock; i < kBfpTile; ++i) b[i] = 0;  // missing rows: zero blocks
    for (int32_t blk = 0; blk < kb; ++blk) {
      for (int32_t i = 0; i < kBfpBlock; ++i) a[i] = x[blk * kBfpBlock + i];
      for (int32_t j = 0; j < n; ++j)
        for (int32_t i = 0; i < kBfpBlock; ++i) b[j * kBfpBlock + i] = W[(int64_t(r0 + j) * kb + blk) * kBfpBlock + i];
      mm.mac(a, b);
    }
    for (int32_t j = 0; j < n; ++j) y[r0 + j] = xk::to_bf16(mm.lane(j), rnd);  // row 0 of C
  }
}
}  // namespace xk_impl

extern "C" void gemv_bfp16(const uint8_t* W, const uint8_t* x, xk::bf16* y, int32_t k, int32_t rows) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::gemv_bfp16(W, x, y, k, rows, scope.mode);
}

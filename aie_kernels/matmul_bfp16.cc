// matmul_bfp16: one core's m x n tile of C = A B (design family gemm, dtype bfp16), A and B in
// bfp16ebs8 (blocks of 8 values: a shared exponent byte and 8 int8 mantissas, 9 bytes), C bf16.
// npu (needs hardware and the toolchain, unverified here).
// Called by the emitted design.py as matmul_bfp16(A, B, C, k, k_blocks, m, n) once per k-slice:
// A the core's m x k slice as [m/8][k/8] 72-byte sub-blocks (8 rows x one block of 8 k-values:
// the gemm design's bfp16 A order), B the k x n slice pre-transposed as [n/8][k/8] sub-blocks
// (8 columns x one block along k), C the m x n output object (row-major bf16), acquired for all
// k_blocks slices of the tile. The f32 accumulator (the design's "acc" buffer) lives in L1: zeroed
// before the first slice, written to C after the k_blocks-th, rounding to nearest even.
// Each 8 x 8 tile of C runs through the 8x8x8 bfp16 mmul (xk::mmul_bfp16), k sub-blocks in
// increasing k across and within calls. m, k, n multiples of 8, m * n <= MatmulBfp16State::kMaxAcc
// (the design's Makefile builds this source with its tile: -DDIM_M=m -DDIM_K=k -DDIM_N=n).
// Numerical reference: per output, each block dot product exact (aie_numerics.h mmul_bfp16_888),
// added to the f32 accumulator in increasing k with one rounding each, stored to bf16;
// tests/npu/test_matmul_bfp16.cpp checks it bit for bit against that loop written directly, over
// many shapes and k-slicings. npu-sim's bfp16 MatMul runs xk_impl::matmul_bfp16_acc (through
// src/npu/aie_kernels.cpp gemm_bfp16).
#include "kernels.h"

namespace {
constexpr int32_t kTile = 72;  // one 8 x 8 mmul operand: 8 blocks of 9 bytes
constexpr int32_t kLanes = 64;

xk_impl::MatmulBfp16State g_own;  // the core's own (L1)
#define g_state xk::core_state(g_own)  // (xdna_aie_api.h: npu-sim runs many cores)
}  // namespace

namespace xk_impl {
void matmul_bfp16_acc(const uint8_t* A, const uint8_t* B, float* acc, int32_t m, int32_t k, int32_t n) {
  const int32_t kb = k / 8, nt = n / 8;
  for (int32_t i = 0; i < m / 8; ++i)
    for (int32_t j = 0; j < nt; ++j) {
      float* c = acc + (int64_t(i) * nt + j) * kLanes;
      xk::mmul_bfp16 mm;
      mm.load_acc(c);
      for (int32_t b = 0; b < kb; ++b)
        mm.mac(A + (int64_t(i) * kb + b) * kTile, B + (int64_t(j) * kb + b) * kTile);
      mm.store_acc(c);
    }
}

void matmul_bfp16_store(const float* acc, xk::bf16* C, int32_t m, int32_t n, xk::Rounding rnd) {
  const int32_t nt = n / 8;
  for (int32_t i = 0; i < m / 8; ++i)
    for (int32_t j = 0; j < nt; ++j) {
      const float* c = acc + (int64_t(i) * nt + j) * kLanes;
      for (int32_t r = 0; r < 8; ++r)
        for (int32_t col = 0; col < 8; ++col)
          C[int64_t(i * 8 + r) * n + j * 8 + col] = xk::to_bf16(c[r * 8 + col], rnd);
    }
}
}  // namespace xk_impl

extern "C" void matmul_bfp16(const uint8_t* A, const uint8_t* B, xk::bf16* C, int32_t k, int32_t k_blocks, int32_t m,
                             int32_t n) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::MatmulBfp16State& st = g_state;
  if (st.calls == 0)
    for (int32_t i = 0; i < m * n; ++i) st.acc[i] = 0.0f;
  xk_impl::matmul_bfp16_acc(A, B, st.acc, m, k, n);
  if (++st.calls == k_blocks) {
    xk_impl::matmul_bfp16_store(st.acc, C, m, n, scope.mode);
    st.calls = 0;
  }
}

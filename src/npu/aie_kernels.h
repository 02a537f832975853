// Core kernels written once against the AIE numerics layer (aie_numerics.h): the simulator runs
// exactly this source, and it is written so that the same code can be built for the cores
// against aie_api (docs/npu-designs.md). Shapes are checked; bad ones throw std::invalid_argument.
#pragma once
#include <cstdint>

#include "npu/aie_numerics.h"

namespace xdna::aie {

// y[r] = sum_k W[r][k] * x[k] for `rows` rows of K bf16 weights (row-major), in 16-lane f32
// accumulators (lane l sums k = l mod 16 in order), reduced pairwise, stored to bf16 with `rnd`.
// K must be a multiple of 16.
inline constexpr int kGemvLanes = 16;
void gemv_bf16(const bf16* W, const bf16* x, bf16* y, int64_t rows, int64_t K, Rounding rnd);

// int8 GEMV: 32-lane 32-bit accumulators, pairwise reduction, SRS to int8 by `shift`.
// K must be a multiple of 32.
inline constexpr int kGemvLanesI8 = 32;
void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int64_t rows, int64_t K, int shift,
               Rounding rnd);

// C[m x n] (f32, row-major) += A[m x k] * B[k x n] with bfp16ebs8 operands through the 8x8x8
// mmul, accumulating into C in place (zeroing C is a separate step, as on the cores).
// A: [m/8][k/8] 72-byte sub-blocks (8 rows x one block of 8 k-values);
// B: pre-transposed [n/8][k/8] 72-byte sub-blocks (8 columns x one block of 8 k-values).
// For each 8 x 8 output tile the k sub-blocks are accumulated in increasing k.
void gemm_bfp16(const uint8_t* A, const uint8_t* B, float* C, int64_t m, int64_t k, int64_t n);

// Shuffle row-major f32 matrices into the operand layouts above (what the host / bake step
// writes): A [m x k] -> [m/8][k/8] sub-blocks; B [k x n] -> transposed [n/8][k/8] sub-blocks.
void pack_bfp16_a(const float* A, int64_t m, int64_t k, uint8_t* out);
void pack_bfp16_b(const float* B, int64_t k, int64_t n, uint8_t* out);

}  // namespace xdna::aie

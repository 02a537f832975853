// Parameterised design families: each function returns a Design (design.h) for one shape that
// passes validate_design, or throws std::invalid_argument naming the parameter that cannot be
// met. The layouts they expect in DDR (what the bake step writes) are in docs/npu-designs.md.
//
// Shared conventions:
//  - `columns` array columns are used (1..8), each with its shim, memtile and 4 compute rows;
//  - shapes are padded up to whole tiles: the design's host buffers have the padded sizes
//    (params "*_pad"); the host pads activations, the bake step pads weights;
//  - every core keeps kStackBytes of L1 for its stack (assumption: mlir-aie's default core
//    stack is 1 KiB; aie2p.md does not list it).
#pragma once
#include <cstdint>
#include <string>

#include "npu/design.h"

namespace xdna::npu {

inline constexpr int64_t kStackBytes = 1024;

// y[N] = W[N x K] . x[K]; weights streamed from DDR (row-major N_pad x K, padded rows zero)
// through each column's memtile, split over its 4 cores in chunks of rows. dtype: BF16 (bf16
// output), BFP16 (bfp16ebs8 weights and x, bf16 output), I8 (int8 weights and x, int8 output
// after shift-round-saturate).
Design gemv_design(DType dtype, int64_t n_out, int64_t k_in, int columns = 8);

// C[M x N] = A[M x K] . B[K x N] on `columns` x `rows` cores (rows <= columns). A row-major;
// B pre-tiled by the bake step as [N_pad / n][K][n]; C row-major. Each core owns an m x n tile
// of C (m = n: the largest multiple of 8 whose double-buffered A/B tiles, accumulator and
// output fit L1, k = 64); A tiles are broadcast along array rows, B tiles down array columns.
// When a K x n panel of B fits a memtile it is loaded once and reused for every row block.
// dtype: BF16 (bf16 out), BFP16 (bf16 out), I8 (int8 out after SRS).
Design gemm_design(DType dtype, int64_t M, int64_t K, int64_t N, int columns = 8, int rows = 4);

// Elementwise over n values. Unary ops ("silu", "gelu", "exp", "scale") use 4 cores per
// column; binary ops ("add", "mul") use 2 (two input splits need 4 memtile MM2S channels each
// otherwise, and a memtile has 6). bf16 only.
Design elementwise_design(const std::string& op, int64_t n, int columns = 8);

// RMSNorm or LayerNorm over `rows` rows of `hidden` bf16 values (f32 statistics), one row per
// object, rows spread over columns x 4 cores; gamma (and beta) broadcast once per column.
enum class NormKind : uint8_t { RMS, Layer };
Design norm_design(NormKind kind, int64_t rows, int64_t hidden, int columns = 8);

// Row softmax over `rows` rows of `len` bf16 values (exp and reciprocal from lookup tables).
Design softmax_design(int64_t rows, int64_t len, int columns = 8);

// Contiguous DDR range as a shim access pattern (32-bit words, factored into sizes within the
// DMA limits). Throws if bytes is not a multiple of 4 or has no such factoring.
AccessPattern contiguous_pattern(int64_t offset_bytes, int64_t bytes);

}  // namespace xdna::npu

// The simulator's view of the core kernels: thin adapters over the sources in aie_kernels/
// (aie_kernels/kernels.h), with int64 sizes, shape checks (bad ones throw std::invalid_argument)
// and the store rounding as an argument, so tests can run a kernel under another rounding mode.
// The code that computes is the source's own (aie_kernels/<kernel>.cc, namespace xk_impl); only
// the host-side bfp16 packers are written in aie_kernels.cpp.
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
// mmul, accumulating into C in place (the entry point zeroes its L1 accumulator per tile).
// A: [m/8][k/8] 72-byte sub-blocks (8 rows x one block of 8 k-values);
// B: pre-transposed [n/8][k/8] 72-byte sub-blocks (8 columns x one block of 8 k-values).
// For each 8 x 8 output tile the k sub-blocks are accumulated in increasing k
// (aie_kernels/matmul_bfp16.cc, xk_impl::matmul_bfp16_acc; C copied to and from its tile order).
void gemm_bfp16(const uint8_t* A, const uint8_t* B, float* C, int64_t m, int64_t k, int64_t n);

// y[r] = sum_k W[r][k] x[k] with bfp16ebs8 W (rows of K/8 9-byte blocks, row-major) and x (K/8
// blocks), through the 8x8x8 mmul (x in row 0 of A, 8 rows of W as B's columns): the same bits
// as gemm_bfp16 with m = 8 and x in A's first row, stored to bf16 with `rnd`
// (aie_kernels/gemv_bfp16.cc). K must be a positive multiple of 8.
void gemv_bfp16(const uint8_t* W, const uint8_t* x, bf16* y, int64_t rows, int64_t K, Rounding rnd);

// Shuffle row-major f32 matrices into the operand layouts above (what the host / bake step
// writes): A [m x k] -> [m/8][k/8] sub-blocks; B [k x n] -> transposed [n/8][k/8] sub-blocks.
void pack_bfp16_a(const float* A, int64_t m, int64_t k, uint8_t* out);
void pack_bfp16_b(const float* B, int64_t k, int64_t n, uint8_t* out);

// ---- Decode-layer kernels (the stages of the fused designs, design_families.h) ----------------
// bf16 in and out, f32 arithmetic, stores rounded with `rnd`. The simulator runs exactly these
// for the fused designs and for the unfused ops of npu-sim (sim_backend.cpp, sim_exec.h).

// y[r] = sum_k W[r][k] x[k] as gemv_bf16, but the f32 sum is stored unrounded (LM-head logits).
void gemv_bf16_f32(const bf16* W, const bf16* x, float* y, int64_t rows, int64_t K);

// RMSNorm of one row of n values: sum of squares in 16-lane f32 accumulators (lane l sums
// i = l mod 16, a tail shorter than 16 loads zeros), pairwise reduce, inv = 1 / sqrt(sum / n + eps)
// (exact f32 sqrt and divide), y = bf16(x * inv * (gamma + offset)) with gamma + offset in f32.
void rmsnorm_bf16(const bf16* x, const bf16* gamma, float offset, float eps, bf16* y, int64_t n, Rounding rnd);

// Elementwise, one f32 op per value: y = bf16(a + b), bf16(a * b); silu(x) = x * recip(1 + exp(-x)),
// gelu_tanh(x) = x * recip(1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), exp and recip from the
// lookup tables of aie_numerics.h.
// LayerNorm of one row (f32 sums in order, y = bf16((x - mean) * inv * gamma + beta)); softmax of
// one row (table exp and reciprocal); y = bf16(x * s) with an f32 scale.
void layernorm_bf16(const bf16* x, const bf16* gamma, const bf16* beta, float eps, bf16* y, int64_t n, Rounding rnd);
void softmax_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd);
void scale_bf16(const bf16* x, float s, bf16* y, int64_t n, Rounding rnd);
void add_bf16(const bf16* a, const bf16* b, bf16* y, int64_t n, Rounding rnd);
void mul_bf16(const bf16* a, const bf16* b, bf16* y, int64_t n, Rounding rnd);
void silu_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd);
void gelu_tanh_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd);

// RoPE over `heads` heads of head_dim values in place: pairs (i, i + D/2) (half-split) or
// (2i, 2i + 1) (interleaved) rotated by cos[i], sin[i] (f32, D/2 each: the row of this position):
// a' = bf16(a c - b s), b' = bf16(b c + a s), each in f32 (two products, one add, one rounding each).
void rope_bf16(bf16* x, const float* cos, const float* sin, int64_t heads, int64_t head_dim,
               bool interleaved, Rounding rnd);

// Decode attention of one query head over `positions` keys/values ([position][head_dim] bf16,
// head_dim a multiple of 16), one flash-decoding partial: s_t = (q . k_t, 16-lane mac + pairwise
// reduce) * scale in f32; m = max s_t; p_t = bf16(exp(s_t - m)) (table exp); l = sum p_t (f32, in
// order); o = sum p_t v_t in 16-lane f32 accumulators (t in order); out = bf16(o * recip(l)).
// positions == 0 gives the empty partial: m = -inf, l = 0, out = 0.
struct AttnPartial {
  float max = 0, sum = 0;
};
AttnPartial attention_partial_bf16(const bf16* q, const bf16* K, const bf16* V, int64_t positions,
                                   int64_t head_dim, float scale, bf16* out, Rounding rnd);

// Combines the partials of one query head, in the order given: M = max m_i, w_i = exp(m_i - M) l_i,
// acc[d] = sum_i w_i o_i[d] (f32, in order), out[d] = bf16(acc[d] * recip(sum_i w_i)).
// outs: n_parts rows of head_dim bf16.
void attention_combine_bf16(const AttnPartial* parts, const bf16* outs, int64_t n_parts, int64_t head_dim,
                            bf16* out, Rounding rnd);

}  // namespace xdna::aie

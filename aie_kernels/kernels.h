// The entry points of the core kernels in this directory, as the emitted design.py calls them
// (FIFO buffers in design order, then int32 scalars). On the host every *.cc here is compiled
// into xdna_npu against the host mapping of xdna_aie_api.h, so the simulator and the tests call
// exactly the source the cores would run. Add a kernel: its .cc here, its prototype below.
#pragma once
#include <cstdint>

#include "xdna_aie_api.h"

extern "C" {
void conv2d_bf16(const xk::bf16* in, const xk::bf16* w, const float* epi, xk::bf16* out, int32_t rows, int32_t cols,
                 int32_t in_cols, int32_t c_in, int32_t ch, int32_t kernel, int32_t stride, int32_t depthwise);
// Weights and epilogue in one object (how the conv designs deliver them): epi follows the weights.
void conv2d_bf16_packed(const xk::bf16* in, const xk::bf16* w_epi, xk::bf16* out, int32_t rows, int32_t cols,
                        int32_t in_cols, int32_t c_in, int32_t ch, int32_t kernel, int32_t stride, int32_t depthwise);
void attention_encoder_bf16_init(float* m, float* l, float* o, int32_t rows, int32_t head_dim);
void attention_encoder_bf16(const xk::bf16* q, const xk::bf16* kv, float* m, float* l, float* o, float* scores,
                            int32_t rows, int32_t keys, int32_t head_dim, int32_t q_pos0, int32_t k_pos0,
                            int32_t seq_len, int32_t causal, int32_t window, int32_t scale_bits);
void attention_encoder_bf16_finish(const float* l, const float* o, xk::bf16* out, int32_t rows, int32_t head_dim);
void eltwise_add_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n);
void eltwise_exp_bf16(const xk::bf16* x, xk::bf16* y, int32_t n);
void eltwise_gelu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n);
void eltwise_mul_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n);
void eltwise_scale_bf16(const xk::bf16* x, const uint8_t* s_bytes, xk::bf16* y, int32_t n);
void gemv_bf16(const xk::bf16* W, const xk::bf16* x, xk::bf16* y, int32_t k, int32_t rows);
void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int32_t k, int32_t rows, int32_t shift);
// eps and offset (f32 bit patterns: design.py passes int32 scalars) are runtime arguments.
void rmsnorm_bf16(const xk::bf16* x, const xk::bf16* gamma, xk::bf16* y, int32_t hidden, int32_t eps_bits,
                  int32_t offset_bits);
void eltwise_silu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n);
void gemv_bf16_f32(const xk::bf16* W, const xk::bf16* x, float* y, int32_t k, int32_t rows);
void layernorm_bf16(const xk::bf16* x, const xk::bf16* gamma_beta, xk::bf16* y, int32_t hidden, int32_t eps_bits);
void softmax_bf16(const xk::bf16* x, xk::bf16* y, int32_t len);
void rope_bf16(xk::bf16* x, const float* cos_sin, int32_t heads, int32_t head_dim, int32_t interleaved);
void attention_partial_bf16(const xk::bf16* q, const xk::bf16* K, const xk::bf16* V, xk::bf16* out, float* max_sum,
                            float* scores, int32_t positions, int32_t head_dim, int32_t scale_bits);
void attention_combine_bf16(const float* max_sums, const xk::bf16* outs, xk::bf16* out, int32_t n_parts,
                            int32_t head_dim);
// mlp_fused design's stage entry points (mlp_fused_bf16.cc), in its cores' program order.
void mlp_fused_bf16_x(const xk::bf16* obj, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
void mlp_fused_bf16_gate_up(const xk::bf16* obj, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
void mlp_fused_bf16_gate_up_give(xk::bf16* slice, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
void mlp_fused_bf16_gate_up_take(const xk::bf16* act, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
void mlp_fused_bf16_down(const xk::bf16* obj, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
void mlp_fused_bf16_down_give(xk::bf16* slice, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
void mlp_fused_bf16_down_take(const xk::bf16* act, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
void mlp_fused_bf16_down_result(xk::bf16* out, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter);
// bfp16ebs8 GEMV (gemv_bfp16.cc): W rows of k/8 9-byte blocks, x k/8 blocks, y bf16.
void gemv_bfp16(const uint8_t* W, const uint8_t* x, xk::bf16* y, int32_t k, int32_t rows);
// One core's tile of the bfp16 GEMM (matmul_bfp16.cc): A [m/8][k/8] and B [n/8][k/8] 72-byte
// sub-blocks, one k-slice per call, accumulated in L1; C (m x n bf16) written on call k_blocks.
void matmul_bfp16(const uint8_t* A, const uint8_t* B, xk::bf16* C, int32_t k, int32_t k_blocks, int32_t m, int32_t n);
// qkv_rope design's stage entry points (qkv_rope_bf16.cc), in its cores' program order.
void qkv_rope_bf16_x(const xk::bf16* obj, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                     int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits, int32_t interleaved);
void qkv_rope_bf16_qkv(const xk::bf16* obj, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                       int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits, int32_t interleaved);
void qkv_rope_bf16_qkv_give(xk::bf16* slice, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                            int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                            int32_t interleaved);
void qkv_rope_bf16_qkv_take(const xk::bf16* act, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                            int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                            int32_t interleaved);
void qkv_rope_bf16_rope(const float* cos_sin, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                        int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits, int32_t interleaved);
void qkv_rope_bf16_rope_result(xk::bf16* out, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                               int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                               int32_t interleaved);
void qkv_rope_bf16_rope_kv_new(xk::bf16* out, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                               int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                               int32_t interleaved);
// attention_decode design's stage entry points (attention_decode_bf16.cc).
void attention_decode_bf16_q(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t head_dim,
                             int32_t heads, int32_t kv_heads, int32_t scale_bits);
void attention_decode_bf16_attention(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                     int32_t head_dim, int32_t heads, int32_t kv_heads, int32_t scale_bits);
void attention_decode_bf16_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores,
                                          int32_t head_dim, int32_t heads, int32_t kv_heads, int32_t scale_bits);
void attention_decode_bf16_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores,
                                          int32_t head_dim, int32_t heads, int32_t kv_heads, int32_t scale_bits);
void attention_decode_bf16_attention_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                            int32_t head_dim, int32_t heads, int32_t kv_heads, int32_t scale_bits);
// lm_head design's stage entry points (lm_head_bf16.cc).
void lm_head_bf16_x(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                    int32_t offset_bits);
void lm_head_bf16_norm(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                       int32_t offset_bits);
void lm_head_bf16_rows(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                       int32_t offset_bits);
void lm_head_bf16_rows_out(float* out, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                           int32_t offset_bits);
// decode_layer design's stage entry points (decode_layer_bf16.cc); every one takes the same
// scalars: context, core, cores, gelu, head_dim, heads, hidden, intermediate, kv_heads,
// post_norms, qk_norm, eps_bits, offset_bits, interleaved, scale_bits.
void decode_layer_bf16_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                         int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                         int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                         int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_qkv(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                           int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                           int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                           int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                            int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                            int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                            int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_rope_kv_new(xk::bf16* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                   int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                   int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                   int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_attention(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                 int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                 int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                 int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                      int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                      int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                      int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                      int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                      int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                      int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_o(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                         int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                         int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                         int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                              int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                              int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                              int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                              int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                              int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                              int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_gate_up(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                               int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                               int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                               int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_down(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                            int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                            int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                            int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                 int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                 int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                 int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                 int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                 int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                 int32_t interleaved, int32_t scale_bits);
void decode_layer_bf16_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                   int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                   int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                   int32_t interleaved, int32_t scale_bits);
// decode_layer design's stage entry points with int8 weights (decode_layer_int8.cc).
void decode_layer_int8_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                         int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                         int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                         int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_qkv(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                           int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                           int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                           int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                            int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                            int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                            int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_rope_kv_new(xk::bf16* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                   int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                   int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                   int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_attention(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                 int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                 int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                 int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                      int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                      int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                      int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                      int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                      int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                      int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_o(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                         int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                         int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                         int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                              int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                              int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                              int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                              int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                              int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                              int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_gate_up(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                               int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                               int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                               int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_down(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                            int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                            int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                            int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                 int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                 int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                 int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                 int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                 int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                 int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                   int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                   int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                   int32_t interleaved, int32_t scale_bits);
// decode_layer design's stage entry points with int8 weights and an int8 KV cache
// (decode_layer_int8_kv8.cc): decode_layer_int8's, the same scalars, plus kv_scales (the K/V
// row scales of the core's positions, before its int8 K/V blocks).
void decode_layer_int8_kv8_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                             int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                             int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                             int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_qkv(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                               int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                               int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                               int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_rope_kv_new(uint8_t* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                       int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_kv_scales(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_attention(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                          int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                          int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                          int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores,
                                          int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                          int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                          int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                          int32_t scale_bits);
void decode_layer_int8_kv8_o(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                             int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                             int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                             int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                  int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                  int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                  int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                  int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                  int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                  int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_gate_up(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                   int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                   int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                   int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                        int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                        int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                        int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                        int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                        int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                        int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_down(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv8_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                       int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
// decode_layer design's stage entry points with int8 weights and an int4 KV cache
// (decode_layer_int8_kv4.cc): decode_layer_int8_kv8's, the same scalars (int4 K/V blocks).
// These lists mirror each other on purpose: each kernel is its own object file whose symbols
// design.py names, so every kernel writes out its own entry points (their bodies one line into
// decode_layer.h), and AieKernelSources checks each prototype here against its written
// definition and arity, which a generating macro would hide.
void decode_layer_int8_kv4_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                             int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                             int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                             int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_qkv(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                               int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                               int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                               int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_rope_kv_new(uint8_t* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                       int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_kv_scales(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_attention(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                          int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                          int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                          int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores,
                                          int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                          int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                          int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                          int32_t scale_bits);
void decode_layer_int8_kv4_o(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                             int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                             int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                             int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                  int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                  int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                  int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                  int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                  int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                  int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_gate_up(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                   int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                   int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                   int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                        int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                        int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                        int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                        int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                        int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                        int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_down(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                     int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                     int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                     int32_t interleaved, int32_t scale_bits);
void decode_layer_int8_kv4_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                       int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits);
// lm_head design's stage entry points with int8 weights (lm_head_int8.cc).
void lm_head_int8_x(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                    int32_t offset_bits);
void lm_head_int8_norm(const uint8_t* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                       int32_t offset_bits);
void lm_head_int8_rows(const uint8_t* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                       int32_t offset_bits);
void lm_head_int8_rows_out(float* out, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                           int32_t offset_bits);
}

// What the entry points run, with the store rounding as an argument (the entry points pass
// round-to-nearest-even; tests may run another mode through these). f32 scalars as floats.
namespace xk_impl {
void gemv_bf16(const xk::bf16* W, const xk::bf16* x, xk::bf16* y, int32_t k, int32_t rows, xk::Rounding rnd);
void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int32_t k, int32_t rows, int32_t shift, xk::Rounding rnd);
void rmsnorm_bf16(const xk::bf16* x, const xk::bf16* gamma, xk::bf16* y, int32_t hidden, float eps, float offset,
                  xk::Rounding rnd);
void add_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n, xk::Rounding rnd);
void mul_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n, xk::Rounding rnd);
void scale_bf16(const xk::bf16* x, float s, xk::bf16* y, int32_t n, xk::Rounding rnd);
void silu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n, xk::Rounding rnd);
void gelu_tanh_bf16(const xk::bf16* x, xk::bf16* y, int32_t n, xk::Rounding rnd);
void layernorm_bf16(const xk::bf16* x, const xk::bf16* gamma, const xk::bf16* beta, xk::bf16* y, int32_t hidden,
                    float eps, xk::Rounding rnd);
void softmax_bf16(const xk::bf16* x, xk::bf16* y, int32_t len, xk::Rounding rnd);
void rope_bf16(xk::bf16* x, const float* cos, const float* sin, int32_t heads, int32_t head_dim, bool interleaved,
               xk::Rounding rnd);
void attention_partial_bf16(const xk::bf16* q, const xk::bf16* K, const xk::bf16* V, xk::bf16* out, float* max_sum,
                            float* scores, int32_t positions, int32_t head_dim, float scale, xk::Rounding rnd);
void attention_combine_bf16(const float* max_sums, const xk::bf16* outs, xk::bf16* out, int32_t n_parts,
                            int32_t head_dim, xk::Rounding rnd);
void gemv_bfp16(const uint8_t* W, const uint8_t* x, xk::bf16* y, int32_t k, int32_t rows, xk::Rounding rnd);
// acc (f32, [m/8][n/8] tiles of 64 lanes, row-major within a tile) += A * B (matmul_bfp16.cc's
// operand layouts), each 8 x 8 tile's k sub-blocks in increasing k; then acc stored to C
// (row-major m x n bf16) with `rnd`. m, k, n multiples of 8.
void matmul_bfp16_acc(const uint8_t* A, const uint8_t* B, float* acc, int32_t m, int32_t k, int32_t n);
void matmul_bfp16_store(const float* acc, xk::bf16* C, int32_t m, int32_t n, xk::Rounding rnd);
// The bfp16 GEMM core's L1 state: the f32 accumulator (the gemm design's "acc" buffer) and the
// k-slices taken. Built for the cores, the design's Makefile passes its tile (-DDIM_M, -DDIM_N);
// on the host it holds the largest m x n the design's L1 budget admits for bfp16 (64 x 104).
struct MatmulBfp16State {
#if defined(DIM_M) && defined(DIM_N)
  static constexpr int32_t kMaxAcc = DIM_M * DIM_N;
#else
  static constexpr int32_t kMaxAcc = 64 * 104;
#endif
  int32_t calls = 0;
  float acc[kMaxAcc];
};

// The state an mlp_fused core keeps in L1 between its entry points (static in mlp_fused_bf16.cc:
// each core has its own). Bounds: hidden <= kMaxHidden, intermediate <= kMaxInter, a core's
// rows <= kMaxRows. On the host npu-sim gives each core its own (xk::core_state).
struct MlpFusedState {
  static constexpr int32_t kMaxHidden = 2048, kMaxInter = 8192, kMaxRows = 256;
  xk::bf16 x[kMaxHidden], h[kMaxInter], y[kMaxHidden], gate_up[2 * kMaxRows], down[kMaxRows];
  xk::bf16 carry_values[1024];  // the down rows' head in the last gate/up object
  int32_t x_have = 0, carry = 0;
  int64_t pos = 0;  // values of the weights part taken
  xk::accum<xk::accfloat, 16> acc = xk::zeros<xk::accfloat, 16>();  // the row in flight
};
MlpFusedState& mlp_fused_bf16_state();

// The pieces of L1 state the other fused stage kernels share (fused_stage.h). Bounds: hidden
// <= kMaxHidden, q + k + v values <= kMaxQkv, a core's rows of any matrix <= kMaxRows,
// head_dim <= kMaxDim. All plain data: npu-sim keeps one per core (xk::core_state).
struct FusedBounds {
  static constexpr int32_t kMaxHidden = 4096, kMaxQkv = 8192, kMaxQ = 4096, kMaxRows = 512, kMaxDim = 256;
  static constexpr int32_t kMaxInter = 8192, kMaxCores = 32;
};
// x, its RMSNorm and the core's rows of the QKV projection (qkv_rope, decode_layer).
struct QkvPartState : FusedBounds {
  xk::bf16 x[kMaxHidden], gamma[kMaxHidden], xn[kMaxHidden], rows[kMaxRows], qkv[kMaxQkv];
  xk::bf16 q_norm[kMaxDim], k_norm[kMaxDim];
  int32_t x_have = 0;
  xk::accum<xk::accfloat, 16> acc = xk::zeros<xk::accfloat, 16>();  // the row in flight
};
// One core's flash-decoding partials, streamed K then V per KV head, and the combine of every
// core's as the exchange delivers them (attention_decode, decode_layer): each core's {max, sum}
// headers, its combine weights, 1 / L and an f32 accumulator per query head, never the gathered
// partials whole. scores: [group][positions] <= kMaxScores; a core's items (query heads) <=
// kMaxItems; query heads <= kMaxHeads.
struct AttnPartState : FusedBounds {
  static constexpr int32_t kMaxGroup = 16, kMaxScores = 8192, kMaxPartial = 16384, kMaxItems = 64, kMaxHeads = 64;
  float scores[kMaxScores], max[kMaxGroup], sum[kMaxGroup];
  xk::accum<xk::accfloat, 16> qk[kMaxGroup];                     // q . k_t of the row in flight
  xk::accum<xk::accfloat, 16> o[kMaxGroup * kMaxDim / 16];       // sum p_t v_t per query head
  uint8_t partial[kMaxPartial];                                  // f32 {max, sum} per item, then bf16 out[D] per item
  uint8_t headers[kMaxCores * kMaxItems * 8];                    // every core's {max, sum}
  float weight[kMaxCores * kMaxItems], rcp[kMaxHeads], acc[kMaxQ];  // the combine in flight
  int32_t round = 0;
};
struct QkvRopeState {
  int32_t stage = 0;
  int64_t pos = 0;  // values of the current stream part taken
  QkvPartState qkv;
};
struct AttentionDecodeState {
  int32_t stage = 0, q_have = 0;
  int64_t pos = 0;
  xk::bf16 q[FusedBounds::kMaxQ], out[FusedBounds::kMaxQ];
  AttnPartState attn;
};
struct LmHeadState : FusedBounds {
  static constexpr int32_t kMaxLogits = 512;  // two logits objects of up to 256 rows (a ring)
  int32_t stage = 0, x_have = 0, chunk_out = 0;
  int64_t pos = 0;
  xk::bf16 x[kMaxHidden], gamma[kMaxHidden], xn[kMaxHidden];
  float logits[kMaxLogits];
  xk::accum<xk::accfloat, 16> acc = xk::zeros<xk::accfloat, 16>();
};
struct DecodeLayerState : FusedBounds {
  int32_t stage = 0, carry_n = 0;
  int64_t pos = 0, carry_pos = 0;
  bool have_h1 = false, have_xn2 = false, have_h = false;
  QkvPartState qkv;
  AttnPartState attn;
  xk::bf16 attn_out[kMaxQ], o_rows[kMaxRows], h1[kMaxHidden], gamma2[kMaxHidden], xn2[kMaxHidden];
  xk::bf16 gate_up[2 * kMaxRows], h[kMaxInter], down[kMaxRows], y[kMaxHidden];
  xk::bf16 post_attn[kMaxHidden], post_ffn[kMaxHidden];  // Gemma 3's post-norm gammas
  xk::bf16 carry[2048];  // blocks of the weights that wait for an exchange (h1, then h)
  xk::accum<xk::accfloat, 16> acc = xk::zeros<xk::accfloat, 16>();
};
// The int8-weight kernels' extra L1 state (fused_stage_int8.h): the vector the rows in flight
// multiply, quantized per row (q, its scale sx), the 32-lane int32 accumulator of the row in
// flight, and each finished row's exact sum and weight scale until the core gives its values.
struct Int8RowsState {
  static constexpr int32_t kMaxVector = FusedBounds::kMaxInter, kMaxRows = 2 * FusedBounds::kMaxRows;
  alignas(32) int8_t q[kMaxVector];  // 32-lane loads at 32-byte offsets
  float sx = 0.0f;
  int32_t sums[kMaxRows];
  float scales[kMaxRows];
  xk::accum<xk::acc32, 32> acc = xk::zeros<xk::acc32, 32>();
};
// decode_layer_int8: the o, gate, up and down rows' scales, which arrive in the weights part
// (after the QK-norm gammas) and wait there for their matrices: slot m at m * kMaxRows.
struct DecodeLayerInt8State : DecodeLayerState {
  Int8RowsState i8;
  float rest_scales[4 * FusedBounds::kMaxRows];
};
// With an int8 KV cache (decode_layer_int8_kv8.cc): the core's kv_scales part as it arrived,
// per KV head of the core [position][K scale, V scale] f32 (at most kMaxKvScaleBytes).
struct DecodeLayerInt8Kv8State : DecodeLayerInt8State {
  static constexpr int32_t kMaxKvScaleBytes = 32768;
  alignas(32) uint8_t kv_scales[kMaxKvScaleBytes];
};
// With an int4 KV cache (decode_layer_int8_kv4.cc): the same scales part (a core's own copy).
struct DecodeLayerInt8Kv4State : DecodeLayerInt8Kv8State {};
struct LmHeadInt8State : LmHeadState {
  Int8RowsState i8;  // sums and scales: a ring of two logits objects, as logits
};
QkvRopeState& qkv_rope_bf16_state();
AttentionDecodeState& attention_decode_bf16_state();
LmHeadState& lm_head_bf16_state();
DecodeLayerState& decode_layer_bf16_state();
DecodeLayerInt8State& decode_layer_int8_state();
DecodeLayerInt8Kv8State& decode_layer_int8_kv8_state();
DecodeLayerInt8Kv4State& decode_layer_int8_kv4_state();
LmHeadInt8State& lm_head_int8_state();
}  // namespace xk_impl

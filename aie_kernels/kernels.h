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

// The state an mlp_fused core keeps in L1 between its entry points (static in mlp_fused_bf16.cc:
// each core has its own). Bounds: hidden <= kMaxHidden, intermediate <= kMaxInter, a core's
// rows <= kMaxRows. The host reaches it to run several cores in one process (tests).
struct MlpFusedState {
  static constexpr int32_t kMaxHidden = 2048, kMaxInter = 8192, kMaxRows = 256;
  xk::bf16 x[kMaxHidden], h[kMaxInter], y[kMaxHidden], gate_up[2 * kMaxRows], down[kMaxRows];
  xk::bf16 carry_values[1024];  // the down rows' head in the last gate/up object
  int32_t x_have = 0, carry = 0;
  int64_t pos = 0;  // values of the weights part taken
  xk::accum<xk::accfloat, 16> acc = xk::zeros<xk::accfloat, 16>();  // the row in flight
};
MlpFusedState& mlp_fused_bf16_state();
}  // namespace xk_impl

// decode_layer_bf16_*: the stage entry points of the decode_layer design (bf16 weights): one
// whole decoder layer per invocation, called by the emitted design.py in the core's program
// order (design.h CoreStep; docs/npu-designs.md, "Core programs"): x; qkv (attn-norm gamma, the
// core's QKV rows, QK-norm gammas) with its exchange; rope (QK-norm + RoPE; rope_kv_new: the new
// K/V row, core (0,2)); attention (the core's KV positions, the new token's row taken from the
// array) with its partials exchanged over several rounds and combined; o (the core's o rows)
// with its exchange and the residual add; gate_up (ffn-norm gamma, gate and up rows) with the
// exchange of act(gate) * up; down with its exchange, the residual add and down_result (the
// last core). npu (needs hardware and the toolchain, unverified here).
// Numerical reference: the composition below (npu-sim's decode_layer family runs the design's core
// programs over these entry points: src/npu/sim_exec.cpp, run_design):
// the stages of qkv_rope_bf16.cc and attention_decode_bf16.cc (fused_stage.h), then gemv_bf16
// of the o rows against the combined attention, eltwise_add_bf16 with x, rmsnorm_bf16 with the
// ffn gamma, gemv_bf16 of the gate and up rows, SiLU / tanh-GELU times up, gemv_bf16 of the down
// rows, eltwise_add_bf16. The weights part after attention ([o rows][ffn gamma][gate][up][down])
// is one stream: the gate rows need the attention residual and the down rows need h, so the
// blocks of a DDR object that reach past the exchange they wait for stay in L1 (`carry`) and are
// taken, in stream order, right after it. Rows are streamed in 16-value blocks with one row's
// 16-lane f32 accumulator live (gemv_bf16's lane order). tests/npu/test_aie_stage_kernels.cpp
// runs the design's programs over these entry points and compares with npu-sim bit for bit.
// With post_norms (Gemma 3) the o and down stages' streams end with a gamma, and the exchanged
// projection is RMS-normalised with it before the residual add.
// Scalars (name order, then the runtime ones): context, core (the core's index in (column, row)
// order), cores, gelu, head_dim, heads, hidden, intermediate, kv_heads, post_norms, qk_norm;
// eps_bits, offset_bits (RMSNorm, f32 bits), interleaved (RoPE pairs), scale_bits (attention
// scale, f32 bits; 0: 1 / sqrt(head_dim)).
// State in the core's L1 (xk_impl::DecodeLayerState; bounds in kernels.h FusedBounds).
// The stages, exchanges, norms and residual adds are decode_layer.h's; this file gives its
// weights' matmul: the 16-value blocks of bf16 rows.
#include "decode_layer.h"

namespace {

xk_impl::DecodeLayerState g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::DecodeLayerState& own_state() { return xk::core_state(g_own); }

struct Bf16Matmul {
  using Elem = xk::bf16;
  using Layer = xk_fused::DecodeShape;
  static xk_impl::DecodeLayerState& state() { return own_state(); }
  static Layer layer(const xk_fused::DecodeArgs& s) { return xk_fused::decode_shape(s); }

  static void qkv_block(const xk::bf16* blk, int64_t e, const Layer& L, xk::Rounding rnd) {
    xk_fused::qkv_block(own_state().qkv, L.q, blk, e, rnd);
  }

  // One block at value e of the weights part after attention ([o rows][post-attention gamma]
  // [ffn gamma][gate][up][down][post-FFN gamma]).
  static bool rest_block(const xk::bf16* blk, int64_t e, const Layer& L, xk::Rounding rnd) {
    xk_impl::DecodeLayerState& st = own_state();
    const int64_t post = L.post_norms ? L.hidden : 0;
    const int64_t o_end = int64_t(L.Rh) * L.q.q_dim(), pa_end = o_end + post, g_end = pa_end + L.hidden,
                  gu_end = g_end + 2 * int64_t(L.Ri) * L.hidden, d_end = gu_end + int64_t(L.Rh) * L.inter;
    float dot;
    if (e < o_end) {
      if (xk_fused::gemv_block(st.acc, blk, e, L.q.q_dim(), st.attn_out, dot))
        st.o_rows[e / L.q.q_dim()] = xk::to_bf16(dot, rnd);
    } else if (e < pa_end) {
      std::memcpy(st.post_attn + (e - o_end), blk, xk_fused::kLanes * 2);
    } else if (e < g_end) {
      std::memcpy(st.gamma2 + (e - pa_end), blk, xk_fused::kLanes * 2);
    } else if (e < gu_end) {
      if (!st.have_h1) return false;
      if (!st.have_xn2) {
        xk_impl::rmsnorm_bf16(st.h1, st.gamma2, st.xn2, L.hidden, L.q.eps, L.q.offset, rnd);
        st.have_xn2 = true;
      }
      if (xk_fused::gemv_block(st.acc, blk, e - g_end, L.hidden, st.xn2, dot))
        st.gate_up[(e - g_end) / L.hidden] = xk::to_bf16(dot, rnd);
    } else if (e < d_end) {
      if (!st.have_h) return false;
      if (xk_fused::gemv_block(st.acc, blk, e - gu_end, L.inter, st.h, dot))
        st.down[(e - gu_end) / L.inter] = xk::to_bf16(dot, rnd);
    } else if (e < d_end + post) {
      std::memcpy(st.post_ffn + (e - d_end), blk, xk_fused::kLanes * 2);
    }
    return true;
  }

  // bf16 rows are stored as each finishes (to_bf16 of its dot product): nothing left to do.
  static void rows_out(xk::bf16*, int32_t, int32_t, xk::Rounding) {}
};
using Stages = xk_fused::DecodeLayer<Bf16Matmul>;

}  // namespace

namespace xk_impl {
DecodeLayerState& decode_layer_bf16_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void decode_layer_bf16_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                    int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                    int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::x(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_qkv(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                      int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                      int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                      int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::qkv(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  Stages::qkv_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  Stages::qkv_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores,
                                       int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::rope(cos_sin, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_rope_kv_new(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                              int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                              int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                              int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                              int32_t scale_bits) {
  Stages::rope_kv_new(out, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_attention(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  Stages::attention(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores,
                                                 int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                 int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                 int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                 int32_t interleaved, int32_t scale_bits) {
  Stages::attention_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores,
                                                 int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                 int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                 int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                 int32_t interleaved, int32_t scale_bits) {
  Stages::attention_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_o(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                    int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                    int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::o(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                         int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                         int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                         int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                         int32_t scale_bits) {
  Stages::o_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                         int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                         int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                         int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                         int32_t scale_bits) {
  Stages::o_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_gate_up(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                          int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                          int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                          int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                          int32_t scale_bits) {
  Stages::gate_up(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  Stages::gate_up_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  Stages::gate_up_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_down(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                       int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::down(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  Stages::down_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  Stages::down_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_bf16_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                              int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                              int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                              int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                              int32_t scale_bits) {
  Stages::down_result(out, XK_DECODE_ARGS);
}

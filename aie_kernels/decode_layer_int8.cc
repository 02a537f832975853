// decode_layer_int8_*: the stage entry points of the decode_layer design with int8 weights: one
// whole decoder layer per invocation, called by the emitted design.py in the core's program
// order (design.h CoreStep; docs/npu-designs.md, "Core programs"), the same stages, exchanges
// and scalars as decode_layer_bf16.cc. npu (needs hardware and the toolchain, unverified here).
// Numerical reference: decode_layer_bf16.cc with each GEMV replaced by fused_stage_int8.h's
// (the vector quantized per row, exact 32-bit sums, float(sum) * sx * scale stored to bf16):
// attn-norm, QKV rows, QK-norm + RoPE and the attention over the bf16 KV cache are
// fused_stage.h's, called as decode_layer_bf16.cc calls them; then o rows against the combined
// attention, residual add, ffn-norm, gate and up rows, SiLU / tanh-GELU times up, down rows,
// residual add (Gemma 3's post-norms as in bf16). tests/npu/test_sim_fused_int8.cpp compares it
// bit for bit with that sequence built from the kernels' pieces, and with npu-sim's unfused
// int8 MatMuls within a stated tolerance.
// Streams: the weights parts hold int8 matrix slices ([rows][k] bytes, then the rows' f32
// scales padded to 32 bytes; fused_stage_int8.h) between the bf16 gammas, taken in 32-byte
// blocks: [attn gamma][QKV rows][QKV scales][q_norm, k_norm gammas][o scales][gate scales]
// [up scales][down scales]; [o rows][post-attention gamma][ffn gamma][gate rows][up rows]
// [down rows][post-FFN gamma]. The later matrices' scales ride in the first part (kept in L1
// until their rows: rest_scales), so neither part ends in a partial object for them. Blocks that
// wait for an exchange stay in L1 (`carry`) and are taken in stream order right after it, as in
// decode_layer_bf16.cc.
// Scalars: those of decode_layer_bf16 (context, core, cores, gelu, head_dim, heads, hidden,
// intermediate, kv_heads, post_norms, qk_norm; eps_bits, offset_bits, interleaved, scale_bits).
// State in the core's L1 (xk_impl::DecodeLayerInt8State; bounds in kernels.h FusedBounds).
// The stages, exchanges, norms and residual adds are decode_layer.h's (as decode_layer_bf16.cc);
// this file gives its weights' matmul: the 32-byte blocks of int8 rows, scales and gammas.
#include "decode_layer_int8.h"

namespace {

xk_impl::DecodeLayerInt8State g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::DecodeLayerInt8State& own_state() { return xk::core_state(g_own); }

struct Own {
  static constexpr int32_t kKvBits = 16;
  static xk_impl::DecodeLayerInt8State& state() { return own_state(); }
};
using Stages = xk_fused::DecodeLayer<xk_fused::int8_layer::Int8Matmul<Own>>;

}  // namespace

namespace xk_impl {
DecodeLayerInt8State& decode_layer_int8_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void decode_layer_int8_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits) {
  Stages::x(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_qkv(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                      int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                      int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                      int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::qkv(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  Stages::qkv_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  Stages::qkv_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores,
                                       int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::rope(cos_sin, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_rope_kv_new(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                              int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                              int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                              int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                              int32_t scale_bits) {
  Stages::rope_kv_new(out, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_attention(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  Stages::attention(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores,
                                                 int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                 int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                                 int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                                 int32_t scale_bits) {
  Stages::attention_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores,
                                                 int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                 int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                                 int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                                 int32_t scale_bits) {
  Stages::attention_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_o(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter, int32_t kv_heads,
                                    int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                    int32_t interleaved, int32_t scale_bits) {
  Stages::o(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                         int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                         int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                         int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::o_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                         int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                         int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                         int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::o_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_gate_up(const uint8_t* obj, int32_t context, int32_t core, int32_t cores,
                                          int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                          int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                          int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                          int32_t scale_bits) {
  Stages::gate_up(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  Stages::gate_up_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  Stages::gate_up_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_down(const uint8_t* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                       int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::down(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  Stages::down_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  Stages::down_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                              int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                              int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                              int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                              int32_t scale_bits) {
  Stages::down_result(out, XK_DECODE_ARGS);
}

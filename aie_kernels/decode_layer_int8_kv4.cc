// decode_layer_int8_kv4_*: the stage entry points of the decode_layer design with int8 weights
// and an int4 KV cache (DecodeLayerShape::kv_int4, design name suffix "_kv4"), called by the
// emitted design.py in the core's program order.
// npu (needs hardware and the toolchain, unverified here).
// Numerical reference: decode_layer_int8_kv8.cc with the cache's rows quantized to int4 as below.
// Everything is decode_layer_int8_kv8.cc's (the same row scales, kv_scales part and views)
// except the cache's values are signed int4, two a byte (value 2i in the low nibble of byte i):
//  - rope_kv_new drains the new token's K and V rows quantized per (KV head, row): scale =
//    max|x| / 7, values rounded to nearest even and saturated to +-7 (quantize_row_int4,
//    fused_stage_int8.h), as [K int4][V int4][per KV head: K scale, V scale f32];
//  - attention reads the core's int4 K/V blocks (padded to objects of 4096 values), unpacks each
//    16 values to int8 and dequantizes them as the int8 cache's (fused_stage.h attn_block<int8_t>);
//    the new token's own K/V stay bf16.
// Scalars: those of decode_layer_int8. State: xk_impl::DecodeLayerInt8Kv4State.
// tests/npu/test_sim_fused_kv.cpp (SimFusedKv4) checks it against the bf16-KV kernel (bit for bit where int4
// holds the cache exactly, within a stated tolerance otherwise); test_sim_fused_llm.cpp
// (SimFusedInt4KvLlm) the decoder fixtures against the host decoder in f32.
#include "decode_layer_int8.h"

namespace {

xk_impl::DecodeLayerInt8Kv4State g_own;  // the core's own (L1)
xk_impl::DecodeLayerInt8Kv4State& own_state() { return xk::core_state(g_own); }

struct Own {
  static constexpr int32_t kKvBits = 4;
  static xk_impl::DecodeLayerInt8Kv4State& state() { return own_state(); }
};
using Stages = xk_fused::DecodeLayer<xk_fused::int8_layer::Int8Matmul<Own>>;

}  // namespace

namespace xk_impl {
DecodeLayerInt8Kv4State& decode_layer_int8_kv4_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void decode_layer_int8_kv4_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                        int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                        int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                        int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::x(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_qkv(const uint8_t* obj, int32_t context, int32_t core, int32_t cores,
                                          int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                          int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                          int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                          int32_t scale_bits) {
  Stages::qkv(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  Stages::qkv_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  Stages::qkv_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  Stages::rope(cos_sin, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_rope_kv_new(uint8_t* out, int32_t context, int32_t core, int32_t cores,
                                                  int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                  int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                  int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                  int32_t interleaved, int32_t scale_bits) {
  Stages::rope_kv_new_quantized<4>(out, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_kv_scales(const uint8_t* obj, int32_t context, int32_t core, int32_t cores,
                                                int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                                int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                                int32_t scale_bits) {
  Stages::kv_scales(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_attention(const uint8_t* obj, int32_t context, int32_t core, int32_t cores,
                                                int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                                int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                                int32_t scale_bits) {
  Stages::attention_quantized<4>(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores,
                                                     int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                     int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                     int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                     int32_t interleaved, int32_t scale_bits) {
  Stages::attention_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores,
                                                     int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                     int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                     int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                     int32_t interleaved, int32_t scale_bits) {
  Stages::attention_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_o(const uint8_t* obj, int32_t context, int32_t core, int32_t cores,
                                        int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                        int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                        int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  Stages::o(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                             int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                             int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                             int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                             int32_t scale_bits) {
  Stages::o_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                             int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                             int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                             int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                             int32_t scale_bits) {
  Stages::o_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_gate_up(const uint8_t* obj, int32_t context, int32_t core, int32_t cores,
                                              int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                              int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                              int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                              int32_t scale_bits) {
  Stages::gate_up(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                                   int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                   int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                   int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                   int32_t interleaved, int32_t scale_bits) {
  Stages::gate_up_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                                   int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                   int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                   int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                   int32_t interleaved, int32_t scale_bits) {
  Stages::gate_up_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_down(const uint8_t* obj, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  Stages::down(obj, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                                int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                                int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                                int32_t scale_bits) {
  Stages::down_give(slice, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                                int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                                int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                                int32_t scale_bits) {
  Stages::down_take(act, XK_DECODE_ARGS);
}

extern "C" void decode_layer_int8_kv4_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                                  int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                  int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                  int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                  int32_t interleaved, int32_t scale_bits) {
  Stages::down_result(out, XK_DECODE_ARGS);
}

// attention_decode_bf16_*: the stage entry points of the attention_decode design, called by the
// emitted design.py in the core's program order (design.h CoreStep; docs/npu-designs.md, "Core
// programs"): q (per 2 KiB object of the replicated query heads), attention (per object of the
// core's kv part: per KV head of the core, K then V of its block of positions), attention_give /
// attention_take (the partials, one slice per exchange round), attention_result (the last core).
// npu (needs hardware and the toolchain, unverified here).
// Numerical reference: npu-sim's attention (src/npu/sim_exec.cpp): per query head of the core's
// KV heads, attention_partial_bf16 over its positions (s_t from a 16-lane f32 q . k_t, pairwise
// reduced, times scale; p_t = bf16(exp(s_t - max)); o in 16-lane f32 accumulators over t in
// order; out = bf16(o * recip(sum p_t))), then attention_combine_bf16's sums over every core's
// partials of the head in core order, taken round by round as the exchange delivers them
// (fused_stage.h attn_take: the {max, sum} headers first). K and V arrive in 16-value blocks: one q . k accumulator per query
// head of the group is live, the scores stay in L1 until V starts, and V feeds the o accumulators
// row by row (each lane still sums over t in order, so the result is attention_partial_bf16's).
// tests/npu/test_aie_stage_kernels.cpp runs the design's programs over these entry points and
// compares with npu-sim bit for bit.
// Scalars (name order, then the runtime one): context, core (the core's index in (column, row)
// order), cores, head_dim, heads, kv_heads; scale_bits (f32 bits; 0: 1 / sqrt(head_dim)).
// State in the core's L1 (xk_impl::AttentionDecodeState; bounds in kernels.h).
#include "fused_stage.h"

namespace {

xk_impl::AttentionDecodeState g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::AttentionDecodeState& own_state() { return xk::core_state(g_own); }

enum Stage : int32_t { kNone, kQ, kAttention };

xk_fused::AttnShape shape(int32_t context, int32_t cores, int32_t head_dim, int32_t heads, int32_t kv_heads,
                          int32_t scale_bits) {
  return {cores, heads, kv_heads, head_dim, context, xk::f32_from_bits(scale_bits)};
}

// The exchange slice: 256 bytes, or the whole partial when smaller (design_families_fused.cpp).
int32_t slice_bytes(const xk_fused::AttnShape& s) { return s.partial_bytes() < 256 ? s.partial_bytes() : 256; }

void enter(int32_t stage) {
  if (own_state().stage == stage) return;
  own_state().stage = stage;
  own_state().pos = 0;
  if (stage == kQ) own_state().q_have = 0, own_state().attn.round = 0;  // a new invocation
}

}  // namespace

namespace xk_impl {
AttentionDecodeState& attention_decode_bf16_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void attention_decode_bf16_q(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                        int32_t head_dim, int32_t heads, int32_t kv_heads, int32_t scale_bits) {
  enter(kQ);
  xk_fused::take_vector(own_state().q, own_state().q_have, heads * head_dim, obj);
}

extern "C" void attention_decode_bf16_attention(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                                int32_t head_dim, int32_t heads, int32_t kv_heads,
                                                int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kAttention);
  const xk_fused::AttnShape s = shape(context, cores, head_dim, heads, kv_heads, scale_bits);
  for (int32_t i = 0; i < xk_fused::kObjValues; i += xk_fused::kLanes, own_state().pos += xk_fused::kLanes)
    xk_fused::attn_block(own_state().attn, s, core, obj + i, own_state().pos, own_state().q, -1, nullptr, nullptr, scope.mode);
}

extern "C" void attention_decode_bf16_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores,
                                                     int32_t head_dim, int32_t heads, int32_t kv_heads,
                                                     int32_t scale_bits) {
  const xk_fused::AttnShape s = shape(context, cores, head_dim, heads, kv_heads, scale_bits);
  xk_fused::attn_give(own_state().attn, s, slice, slice_bytes(s));
}

extern "C" void attention_decode_bf16_attention_take(const uint8_t* act, int32_t context, int32_t core,
                                                     int32_t cores, int32_t head_dim, int32_t heads,
                                                     int32_t kv_heads, int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const xk_fused::AttnShape s = shape(context, cores, head_dim, heads, kv_heads, scale_bits);
  xk_fused::attn_take(own_state().attn, s, act, slice_bytes(s), own_state().out, scope.mode);
}

extern "C" void attention_decode_bf16_attention_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                                       int32_t head_dim, int32_t heads, int32_t kv_heads,
                                                       int32_t scale_bits) {
  std::memcpy(out, own_state().out, size_t(heads) * size_t(head_dim) * 2);
}

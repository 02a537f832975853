// qkv_rope_bf16_*: the stage entry points of the qkv_rope design (bf16 weights), called by the
// emitted design.py in the core's program order (design.h CoreStep; docs/npu-designs.md, "Core
// programs"): x (per 2 KiB object of the replicated input), qkv (per object of the weights part:
// attn-norm gamma, the core's QKV rows, the QK-norm gammas), qkv_give / qkv_take (exchange of
// the rows), rope (the RoPE row of this position), rope_result (q, the last core) and
// rope_kv_new (the new K/V row, core (0,2)). npu (needs hardware and the toolchain, unverified here).
// Numerical reference: the composition below (npu-sim's qkv_rope family runs the design's core
// programs over these entry points: src/npu/sim_exec.cpp, run_design):
// rmsnorm_bf16 of x, gemv_bf16 of the core's rows against it (rows streamed in 16-value blocks,
// one row's 16-lane f32 accumulator live: gemv_bf16's lane order), the exchange, then per head
// rmsnorm_bf16 with the q / k gamma (QK-norm, when used) and rope_bf16 over q and k heads.
// tests/npu/test_aie_stage_kernels.cpp runs the design's programs over these entry points and
// compares with npu-sim bit for bit.
// Scalars (name order, then the runtime ones): cores, head_dim, heads, hidden, kv_heads,
// qk_norm; eps_bits, offset_bits (RMSNorm eps and gamma offset, f32 bits), interleaved (RoPE pairs).
// State in the core's L1 (xk_impl::QkvRopeState; bounds in kernels.h FusedBounds).
#include "fused_stage.h"

namespace {

xk_impl::QkvRopeState g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::QkvRopeState& own_state() { return xk::core_state(g_own); }

enum Stage : int32_t { kNone, kX, kQkv, kRope };

xk_fused::QkvShape shape(int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden, int32_t kv_heads,
                         int32_t qk_norm, int32_t eps_bits, int32_t offset_bits) {
  return {cores, heads, kv_heads, head_dim, hidden, qk_norm != 0, xk::f32_from_bits(eps_bits),
          xk::f32_from_bits(offset_bits)};
}

// A stage's first call starts its stream part.
void enter(int32_t stage) {
  if (own_state().stage == stage) return;
  own_state().stage = stage;
  own_state().pos = 0;
  if (stage == kX) own_state().qkv.x_have = 0;  // a new invocation
}

}  // namespace

namespace xk_impl {
QkvRopeState& qkv_rope_bf16_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void qkv_rope_bf16_x(const xk::bf16* obj, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                                int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                int32_t interleaved) {
  enter(kX);
  xk_fused::take_vector(own_state().qkv.x, own_state().qkv.x_have, hidden, obj);
}

extern "C" void qkv_rope_bf16_qkv(const xk::bf16* obj, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden,
                                  int32_t kv_heads, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                  int32_t interleaved) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kQkv);
  const xk_fused::QkvShape s = shape(cores, head_dim, heads, hidden, kv_heads, qk_norm, eps_bits, offset_bits);
  for (int32_t i = 0; i < xk_fused::kObjValues; i += xk_fused::kLanes, own_state().pos += xk_fused::kLanes)
    xk_fused::qkv_block(own_state().qkv, s, obj + i, own_state().pos, scope.mode);
}

extern "C" void qkv_rope_bf16_qkv_give(xk::bf16* slice, int32_t cores, int32_t head_dim, int32_t heads,
                                       int32_t hidden, int32_t kv_heads, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved) {
  const xk_fused::QkvShape s = shape(cores, head_dim, heads, hidden, kv_heads, qk_norm, eps_bits, offset_bits);
  xk_fused::give_rows(slice, own_state().qkv.rows, s.rows(), s.slice_values());
}

extern "C" void qkv_rope_bf16_qkv_take(const xk::bf16* act, int32_t cores, int32_t head_dim, int32_t heads,
                                       int32_t hidden, int32_t kv_heads, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved) {
  const xk_fused::QkvShape s = shape(cores, head_dim, heads, hidden, kv_heads, qk_norm, eps_bits, offset_bits);
  xk_fused::take_rows(own_state().qkv.qkv, act, s.n(), s.rows(), s.slice_values());
}

extern "C" void qkv_rope_bf16_rope(const float* cos_sin, int32_t cores, int32_t head_dim, int32_t heads,
                                   int32_t hidden, int32_t kv_heads, int32_t qk_norm, int32_t eps_bits,
                                   int32_t offset_bits, int32_t interleaved) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kRope);
  const xk_fused::QkvShape s = shape(cores, head_dim, heads, hidden, kv_heads, qk_norm, eps_bits, offset_bits);
  xk_fused::qk_norm_rope(own_state().qkv, s, cos_sin, interleaved != 0, scope.mode);
}

extern "C" void qkv_rope_bf16_rope_result(xk::bf16* out, int32_t cores, int32_t head_dim, int32_t heads,
                                          int32_t hidden, int32_t kv_heads, int32_t qk_norm, int32_t eps_bits,
                                          int32_t offset_bits, int32_t interleaved) {
  std::memcpy(out, own_state().qkv.qkv, size_t(heads) * size_t(head_dim) * 2);
}

extern "C" void qkv_rope_bf16_rope_kv_new(xk::bf16* out, int32_t cores, int32_t head_dim, int32_t heads,
                                          int32_t hidden, int32_t kv_heads, int32_t qk_norm, int32_t eps_bits,
                                          int32_t offset_bits, int32_t interleaved) {
  std::memcpy(out, own_state().qkv.qkv + int64_t(heads) * head_dim, 2 * size_t(kv_heads) * size_t(head_dim) * 2);
}

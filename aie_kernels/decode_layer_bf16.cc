// decode_layer_bf16_*: the stage entry points of the decode_layer design (bf16 weights): one
// whole decoder layer per invocation, called by the emitted design.py in the core's program
// order (design.h CoreStep; docs/npu-designs.md, "Core programs"): x; qkv (attn-norm gamma, the
// core's QKV rows, QK-norm gammas) with its exchange; rope (QK-norm + RoPE; rope_kv_new: the new
// K/V row, core (0,2)); attention (the core's KV positions, the new token's row taken from the
// array) with its partials exchanged over several rounds and combined; o (the core's o rows)
// with its exchange and the residual add; gate_up (ffn-norm gamma, gate and up rows) with the
// exchange of act(gate) * up; down with its exchange, the residual add and down_result (the
// last core). npu (needs hardware and the toolchain, unverified here).
// Numerical reference: npu-sim's decode_layer family (src/npu/sim_exec.cpp, run_decode_layer):
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
#include "fused_stage.h"

namespace {

xk_impl::DecodeLayerState g_state;  // the core's own (L1)

enum Stage : int32_t { kNone, kX, kQkv, kRope, kAttention, kO, kGateUp, kDown };

struct Layer {
  xk_fused::QkvShape q;
  xk_fused::AttnShape a;
  int32_t hidden, inter, Rh, Ri, slice_values;
  bool post_norms;  // Gemma 3: RMSNorm of the o and down projections before each residual add
};

Layer layer(int32_t context, int32_t cores, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
            int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
            int32_t scale_bits) {
  Layer L{{cores, heads, kv_heads, head_dim, hidden, qk_norm != 0, xk::f32_from_bits(eps_bits),
           xk::f32_from_bits(offset_bits)},
          {cores, heads, kv_heads, head_dim, context, xk::f32_from_bits(scale_bits)},
          hidden, inter, xk_fused::ceil_div(hidden, cores), xk_fused::ceil_div(inter, cores), 0, post_norms != 0};
  // One slice size for every exchange: the largest of the core's QKV, gate/up and o/down rows.
  int32_t m = L.q.rows() > L.Ri ? L.q.rows() : L.Ri;
  if (L.Rh > m) m = L.Rh;
  L.slice_values = xk_fused::round_up(2 * m, 4) / 2;
  return L;
}
#define LAYER_ARGS \
  context, cores, head_dim, heads, hidden, inter, kv_heads, post_norms, qk_norm, eps_bits, offset_bits, scale_bits

void enter(int32_t stage, bool part_start) {
  xk_impl::DecodeLayerState& st = g_state;
  if (st.stage == stage) return;
  st.stage = stage;
  if (part_start) st.pos = 0;
  if (stage == kX) {  // a new invocation
    st.qkv.x_have = 0, st.attn.round = 0, st.carry_n = 0;
    st.have_h1 = st.have_xn2 = st.have_h = false;
  }
}

// One block at value e of the weights part after attention; false (and nothing done) when it
// waits for an exchange.
bool rest_block(const xk::bf16* blk, int64_t e, const Layer& L, xk::Rounding rnd) {
  xk_impl::DecodeLayerState& st = g_state;
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

// Gemma 3's post-norm of an exchanged projection (npu-sim: rmsnorm before the residual add).
void norm_in_place(xk::bf16* v, const xk::bf16* gamma, const Layer& L, xk::Rounding rnd) {
  xk::bf16 tmp[xk_impl::FusedBounds::kMaxHidden];
  xk_impl::rmsnorm_bf16(v, gamma, tmp, L.hidden, L.q.eps, L.q.offset, rnd);
  std::memcpy(v, tmp, size_t(L.hidden) * 2);
}

// An o or down exchange taken: the projection's rows from every core, Gemma 3's post-norm with
// `gamma`, then out = residual + projection.
void take_residual(const xk::bf16* act, const xk::bf16* gamma, const xk::bf16* residual, xk::bf16* out,
                   const Layer& L, xk::Rounding rnd) {
  xk::bf16 v[xk_impl::FusedBounds::kMaxHidden];
  xk_fused::take_rows(v, act, L.hidden, L.Rh, L.slice_values);
  if (L.post_norms) norm_in_place(v, gamma, L, rnd);
  xk_impl::add_bf16(residual, v, out, L.hidden, rnd);
}

// The blocks held back, in stream order, up to the first that still waits.
void take_carry(const Layer& L, xk::Rounding rnd) {
  xk_impl::DecodeLayerState& st = g_state;
  int32_t i = 0;
  while (i < st.carry_n && rest_block(st.carry + i, st.carry_pos + i, L, rnd)) i += xk_fused::kLanes;
  std::memmove(st.carry, st.carry + i, size_t(st.carry_n - i) * 2);
  st.carry_n -= i, st.carry_pos += i;
}

// One DDR object of the weights part after attention.
void rest(const xk::bf16* obj, const Layer& L, xk::Rounding rnd) {
  xk_impl::DecodeLayerState& st = g_state;
  constexpr int32_t kCarry = int32_t(sizeof st.carry / sizeof st.carry[0]);
  for (int32_t i = 0; i < xk_fused::kObjValues; i += xk_fused::kLanes, st.pos += xk_fused::kLanes) {
    if (st.carry_n == 0 && rest_block(obj + i, st.pos, L, rnd)) continue;
    if (st.carry_n == 0) st.carry_pos = st.pos;
    if (st.carry_n + xk_fused::kLanes <= kCarry) {  // (a design never holds back more than an object)
      std::memcpy(st.carry + st.carry_n, obj + i, xk_fused::kLanes * 2);
      st.carry_n += xk_fused::kLanes;
    }
  }
}

}  // namespace

namespace xk_impl {
DecodeLayerState& decode_layer_bf16_state() { return g_state; }
}  // namespace xk_impl

extern "C" void decode_layer_bf16_x(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                    int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                    int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  enter(kX, true);
  xk_fused::take_vector(g_state.qkv.x, g_state.qkv.x_have, hidden, obj);
}

extern "C" void decode_layer_bf16_qkv(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                      int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                      int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                      int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kQkv, true);
  const Layer L = layer(LAYER_ARGS);
  for (int32_t i = 0; i < xk_fused::kObjValues; i += xk_fused::kLanes, g_state.pos += xk_fused::kLanes)
    xk_fused::qkv_block(g_state.qkv, L.q, obj + i, g_state.pos, scope.mode);
}

extern "C" void decode_layer_bf16_qkv_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  const Layer L = layer(LAYER_ARGS);
  xk_fused::give_rows(slice, g_state.qkv.rows, L.q.rows(), L.slice_values);
}

extern "C" void decode_layer_bf16_qkv_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                           int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                           int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                           int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                           int32_t scale_bits) {
  const Layer L = layer(LAYER_ARGS);
  xk_fused::take_rows(g_state.qkv.qkv, act, L.q.n(), L.q.rows(), L.slice_values);
}

extern "C" void decode_layer_bf16_rope(const float* cos_sin, int32_t context, int32_t core, int32_t cores,
                                       int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kRope, true);
  const Layer L = layer(LAYER_ARGS);
  xk_fused::qk_norm_rope(g_state.qkv, L.q, cos_sin, interleaved != 0, scope.mode);
}

extern "C" void decode_layer_bf16_rope_kv_new(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                              int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                              int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                              int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                              int32_t scale_bits) {
  std::memcpy(out, g_state.qkv.qkv + int64_t(heads) * head_dim, 2 * size_t(kv_heads) * size_t(head_dim) * 2);
}

extern "C" void decode_layer_bf16_attention(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kAttention, true);
  const Layer L = layer(LAYER_ARGS);
  const xk::bf16* k_new = g_state.qkv.qkv + L.q.q_dim();  // the new token's K and V (after RoPE)
  for (int32_t i = 0; i < xk_fused::kObjValues; i += xk_fused::kLanes, g_state.pos += xk_fused::kLanes)
    xk_fused::attn_block(g_state.attn, L.a, core, obj + i, g_state.pos, g_state.qkv.qkv, context - 1, k_new,
                         k_new + L.q.kv_dim(), scope.mode);
}

extern "C" void decode_layer_bf16_attention_give(uint8_t* slice, int32_t context, int32_t core, int32_t cores,
                                                 int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                 int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                 int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                 int32_t interleaved, int32_t scale_bits) {
  const Layer L = layer(LAYER_ARGS);
  xk_fused::attn_give(g_state.attn, L.a, slice, 2 * L.slice_values);
}

extern "C" void decode_layer_bf16_attention_take(const uint8_t* act, int32_t context, int32_t core, int32_t cores,
                                                 int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                                 int32_t inter, int32_t kv_heads, int32_t post_norms,
                                                 int32_t qk_norm, int32_t eps_bits, int32_t offset_bits,
                                                 int32_t interleaved, int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const Layer L = layer(LAYER_ARGS);
  xk_fused::attn_take(g_state.attn, L.a, act, 2 * L.slice_values, g_state.attn_out, scope.mode);
}

extern "C" void decode_layer_bf16_o(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores, int32_t gelu,
                                    int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                    int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                    int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kO, true);
  rest(obj, layer(LAYER_ARGS), scope.mode);
}

extern "C" void decode_layer_bf16_o_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                         int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                         int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                         int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                         int32_t scale_bits) {
  const Layer L = layer(LAYER_ARGS);
  xk_fused::give_rows(slice, g_state.o_rows, L.Rh, L.slice_values);
}

extern "C" void decode_layer_bf16_o_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                         int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                         int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                         int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                         int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const Layer L = layer(LAYER_ARGS);
  take_residual(act, g_state.post_attn, g_state.qkv.x, g_state.h1, L, scope.mode);  // the attention residual
  g_state.have_h1 = true;
  take_carry(L, scope.mode);
}

extern "C" void decode_layer_bf16_gate_up(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                          int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                          int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                          int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                          int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kGateUp, false);
  rest(obj, layer(LAYER_ARGS), scope.mode);
}

extern "C" void decode_layer_bf16_gate_up_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const Layer L = layer(LAYER_ARGS);
  xk::bf16 act[xk_impl::FusedBounds::kMaxRows];
  if (gelu) xk_impl::gelu_tanh_bf16(g_state.gate_up, act, L.Ri, scope.mode);
  else xk_impl::silu_bf16(g_state.gate_up, act, L.Ri, scope.mode);
  xk_fused::give_rows(slice, act, 0, L.slice_values);  // zeros
  xk_impl::mul_bf16(act, g_state.gate_up + L.Ri, slice, L.Ri, scope.mode);
}

extern "C" void decode_layer_bf16_gate_up_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                               int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                               int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                               int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                               int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const Layer L = layer(LAYER_ARGS);
  xk_fused::take_rows(g_state.h, act, inter, L.Ri, L.slice_values);
  g_state.have_h = true;
  take_carry(L, scope.mode);
}

extern "C" void decode_layer_bf16_down(const xk::bf16* obj, int32_t context, int32_t core, int32_t cores,
                                       int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden, int32_t inter,
                                       int32_t kv_heads, int32_t post_norms, int32_t qk_norm, int32_t eps_bits,
                                       int32_t offset_bits, int32_t interleaved, int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(kDown, false);
  rest(obj, layer(LAYER_ARGS), scope.mode);
}

extern "C" void decode_layer_bf16_down_give(xk::bf16* slice, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  const Layer L = layer(LAYER_ARGS);
  xk_fused::give_rows(slice, g_state.down, L.Rh, L.slice_values);
}

extern "C" void decode_layer_bf16_down_take(const xk::bf16* act, int32_t context, int32_t core, int32_t cores,
                                            int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                            int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                            int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                            int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const Layer L = layer(LAYER_ARGS);
  take_residual(act, g_state.post_ffn, g_state.h1, g_state.y, L, scope.mode);  // the MLP residual
}

extern "C" void decode_layer_bf16_down_result(xk::bf16* out, int32_t context, int32_t core, int32_t cores,
                                              int32_t gelu, int32_t head_dim, int32_t heads, int32_t hidden,
                                              int32_t inter, int32_t kv_heads, int32_t post_norms, int32_t qk_norm,
                                              int32_t eps_bits, int32_t offset_bits, int32_t interleaved,
                                              int32_t scale_bits) {
  std::memcpy(out, g_state.y, size_t(hidden) * 2);
}

// The decode_layer design's stages, exchanges, norms and residual adds, shared by its bf16 and
// int8 kernels (decode_layer_bf16.cc, decode_layer_int8.cc), which differ only in how the
// weights parts are streamed and multiplied. npu (needs hardware and the toolchain, unverified
// here). DecodeLayer<M> holds the bodies of the entry points; M, the weights' matmul, gives:
//   Elem: a weights stream element (xk::bf16, or uint8_t for int8 rows); streams are taken in
//     32-byte blocks, a DDR object is 2 KiB.
//   Layer: the layer's shape (a DecodeShape, plus M's own stream offsets); layer(args).
//   state(): the core's L1 state (an xk_impl::DecodeLayerState).
//   qkv_block(blk, e, L, rnd): one block at element e of the weights part before attention.
//   rest_block(blk, e, L, rnd): one block at element e of the part after attention; false (and
//     nothing done) when it waits for an exchange.
//   or, instead of those two, qkv_run(blk, n, e, L, rnd) / rest_run(blk, n, e, L, rnd): the
//     blocks at element e, at most n elements (whole blocks), that one call takes (a run, e.g.
//     a matrix's rows up to their end); returns the elements taken, rest_run 0 when it waits.
//   rows_out(out, rows, first, rnd): the values of the core's `rows` finished rows (from slot
//     `first` of M's own store) into out, before they are given to an exchange.
#pragma once
#include "fused_stage_int8.h"

namespace xk_fused {

// The scalars of every decode_layer entry point, in their order (name order, then the runtime ones).
struct DecodeArgs {
  int32_t context, core, cores, gelu, head_dim, heads, hidden, inter, kv_heads, post_norms, qk_norm, eps_bits,
      offset_bits, interleaved, scale_bits;
};
// The entry point's own parameters as a DecodeArgs.
#define XK_DECODE_ARGS                                                                                           \
  xk_fused::DecodeArgs {                                                                                         \
    context, core, cores, gelu, head_dim, heads, hidden, inter, kv_heads, post_norms, qk_norm, eps_bits,         \
        offset_bits, interleaved, scale_bits                                                                     \
  }

struct DecodeShape {
  QkvShape q;
  AttnShape a;
  int32_t hidden, inter, Rh, Ri, slice_values;
  bool post_norms;  // Gemma 3: RMSNorm of the o and down projections before each residual add
};

// The resident cache is read in whole objects per K / V block (design_families_fused.cpp):
// positions a block is padded to, for `per_object` cache values in a 2 KiB object (1024 bf16,
// 2048 int8).
inline int32_t kv_block_align(int32_t per_object, int32_t head_dim) {
  int32_t g = per_object, b = head_dim;
  while (b != 0) {
    const int32_t t = g % b;
    g = b, b = t;
  }
  return per_object / g;
}

inline DecodeShape decode_shape(const DecodeArgs& s) {
  DecodeShape L{{s.cores, s.heads, s.kv_heads, s.head_dim, s.hidden, s.qk_norm != 0, xk::f32_from_bits(s.eps_bits),
                 xk::f32_from_bits(s.offset_bits)},
                {s.cores, s.heads, s.kv_heads, s.head_dim, s.context, xk::f32_from_bits(s.scale_bits)},
                s.hidden, s.inter, ceil_div(s.hidden, s.cores), ceil_div(s.inter, s.cores), 0, s.post_norms != 0};
  // One slice size for every exchange: the largest of the core's QKV, gate/up and o/down rows.
  int32_t m = L.q.rows() > L.Ri ? L.q.rows() : L.Ri;
  if (L.Rh > m) m = L.Rh;
  L.slice_values = round_up(2 * m, 4) / 2;
  L.a.block_align = kv_block_align(kObjValues, s.head_dim);
  return L;
}

template <class M>
struct DecodeLayer {
  using E = typename M::Elem;
  using Layer = typename M::Layer;
  static constexpr int32_t kBlock = int32_t(kLanes * 2 / sizeof(E));     // elements of a 32-byte block
  static constexpr int32_t kObj = int32_t(kObjValues * 2 / sizeof(E));  // elements of a 2 KiB object
  enum Stage : int32_t { kNone, kX, kQkv, kRope, kKvScales, kAttention, kO, kGateUp, kDown };

  static void enter(int32_t stage, bool part_start) {
    auto& st = M::state();
    if (st.stage == stage) return;
    st.stage = stage;
    if (part_start) st.pos = 0;
    if (stage == kX) {  // a new invocation
      st.qkv.x_have = 0, st.attn.round = 0, st.carry_n = 0;
      st.have_h1 = st.have_xn2 = st.have_h = false;
    }
  }

  // An o or down exchange taken: the projection's rows from every core, Gemma 3's post-norm with
  // `gamma` (npu-sim: rmsnorm before the residual add), then out = residual + projection.
  static void take_residual(const xk::bf16* act, const xk::bf16* gamma, const xk::bf16* residual, xk::bf16* out,
                            const Layer& L, xk::Rounding rnd) {
    xk::bf16 v[xk_impl::FusedBounds::kMaxHidden];
    take_rows(v, act, L.hidden, L.Rh, L.slice_values);
    if (L.post_norms) {
      xk::bf16 tmp[xk_impl::FusedBounds::kMaxHidden];
      xk_impl::rmsnorm_bf16(v, gamma, tmp, L.hidden, L.q.eps, L.q.offset, rnd);
      std::memcpy(v, tmp, size_t(L.hidden) * 2);
    }
    xk_impl::add_bf16(residual, v, out, L.hidden, rnd);
  }

  // M's run forms, or its block forms one block a call.
  static int32_t qkv_run(const E* blk, int32_t n, int64_t e, const Layer& L, xk::Rounding rnd) {
    if constexpr (requires { M::qkv_run(blk, n, e, L, rnd); }) {
      return M::qkv_run(blk, n, e, L, rnd);
    } else {
      M::qkv_block(blk, e, L, rnd);
      return kBlock;
    }
  }
  static int32_t rest_run(const E* blk, int32_t n, int64_t e, const Layer& L, xk::Rounding rnd) {
    if constexpr (requires { M::rest_run(blk, n, e, L, rnd); }) return M::rest_run(blk, n, e, L, rnd);
    else return M::rest_block(blk, e, L, rnd) ? kBlock : 0;
  }

  // The blocks held back, in stream order, up to the first that still waits.
  static void take_carry(const Layer& L, xk::Rounding rnd) {
    auto& st = M::state();
    E* carry = reinterpret_cast<E*>(st.carry);
    int32_t i = 0;
    while (i < st.carry_n) {
      const int32_t n = rest_run(carry + i, st.carry_n - i, st.carry_pos + i, L, rnd);
      if (n == 0) break;
      i += n;
    }
    std::memmove(carry, carry + i, size_t(st.carry_n - i) * sizeof(E));
    st.carry_n -= i, st.carry_pos += i;
  }

  // One DDR object of the weights part after attention; blocks that wait for an exchange stay
  // in L1 (`carry`).
  static void rest(const E* obj, const Layer& L, xk::Rounding rnd) {
    auto& st = M::state();
    E* carry = reinterpret_cast<E*>(st.carry);
    constexpr int32_t kCarry = int32_t(sizeof st.carry) / int32_t(sizeof(E));  // elements
    for (int32_t i = 0; i < kObj;) {
      const int32_t n = st.carry_n == 0 ? rest_run(obj + i, kObj - i, st.pos, L, rnd) : 0;
      if (n > 0) {
        i += n, st.pos += n;
        continue;
      }
      if (st.carry_n == 0) st.carry_pos = st.pos;
      if (st.carry_n + kBlock <= kCarry) {  // (a design never holds back more than an object)
        std::memcpy(carry + st.carry_n, obj + i, kBlock * sizeof(E));
        st.carry_n += kBlock;
      }
      i += kBlock, st.pos += kBlock;
    }
  }

  // ---- the entry points' bodies, in program order ----
  static void x(const xk::bf16* obj, const DecodeArgs& s) {
    enter(kX, true);
    take_vector(M::state().qkv.x, M::state().qkv.x_have, s.hidden, obj);
  }

  static void qkv(const E* obj, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    enter(kQkv, true);
    const Layer L = M::layer(s);
    auto& st = M::state();
    for (int32_t i = 0; i < kObj;) {
      const int32_t n = qkv_run(obj + i, kObj - i, st.pos, L, scope.mode);
      i += n, st.pos += n;
    }
  }

  static void qkv_give(xk::bf16* slice, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    const Layer L = M::layer(s);
    M::rows_out(M::state().qkv.rows, L.q.rows(), 0, scope.mode);
    give_rows(slice, M::state().qkv.rows, L.q.rows(), L.slice_values);
  }

  static void qkv_take(const xk::bf16* act, const DecodeArgs& s) {
    const Layer L = M::layer(s);
    take_rows(M::state().qkv.qkv, act, L.q.n(), L.q.rows(), L.slice_values);
  }

  static void rope(const float* cos_sin, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    enter(kRope, true);
    const Layer L = M::layer(s);
    qk_norm_rope(M::state().qkv, L.q, cos_sin, s.interleaved != 0, scope.mode);
  }

  static void rope_kv_new(xk::bf16* out, const DecodeArgs& s) {
    std::memcpy(out, M::state().qkv.qkv + int64_t(s.heads) * s.head_dim,
                2 * size_t(s.kv_heads) * size_t(s.head_dim) * 2);
  }

  static void attention(const xk::bf16* obj, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    enter(kAttention, true);
    const Layer L = M::layer(s);
    auto& st = M::state();
    const xk::bf16* k_new = st.qkv.qkv + L.q.q_dim();  // the new token's K and V (after RoPE)
    for (int32_t i = 0; i < kObjValues; i += kLanes, st.pos += kLanes)
      attn_block(st.attn, L.a, s.core, obj + i, st.pos, st.qkv.qkv, s.context - 1, k_new, k_new + L.q.kv_dim(),
                 scope.mode);
  }

  // ---- an int8 or int4 KV cache, Bits a value (decode_layer_int8_kv8.cc, decode_layer_int8_kv4.cc;
  // M's layer() sets block_align for the cache's objects: 2048 int8 or 4096 int4 values) ----
  // The new K and V rows quantized per (head, row): int8 as quantize_row (max|x| / 127, nearest
  // even, saturated to +-127), int4 as quantize_row_int4 (max|x| / 7, nearest even, saturated to
  // +-7, two a byte). out = [K values][V values] (kv_dim * Bits / 8 bytes each), then per KV
  // head: K scale, V scale f32.
  template <int32_t Bits>
  static void rope_kv_new_quantized(uint8_t* out, const DecodeArgs& s) {
    static_assert(Bits == 8 || Bits == 4, "an int8 or int4 KV cache");
    const int32_t D = s.head_dim, kvd = s.kv_heads * D;
    const xk::bf16* kv = M::state().qkv.qkv + int64_t(s.heads) * D;
    for (int32_t which = 0; which < 2; ++which)
      for (int32_t h = 0; h < s.kv_heads; ++h) {
        const int64_t at = int64_t(which) * kvd + int64_t(h) * D;  // the row's first value
        float scale;
        if constexpr (Bits == 8) scale = quantize_row(kv + at, reinterpret_cast<int8_t*>(out) + at, D);
        else scale = quantize_row_int4(kv + at, out + at / 2, D);
        std::memcpy(out + 2 * int64_t(kvd) * Bits / 8 + (int64_t(h) * 2 + which) * 4, &scale, 4);
      }
  }

  // The core's K/V scales part (before its quantized K/V blocks), kept as it arrives.
  static void kv_scales(const uint8_t* obj, const DecodeArgs&) {
    enter(kKvScales, true);
    auto& st = M::state();
    if (st.pos + 2 * kObjValues <= int64_t(sizeof st.kv_scales))  // (bounded by the design's checks)
      std::memcpy(st.kv_scales + st.pos, obj, 2 * size_t(kObjValues));
    st.pos += 2 * kObjValues;
  }

  // The core's quantized K/V blocks, an object of 2048 int8 or 4096 int4 values, dequantized as
  // they are taken (attn_block<int8_t> with the row scales kv_scales kept); int4 values are
  // unpacked to int8 first, 16 at a time.
  template <int32_t Bits>
  static void attention_quantized(const uint8_t* obj, const DecodeArgs& s) {
    static_assert(Bits == 8 || Bits == 4, "an int8 or int4 KV cache");
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    enter(kAttention, true);
    const Layer L = M::layer(s);
    auto& st = M::state();
    const xk::bf16* k_new = st.qkv.qkv + L.q.q_dim();
    const float* scales = reinterpret_cast<const float*>(st.kv_scales);
    alignas(32) int8_t unpacked[kLanes];
    for (int32_t i = 0; i < kObjValues * 16 / Bits; i += kLanes, st.pos += kLanes) {
      const int8_t* values = unpacked;
      if constexpr (Bits == 8) values = reinterpret_cast<const int8_t*>(obj) + i;
      else unpack_int4(obj + i / 2, unpacked, kLanes);
      attn_block(st.attn, L.a, s.core, values, st.pos, st.qkv.qkv, s.context - 1, k_new, k_new + L.q.kv_dim(),
                 scope.mode, scales);
    }
  }

  static void attention_give(uint8_t* slice, const DecodeArgs& s) {
    const Layer L = M::layer(s);
    attn_give(M::state().attn, L.a, slice, 2 * L.slice_values);
  }

  static void attention_take(const uint8_t* act, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    const Layer L = M::layer(s);
    attn_take(M::state().attn, L.a, act, 2 * L.slice_values, M::state().attn_out, scope.mode);
  }

  // The o, gate_up and down entry points: objects of the one stream after attention.
  static void stream(int32_t stage, bool part_start, const E* obj, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    enter(stage, part_start);
    rest(obj, M::layer(s), scope.mode);
  }
  static void o(const E* obj, const DecodeArgs& s) { stream(kO, true, obj, s); }
  static void gate_up(const E* obj, const DecodeArgs& s) { stream(kGateUp, false, obj, s); }
  static void down(const E* obj, const DecodeArgs& s) { stream(kDown, false, obj, s); }

  // An o or down give: the core's finished projection rows into the slice.
  static void give_projection(xk::bf16* slice, xk::bf16* rows, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    const Layer L = M::layer(s);
    M::rows_out(rows, L.Rh, 0, scope.mode);
    give_rows(slice, rows, L.Rh, L.slice_values);
  }
  static void o_give(xk::bf16* slice, const DecodeArgs& s) { give_projection(slice, M::state().o_rows, s); }
  static void down_give(xk::bf16* slice, const DecodeArgs& s) { give_projection(slice, M::state().down, s); }

  static void o_take(const xk::bf16* act, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    const Layer L = M::layer(s);
    auto& st = M::state();
    take_residual(act, st.post_attn, st.qkv.x, st.h1, L, scope.mode);  // the attention residual
    st.have_h1 = true;
    take_carry(L, scope.mode);
  }

  // act(gate) * up of the core's rows into the slice (zero padded).
  static void gate_up_give(xk::bf16* slice, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    const Layer L = M::layer(s);
    xk::bf16* gate_up = M::state().gate_up;
    M::rows_out(gate_up, L.Ri, 0, scope.mode);
    M::rows_out(gate_up + L.Ri, L.Ri, xk_impl::FusedBounds::kMaxRows, scope.mode);
    xk::bf16 act[xk_impl::FusedBounds::kMaxRows];
    if (s.gelu) xk_impl::gelu_tanh_bf16(gate_up, act, L.Ri, scope.mode);
    else xk_impl::silu_bf16(gate_up, act, L.Ri, scope.mode);
    give_rows(slice, act, 0, L.slice_values);  // zeros
    xk_impl::mul_bf16(act, gate_up + L.Ri, slice, L.Ri, scope.mode);
  }

  static void gate_up_take(const xk::bf16* act, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    const Layer L = M::layer(s);
    take_rows(M::state().h, act, s.inter, L.Ri, L.slice_values);
    M::state().have_h = true;
    take_carry(L, scope.mode);
  }

  static void down_take(const xk::bf16* act, const DecodeArgs& s) {
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    const Layer L = M::layer(s);
    auto& st = M::state();
    take_residual(act, st.post_ffn, st.h1, st.y, L, scope.mode);  // the MLP residual
  }

  static void down_result(xk::bf16* out, const DecodeArgs& s) {
    std::memcpy(out, M::state().y, size_t(s.hidden) * 2);
  }
};

}  // namespace xk_fused

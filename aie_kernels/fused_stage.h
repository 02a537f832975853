// Pieces the fused stage kernels share (qkv_rope_bf16.cc, attention_decode_bf16.cc,
// lm_head_bf16.cc, decode_layer_bf16.cc): the split of the work over the cores (as
// design_families_fused.cpp and npu-sim's src/npu/sim_exec_fused_internal.h make it), one
// 16-value block of a streamed GEMV, the exchange slices, the streamed QKV part, QK-norm + RoPE,
// the streamed flash-decoding attention with its combine, and lm_head's stages (also
// lm_head_int8.cc). npu (needs hardware and the toolchain, unverified here). Every piece keeps
// npu-sim's order of operations (see each kernel's header comment).
#pragma once
#include <cmath>
#include <cstring>

#include "kernels.h"

namespace xk_fused {

constexpr int32_t kObjValues = 1024;  // one 2 KiB DDR object of bf16
constexpr int32_t kLanes = 16;
using Acc = xk::accum<xk::accfloat, kLanes>;

inline int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }
inline int32_t round_up(int32_t a, int32_t b) { return ceil_div(a, b) * b; }

// The block at element e of a row-major [rows][k] matrix, against x: the row's accumulator
// starts at column 0; true when the block ends the row, its dot product (gemv_bf16's lane order
// and pairwise reduction) in `dot`.
inline bool gemv_block(Acc& acc, const xk::bf16* blk, int64_t e, int32_t k, const xk::bf16* x, float& dot) {
  const int32_t col = int32_t(e % k);
  if (col == 0) acc = xk::zeros<xk::accfloat, kLanes>();
  acc = xk::mac(acc, xk::load_v<kLanes>(blk), xk::load_v<kLanes>(x + col));
  if (col + kLanes != k) return false;
  dot = xk::reduce_add_pairwise(acc);
  return true;
}

// A replicated vector part (x, q) arriving object by object.
inline void take_vector(xk::bf16* dst, int32_t& have, int32_t n, const xk::bf16* obj) {
  const int32_t m = n - have < kObjValues ? n - have : kObjValues;
  if (m > 0) std::memcpy(dst + have, obj, size_t(m) * 2);
  have += m;
}

// Exchange: a core gives its `rows` values in a slice of `slice_values` (zero padded); the
// gathered object holds every core's slice in (column, row) order, so value i of the whole
// vector is slice i / rows, offset i % rows.
inline void give_rows(xk::bf16* slice, const xk::bf16* rows, int32_t n, int32_t slice_values) {
  for (int32_t i = 0; i < slice_values; ++i) slice[i] = i < n ? rows[i] : xk::bf16{};
}
inline void take_rows(xk::bf16* dst, const xk::bf16* act, int32_t n, int32_t rows, int32_t slice_values) {
  for (int32_t i = 0; i < n; ++i) dst[i] = act[(i / rows) * slice_values + i % rows];
}

// ---- QKV: the weights part [attn-norm gamma][the core's rows][q_norm, k_norm gammas] ----------
struct QkvShape {
  int32_t cores, heads, kv_heads, D, hidden;
  bool qk_norm;
  float eps, offset;
  int32_t q_dim() const { return heads * D; }
  int32_t kv_dim() const { return kv_heads * D; }
  int32_t n() const { return q_dim() + 2 * kv_dim(); }
  int32_t rows() const { return ceil_div(n(), cores); }
  int32_t slice_values() const { return round_up(rows() * 2, 4) / 2; }  // qkv_rope's slice
};

// One block at value e of the weights part.
inline void qkv_block(xk_impl::QkvPartState& st, const QkvShape& s, const xk::bf16* blk, int64_t e, xk::Rounding rnd) {
  const int64_t rows_end = s.hidden + int64_t(s.rows()) * s.hidden;
  if (e < s.hidden) {
    std::memcpy(st.gamma + e, blk, kLanes * 2);
  } else if (e < rows_end) {
    if (e == s.hidden) xk_impl::rmsnorm_bf16(st.x, st.gamma, st.xn, s.hidden, s.eps, s.offset, rnd);
    float dot;
    if (gemv_block(st.acc, blk, e - s.hidden, s.hidden, st.xn, dot))
      st.rows[(e - s.hidden) / s.hidden] = xk::to_bf16(dot, rnd);
  } else if (s.qk_norm && e < rows_end + 2 * s.D) {
    const int64_t i = e - rows_end;
    std::memcpy(i < s.D ? st.q_norm + i : st.k_norm + (i - s.D), blk, kLanes * 2);
  }
}

// QK-norm of every q and k head (when used), then RoPE of them, in place (npu-sim: qk_norm_rope).
inline void qk_norm_rope(xk_impl::QkvPartState& st, const QkvShape& s, const float* cos_sin, bool interleaved,
                         xk::Rounding rnd) {
  xk::bf16 tmp[xk_impl::FusedBounds::kMaxDim];
  if (s.qk_norm)
    for (int32_t h = 0; h < s.heads + s.kv_heads; ++h) {
      xk::bf16* v = st.qkv + int64_t(h) * s.D;
      xk_impl::rmsnorm_bf16(v, h < s.heads ? st.q_norm : st.k_norm, tmp, s.D, s.eps, s.offset, rnd);
      std::memcpy(v, tmp, size_t(s.D) * 2);
    }
  xk_impl::rope_bf16(st.qkv, cos_sin, cos_sin + s.D / 2, s.heads + s.kv_heads, s.D, interleaved, rnd);
}

// ---- Attention: the kv part [per KV head of the core: K then V of its positions] --------------
struct AttnShape {
  int32_t cores, heads, kv_heads, D, context;
  float scale;  // 0 -> 1 / sqrt(head_dim)
  // Positions a core's K (and V) block is padded to in its stream: 1 (attention_decode), or
  // whole 2 KiB objects (decode_layer reads its blocks in place from the resident cache).
  int32_t block_align = 1;
  int32_t group() const { return heads / kv_heads; }
  int32_t kv_per_core() const { return ceil_div(kv_heads, cores); }
  int32_t cores_per_kv() const { return cores / kv_heads > 1 ? cores / kv_heads : 1; }
  int32_t ppc() const { return ceil_div(context, cores_per_kv()); }
  int32_t stream_ppc() const { return ceil_div(ppc(), block_align) * block_align; }
  // int8 KV cache: positions a core's K/V scale block (f32 pairs) is padded to: whole objects.
  int32_t scale_rows() const { return round_up(ppc(), kObjValues / 4); }
  int32_t item_bytes() const { return D * 2 + 8; }  // one query head's partial: bf16 out, f32 max, sum
  int32_t items() const { return kv_per_core() * group(); }
  // A core's partials: every item's f32 {max, sum} first (header_bytes), then every item's bf16
  // out[D], so the exchange delivers the combine weights before any value they weigh.
  int32_t header_bytes() const { return items() * 8; }
  int32_t partial_bytes() const { return items() * item_bytes(); }
  // KV heads [h0, h1) and positions [t0, t1) of core p (npu-sim's Geometry::attn_range).
  void range(int32_t p, int32_t& h0, int32_t& h1, int32_t& t0, int32_t& t1) const {
    const auto mn = [](int32_t a, int32_t b) { return a < b ? a : b; };
    if (kv_per_core() > 1) {
      h0 = mn(kv_heads, p * kv_per_core()), h1 = mn(kv_heads, h0 + kv_per_core());
      t0 = 0, t1 = context;
    } else {
      h0 = p / cores_per_kv(), h1 = mn(kv_heads, h0 + 1);
      t0 = mn(context, (p % cores_per_kv()) * ppc()), t1 = mn(context, t0 + ppc());
    }
  }
  float attn_scale() const { return scale != 0.0f ? scale : 1.0f / std::sqrt(float(D)); }
};

// One block at value e of core `core`'s kv part. q: all query heads; k_new / v_new: when
// new_row >= 0, that position's K and V come from the array (decode_layer's new token, bf16).
// T: the cache's values, bf16 or int8 (an int8 KV cache: kv_scales holds, per KV head of the
// core, [scale_rows()][K scale, V scale] f32; a cached K row's dot product is multiplied by its
// K scale, and a V row enters as bf16(p_t * V scale) times its int8 values; int8 values are
// exact in bf16).
template <class T>
inline void attn_block(xk_impl::AttnPartState& st, const AttnShape& s, int32_t core, const T* blk, int64_t e,
                       const xk::bf16* q, int32_t new_row, const xk::bf16* k_new, const xk::bf16* v_new,
                       xk::Rounding rnd, const float* kv_scales = nullptr) {
  constexpr bool kInt8 = sizeof(T) == 1;
  int32_t h0, h1, t0, t1;
  s.range(core, h0, h1, t0, t1);
  const int32_t ppc = s.ppc(), D = s.D, G = s.group(), positions = t1 > t0 ? t1 - t0 : 0;
  const int64_t block = int64_t(s.stream_ppc()) * D;  // a K or V block in the stream
  const int32_t hl = int32_t(e / (2 * block)), h = h0 + hl;
  if (hl >= s.kv_per_core()) return;  // padding
  const int64_t r = e % (2 * block);
  const bool is_v = r >= block;
  const int32_t t = int32_t((r % block) / D), col = int32_t(r % D);
  const bool new_here = new_row >= t0 && new_row < t1 && t == new_row - t0;
  if (is_v && t == 0 && col == 0 && positions > 0)  // K complete: p_t, l, and fresh o accumulators
    for (int32_t j = 0; j < G; ++j) {
      float* sc = st.scores + int64_t(j) * ppc;
      float m = -INFINITY;
      for (int32_t u = 0; u < positions; ++u)
        if (m < sc[u]) m = sc[u];
      float l = 0.0f;
      for (int32_t u = 0; u < positions; ++u) {
        sc[u] = xk::to_float(xk::to_bf16(xk::exp_lut(sc[u] - m), rnd));
        l += sc[u];
      }
      st.max[j] = m, st.sum[j] = l;
      for (int32_t c = 0; c < D / kLanes; ++c) st.o[j * (D / kLanes) + c] = xk::zeros<xk::accfloat, kLanes>();
    }
  if (h < h1 && t < positions) {
    alignas(32) xk::bf16 widened[kLanes];  // an int8 block as bf16 (exact)
    const xk::bf16* row = new_here ? (is_v ? v_new : k_new) + int64_t(h) * D + col : nullptr;
    float row_scale = 1.0f;  // the cached row's K or V scale (int8); the new row is bf16
    if (row == nullptr) {
      if constexpr (kInt8) {
        for (int i = 0; i < kLanes; ++i) widened[i] = xk::to_bf16(float(blk[i]), rnd);
        row = widened;
        row_scale = kv_scales[(int64_t(hl) * s.scale_rows() + t) * 2 + (is_v ? 1 : 0)];
      } else {
        row = blk;
      }
    }
    (void)row_scale;  // (bf16: unused)
    if (!is_v) {
      for (int32_t j = 0; j < G; ++j) {
        if (col == 0) st.qk[j] = xk::zeros<xk::accfloat, kLanes>();
        st.qk[j] = xk::mac(st.qk[j], xk::load_v<kLanes>(q + int64_t(h * G + j) * D + col), xk::load_v<kLanes>(row));
        if (col + kLanes == D) {
          float dot = xk::reduce_add_pairwise(st.qk[j]);
          if constexpr (kInt8) dot *= row_scale;
          st.scores[int64_t(j) * ppc + t] = dot * s.attn_scale();
        }
      }
    } else {
      for (int32_t j = 0; j < G; ++j) {
        alignas(32) xk::bf16 p[kLanes];
        float pt = st.scores[int64_t(j) * ppc + t];  // a bf16 value: exact unless scaled
        if constexpr (kInt8) pt *= row_scale;
        for (int i = 0; i < kLanes; ++i) p[i] = xk::to_bf16(pt, rnd);
        Acc& o = st.o[j * (D / kLanes) + col / kLanes];
        o = xk::mac(o, xk::load_v<kLanes>(p), xk::load_v<kLanes>(row));
      }
    }
  }
  if (is_v && t == ppc - 1 && col + kLanes == D)  // the head's partials are complete
    for (int32_t j = 0; j < G; ++j) {
      const int32_t item = hl * G + j;
      xk::bf16 out[xk_impl::FusedBounds::kMaxDim];
      float ms[2] = {-INFINITY, 0.0f};
      if (h < h1 && positions > 0) {
        const float rcp = xk::reciprocal_lut(st.sum[j]);
        for (int32_t c = 0; c < D; c += kLanes)
          for (int i = 0; i < kLanes; ++i)
            out[c + i] = xk::to_bf16(float(xk::lane(st.o[j * (D / kLanes) + c / kLanes], i)) * rcp, rnd);
        ms[0] = st.max[j], ms[1] = st.sum[j];
      } else {
        for (int32_t d = 0; d < D; ++d) out[d] = xk::bf16{};
      }
      std::memcpy(st.partial + s.header_bytes() + int64_t(item) * D * 2, out, size_t(D) * 2);
      std::memcpy(st.partial + int64_t(item) * 8, ms, 8);
    }
}

// Exchange round `st.round` of the partials: bytes [round * slice, + slice) of each core's.
inline void attn_give(const xk_impl::AttnPartState& st, const AttnShape& s, uint8_t* slice, int32_t slice_bytes) {
  const int32_t at = st.round * slice_bytes, total = s.partial_bytes();
  for (int32_t i = 0; i < slice_bytes; ++i) slice[i] = at + i < total ? st.partial[at + i] : 0;
}

// Takes round `st.round` and combines as it goes (the gathered partials never sit in L1 whole):
// the headers' {max, sum} when they are complete give every core's weight per query head
// (attention_combine_bf16's: exp(max - M) * sum, 0 for an empty partial) and 1 / L; each out
// value then adds weight * value to its f32 accumulator, cores in order, so every sum runs in
// attention_combine_bf16's order and the result is the same bits. After the last round out
// [heads * D] is complete (bf16(acc / L)); returns true then.
inline bool attn_take(xk_impl::AttnPartState& st, const AttnShape& s, const uint8_t* act, int32_t slice_bytes,
                      xk::bf16* out, xk::Rounding rnd) {
  const int32_t rounds = ceil_div(s.partial_bytes(), slice_bytes), hb = s.header_bytes(), total = s.partial_bytes();
  const int32_t G = s.group(), D = s.D, items = s.items(), at = st.round * slice_bytes, end = at + slice_bytes;
  for (int32_t p = 0; p < s.cores && at < hb; ++p)  // header bytes of this round
    std::memcpy(st.headers + int64_t(p) * hb + at, act + int64_t(p) * slice_bytes,
                size_t((end < hb ? end : hb) - at));
  if (at < hb && end >= hb)  // the headers are complete: weights and 1 / L per query head
    for (int32_t hq = 0; hq < s.heads; ++hq) {
      const int32_t h = hq / G;
      float M = -INFINITY, L = 0.0f;
      for (int32_t pass = 0; pass < 2; ++pass)
        for (int32_t p = 0; p < s.cores; ++p) {
          int32_t h0, h1, t0, t1;
          s.range(p, h0, h1, t0, t1);
          if (h < h0 || h >= h1) continue;
          float ms[2];
          std::memcpy(ms, st.headers + int64_t(p) * hb + int64_t((h - h0) * G + hq % G) * 8, 8);
          if (pass == 0) {
            if (M < ms[0]) M = ms[0];
          } else {
            const float w = ms[1] > 0.0f ? xk::exp_lut(ms[0] - M) * ms[1] : 0.0f;
            st.weight[int64_t(p) * items + (h - h0) * G + hq % G] = w;
            L += w;
          }
        }
      st.rcp[hq] = xk::reciprocal_lut(L);
      for (int32_t d = 0; d < D; ++d) st.acc[int64_t(hq) * D + d] = 0.0f;
    }
  const int32_t v0 = (at > hb ? at : hb), v1 = end < total ? end : total;  // out bytes of this round
  for (int32_t p = 0; p < s.cores && v0 < v1; ++p) {
    int32_t h0, h1, t0, t1;
    s.range(p, h0, h1, t0, t1);
    const uint8_t* src = act + int64_t(p) * slice_bytes + (v0 - at);
    // Values [va, vb) of the core's out part, one item's run of head_dim values at a time.
    const int32_t va = (v0 - hb) / 2, vb = (v1 - hb) / 2;
    for (int32_t v = va; v < vb;) {
      const int32_t item = v / D, d = v % D, n = (D - d < vb - v ? D - d : vb - v), h = h0 + item / G;
      if (h < h1) {  // (else the core's padding item)
        float* acc = st.acc + int64_t(h * G + item % G) * D + d;
        const float w = st.weight[int64_t(p) * items + item];
        const uint8_t* xs = src + 2 * int64_t(v - va);
        for (int32_t i = 0; i < n; ++i) {
          xk::bf16 x;
          std::memcpy(&x, xs + 2 * i, 2);
          acc[i] += w * xk::to_float(x);
        }
      }
      v += n;
    }
  }
  if (++st.round < rounds) return false;
  st.round = 0;
  for (int32_t i = 0; i < s.heads * D; ++i) out[i] = xk::to_bf16(st.acc[i] * st.rcp[i / D], rnd);
  return true;
}


// ---- lm_head (lm_head_bf16.cc, lm_head_int8.cc): the stages and the logits objects ---------
namespace lm_head {

enum Stage : int32_t { kNone, kX, kNorm, kRows };

// Logits objects of `chunk` rows, as design_families_fused.cpp splits: as few objects of at most
// 256 rows (1 KiB of f32) as hold the core's rows, the rows spread evenly over them.
inline int32_t chunk_rows(int32_t cores, int32_t vocab) {
  const int32_t per_core = ceil_div(vocab, cores);
  return ceil_div(per_core, ceil_div(per_core, 256));
}

template <class State>
void enter(State& st, int32_t stage, bool part_start) {
  if (st.stage == stage) return;
  st.stage = stage;
  if (part_start) st.pos = 0;
  if (stage == kX) st.x_have = 0, st.chunk_out = 0;  // a new invocation
}

}  // namespace lm_head

}  // namespace xk_fused

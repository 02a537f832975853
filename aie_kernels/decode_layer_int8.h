// The int8 weights' matmul of the decode_layer design (decode_layer.h's M), shared by
// decode_layer_int8.cc (bf16 KV cache), decode_layer_int8_kv8.cc (int8 KV cache) and
// decode_layer_int8_kv4.cc (int4 KV cache): the weights parts' segments and their 32-byte blocks
// of int8 rows (taken in runs: decode_layer.h qkv_run / rest_run), scales and gammas
// (decode_layer_int8.cc's header comment). Own gives the core's state (state()) and the KV
// cache's bits a value (kKvBits 16, 8 or 4: its K/V blocks padded to objects of 1024, 2048 or
// 4096 values).
// npu (needs hardware and the toolchain, unverified here).
#pragma once
#include "decode_layer.h"
#include "fused_stage_int8.h"

namespace xk_fused::int8_layer {

constexpr int32_t kUp = xk_impl::FusedBounds::kMaxRows;  // the up rows' sums and scales

// The scales of the matrices after attention, in the weights part: slot m of rest_scales.
enum RestMatrix : int32_t { kO = 0, kGate = 1, kUpM = 2, kDown = 3 };

struct Int8Layer : xk_fused::DecodeShape {
  // Byte ends of the segments of the weights part (qkv, then the later matrices' scales) and of
  // the part after attention (their rows and the gammas).
  int64_t qkv_gamma, qkv_rows, qkv_scales, qkv_norms, o_scales, gate_scales, up_scales, down_scales;
  int64_t o_rows, post_attn, gamma2, gate_rows, up_rows, down_rows, post_ffn;
};

template <class Own>
struct Int8Matmul {
  using Elem = uint8_t;
  using Layer = Int8Layer;
  static auto& state() { return Own::state(); }

  static Layer layer(const xk_fused::DecodeArgs& s) {
    using xk_fused::scale_bytes;
    Layer L{xk_fused::decode_shape(s), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (Own::kKvBits < 16)  // cache values a 2 KiB object: 2048 int8, 4096 int4
      L.a.block_align = xk_fused::kv_block_align(xk_fused::kObjValues * 16 / Own::kKvBits, s.head_dim);
    const int64_t post = L.post_norms ? 2 * int64_t(s.hidden) : 0, H = s.hidden, Rq = L.q.rows();
    L.qkv_gamma = 2 * H;
    L.qkv_rows = L.qkv_gamma + Rq * H;
    L.qkv_scales = L.qkv_rows + scale_bytes(int32_t(Rq));
    L.qkv_norms = L.qkv_scales + (L.q.qk_norm ? 4 * int64_t(s.head_dim) : 0);
    L.o_scales = L.qkv_norms + scale_bytes(L.Rh);
    L.gate_scales = L.o_scales + scale_bytes(L.Ri);
    L.up_scales = L.gate_scales + scale_bytes(L.Ri);
    L.down_scales = L.up_scales + scale_bytes(L.Rh);
    L.o_rows = int64_t(L.Rh) * L.q.q_dim();
    L.post_attn = L.o_rows + post;
    L.gamma2 = L.post_attn + 2 * H;
    L.gate_rows = L.gamma2 + int64_t(L.Ri) * H;
    L.up_rows = L.gate_rows + int64_t(L.Ri) * H;
    L.down_rows = L.up_rows + int64_t(L.Rh) * s.inter;
    L.post_ffn = L.down_rows + post;
    return L;
  }

  // Matrix m's scales (kept since the weights part) into the scales of the rows in flight, at
  // slot `to` (the up rows' at kUp).
  static void use_scales(RestMatrix m, int32_t rows, int32_t to) {
    auto& st = Own::state();
    std::memcpy(st.i8.scales + to, st.rest_scales + int64_t(m) * xk_impl::FusedBounds::kMaxRows, size_t(rows) * 4);
  }

  // The blocks at byte e of the weights part (attn gamma, QKV rows and scales, QK-norm gammas,
  // the o, gate, up and down scales), at most n bytes: the QKV rows up to their end as one run,
  // any other segment one block. Returns the bytes taken.
  static int32_t qkv_run(const uint8_t* blk, int32_t n, int64_t e, const Layer& L, xk::Rounding rnd) {
    auto& st = Own::state();
    if (e < L.qkv_gamma) {
      std::memcpy(st.qkv.gamma + e / 2, blk, xk_fused::kBlockBytes);
    } else if (e < L.qkv_rows) {
      if (e == L.qkv_gamma) {
        xk_impl::rmsnorm_bf16(st.qkv.x, st.qkv.gamma, st.qkv.xn, L.hidden, L.q.eps, L.q.offset, rnd);
        st.i8.sx = xk_fused::quantize_row(st.qkv.xn, st.i8.q, L.hidden);
      }
      const int32_t m = xk_fused::run_bytes(e, L.qkv_rows, n);
      xk_fused::gemv_i8_run(st.i8.acc, blk, e - L.qkv_gamma, m, L.hidden, st.i8.q, st.i8.sums);
      return m;
    } else if (e < L.qkv_scales) {
      xk_fused::take_scales(st.i8.scales, blk, e - L.qkv_rows, L.q.rows());
    } else if (e < L.qkv_norms) {
      const int64_t i = (e - L.qkv_scales) / 2;
      std::memcpy(i < L.q.D ? st.qkv.q_norm + i : st.qkv.k_norm + (i - L.q.D), blk, xk_fused::kBlockBytes);
    } else if (e < L.down_scales) {
      constexpr int64_t kSlot = xk_impl::FusedBounds::kMaxRows;
      if (e < L.o_scales) xk_fused::take_scales(st.rest_scales + kO * kSlot, blk, e - L.qkv_norms, L.Rh);
      else if (e < L.gate_scales) xk_fused::take_scales(st.rest_scales + kGate * kSlot, blk, e - L.o_scales, L.Ri);
      else if (e < L.up_scales) xk_fused::take_scales(st.rest_scales + kUpM * kSlot, blk, e - L.gate_scales, L.Ri);
      else xk_fused::take_scales(st.rest_scales + kDown * kSlot, blk, e - L.up_scales, L.Rh);
    }
    return xk_fused::kBlockBytes;
  }

  // The blocks at byte e of the part after attention, at most n bytes: a matrix's rows up to
  // their end as one run, any other segment one block. Returns the bytes taken; 0 (and nothing
  // done) when the segment waits for an exchange.
  static int32_t rest_run(const uint8_t* blk, int32_t n, int64_t e, const Layer& L, xk::Rounding rnd) {
    auto& st = Own::state();
    xk_impl::Int8RowsState& q = st.i8;
    if (e < L.o_rows) {
      if (e == 0) {
        q.sx = xk_fused::quantize_row(st.attn_out, q.q, L.q.q_dim());
        use_scales(kO, L.Rh, 0);
      }
      const int32_t m = xk_fused::run_bytes(e, L.o_rows, n);
      xk_fused::gemv_i8_run(q.acc, blk, e, m, L.q.q_dim(), q.q, q.sums);
      return m;
    } else if (e < L.post_attn) {
      std::memcpy(st.post_attn + (e - L.o_rows) / 2, blk, xk_fused::kBlockBytes);
    } else if (e < L.gamma2) {
      std::memcpy(st.gamma2 + (e - L.post_attn) / 2, blk, xk_fused::kBlockBytes);
    } else if (e < L.up_rows) {
      if (!st.have_h1) return 0;
      if (!st.have_xn2) {  // the o rows' values were given with the exchange that made h1
        xk_impl::rmsnorm_bf16(st.h1, st.gamma2, st.xn2, L.hidden, L.q.eps, L.q.offset, rnd);
        q.sx = xk_fused::quantize_row(st.xn2, q.q, L.hidden);
        use_scales(kGate, L.Ri, 0);
        use_scales(kUpM, L.Ri, kUp);
        st.have_xn2 = true;
      }
      const bool gate = e < L.gate_rows;  // else the up rows (their sums at kUp)
      const int32_t m = xk_fused::run_bytes(e, gate ? L.gate_rows : L.up_rows, n);
      xk_fused::gemv_i8_run(q.acc, blk, e - (gate ? L.gamma2 : L.gate_rows), m, L.hidden, q.q,
                            gate ? q.sums : q.sums + kUp);
      return m;
    } else if (e < L.down_rows) {
      if (!st.have_h) return 0;
      if (e == L.up_rows) {
        q.sx = xk_fused::quantize_row(st.h, q.q, L.inter);
        use_scales(kDown, L.Rh, 0);
      }
      const int32_t m = xk_fused::run_bytes(e, L.down_rows, n);
      xk_fused::gemv_i8_run(q.acc, blk, e - L.up_rows, m, L.inter, q.q, q.sums);
      return m;
    } else if (e < L.post_ffn) {
      std::memcpy(st.post_ffn + (e - L.down_rows) / 2, blk, xk_fused::kBlockBytes);
    }
    return xk_fused::kBlockBytes;
  }

  // The values of finished rows: float(sum) * sx * scale, stored to bf16.
  static void rows_out(xk::bf16* out, int32_t rows, int32_t first, xk::Rounding rnd) {
    const xk_impl::Int8RowsState& q = Own::state().i8;
    xk_fused::dequant_rows(out, q.sums + first, q.scales + first, rows, q.sx, rnd);
  }
};
}  // namespace xk_fused::int8_layer

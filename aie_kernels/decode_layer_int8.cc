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
// blocks: [attn gamma][QKV rows][QKV scales][q_norm, k_norm gammas]; [o rows][o scales]
// [post-attention gamma][ffn gamma][gate rows][gate scales][up rows][up scales][down rows]
// [down scales][post-FFN gamma]. Blocks that wait for an exchange stay in L1 (`carry`) and are
// taken in stream order right after it, as in decode_layer_bf16.cc.
// Scalars: those of decode_layer_bf16 (context, core, cores, gelu, head_dim, heads, hidden,
// intermediate, kv_heads, post_norms, qk_norm; eps_bits, offset_bits, interleaved, scale_bits).
// State in the core's L1 (xk_impl::DecodeLayerInt8State; bounds in kernels.h FusedBounds).
// The stages, exchanges, norms and residual adds are decode_layer.h's (as decode_layer_bf16.cc);
// this file gives its weights' matmul: the 32-byte blocks of int8 rows, scales and gammas.
#include "decode_layer.h"
#include "fused_stage_int8.h"

namespace {

xk_impl::DecodeLayerInt8State g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::DecodeLayerInt8State& own_state() { return xk::core_state(g_own); }

constexpr int32_t kUp = xk_impl::FusedBounds::kMaxRows;  // the up rows' sums and scales

struct Int8Layer : xk_fused::DecodeShape {
  // Byte ends of the segments of the weights part (qkv) and of the part after attention.
  int64_t qkv_gamma, qkv_rows, qkv_scales, qkv_norms;
  int64_t o_rows, o_scales, post_attn, gamma2, gate_rows, gate_scales, up_rows, up_scales, down_rows, down_scales,
      post_ffn;
};

struct Int8Matmul {
  using Elem = uint8_t;
  using Layer = Int8Layer;
  static xk_impl::DecodeLayerInt8State& state() { return own_state(); }

  static Layer layer(const xk_fused::DecodeArgs& s) {
    using xk_fused::scale_bytes;
    Layer L{xk_fused::decode_shape(s), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t post = L.post_norms ? 2 * int64_t(s.hidden) : 0, H = s.hidden, Rq = L.q.rows();
    L.qkv_gamma = 2 * H;
    L.qkv_rows = L.qkv_gamma + Rq * H;
    L.qkv_scales = L.qkv_rows + scale_bytes(int32_t(Rq));
    L.qkv_norms = L.qkv_scales + (L.q.qk_norm ? 4 * int64_t(s.head_dim) : 0);
    L.o_rows = int64_t(L.Rh) * L.q.q_dim();
    L.o_scales = L.o_rows + scale_bytes(L.Rh);
    L.post_attn = L.o_scales + post;
    L.gamma2 = L.post_attn + 2 * H;
    L.gate_rows = L.gamma2 + int64_t(L.Ri) * H;
    L.gate_scales = L.gate_rows + scale_bytes(L.Ri);
    L.up_rows = L.gate_scales + int64_t(L.Ri) * H;
    L.up_scales = L.up_rows + scale_bytes(L.Ri);
    L.down_rows = L.up_scales + int64_t(L.Rh) * s.inter;
    L.down_scales = L.down_rows + scale_bytes(L.Rh);
    L.post_ffn = L.down_scales + post;
    return L;
  }

  // One block at byte e of the weights part (attn gamma, QKV rows and scales, QK-norm gammas).
  static void qkv_block(const uint8_t* blk, int64_t e, const Layer& L, xk::Rounding rnd) {
    xk_impl::DecodeLayerInt8State& st = own_state();
    int32_t sum;
    if (e < L.qkv_gamma) {
      std::memcpy(st.qkv.gamma + e / 2, blk, xk_fused::kBlockBytes);
    } else if (e < L.qkv_rows) {
      if (e == L.qkv_gamma) {
        xk_impl::rmsnorm_bf16(st.qkv.x, st.qkv.gamma, st.qkv.xn, L.hidden, L.q.eps, L.q.offset, rnd);
        st.i8.sx = xk_fused::quantize_row(st.qkv.xn, st.i8.q, L.hidden);
      }
      if (xk_fused::gemv_i8_block(st.i8.acc, blk, e - L.qkv_gamma, L.hidden, st.i8.q, sum))
        st.i8.sums[(e - L.qkv_gamma) / L.hidden] = sum;
    } else if (e < L.qkv_scales) {
      xk_fused::take_scales(st.i8.scales, blk, e - L.qkv_rows, L.q.rows());
    } else if (e < L.qkv_norms) {
      const int64_t i = (e - L.qkv_scales) / 2;
      std::memcpy(i < L.q.D ? st.qkv.q_norm + i : st.qkv.k_norm + (i - L.q.D), blk, xk_fused::kBlockBytes);
    }
  }

  // One block at byte e of the part after attention; false (and nothing done) when it waits for
  // an exchange.
  static bool rest_block(const uint8_t* blk, int64_t e, const Layer& L, xk::Rounding rnd) {
    xk_impl::DecodeLayerInt8State& st = own_state();
    xk_impl::Int8RowsState& q = st.i8;
    int32_t sum;
    if (e < L.o_rows) {
      if (e == 0) q.sx = xk_fused::quantize_row(st.attn_out, q.q, L.q.q_dim());
      if (xk_fused::gemv_i8_block(q.acc, blk, e, L.q.q_dim(), q.q, sum)) q.sums[e / L.q.q_dim()] = sum;
    } else if (e < L.o_scales) {
      xk_fused::take_scales(q.scales, blk, e - L.o_rows, L.Rh);
    } else if (e < L.post_attn) {
      std::memcpy(st.post_attn + (e - L.o_scales) / 2, blk, xk_fused::kBlockBytes);
    } else if (e < L.gamma2) {
      std::memcpy(st.gamma2 + (e - L.post_attn) / 2, blk, xk_fused::kBlockBytes);
    } else if (e < L.up_scales) {
      if (!st.have_h1) return false;
      if (!st.have_xn2) {
        xk_impl::rmsnorm_bf16(st.h1, st.gamma2, st.xn2, L.hidden, L.q.eps, L.q.offset, rnd);
        q.sx = xk_fused::quantize_row(st.xn2, q.q, L.hidden);
        st.have_xn2 = true;
      }
      if (e < L.gate_rows) {
        if (xk_fused::gemv_i8_block(q.acc, blk, e - L.gamma2, L.hidden, q.q, sum))
          q.sums[(e - L.gamma2) / L.hidden] = sum;
      } else if (e < L.gate_scales) {
        xk_fused::take_scales(q.scales, blk, e - L.gate_rows, L.Ri);
      } else if (e < L.up_rows) {
        if (xk_fused::gemv_i8_block(q.acc, blk, e - L.gate_scales, L.hidden, q.q, sum))
          q.sums[kUp + (e - L.gate_scales) / L.hidden] = sum;
      } else {
        xk_fused::take_scales(q.scales + kUp, blk, e - L.up_rows, L.Ri);
      }
    } else if (e < L.down_scales) {
      if (!st.have_h) return false;
      if (e == L.up_scales) q.sx = xk_fused::quantize_row(st.h, q.q, L.inter);
      if (e < L.down_rows) {
        if (xk_fused::gemv_i8_block(q.acc, blk, e - L.up_scales, L.inter, q.q, sum))
          q.sums[(e - L.up_scales) / L.inter] = sum;
      } else {
        xk_fused::take_scales(q.scales, blk, e - L.down_rows, L.Rh);
      }
    } else if (e < L.post_ffn) {
      std::memcpy(st.post_ffn + (e - L.down_scales) / 2, blk, xk_fused::kBlockBytes);
    }
    return true;
  }

  // The values of finished rows: float(sum) * sx * scale, stored to bf16.
  static void rows_out(xk::bf16* out, int32_t rows, int32_t first, xk::Rounding rnd) {
    const xk_impl::Int8RowsState& q = own_state().i8;
    xk_fused::dequant_rows(out, q.sums + first, q.scales + first, rows, q.sx, rnd);
  }
};
using Stages = xk_fused::DecodeLayer<Int8Matmul>;

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

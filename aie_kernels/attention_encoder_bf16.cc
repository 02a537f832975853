// attention_encoder_bf16: one core's tile of query rows against a stream of K/V blocks, online
// softmax (flash-attention form) with f32 running max, sum and output, bf16 operands (design
// family encoder_attention, src/npu/design_families_encoder.cpp).
// Status: npu (needs hardware and the toolchain, unverified here); npu-sim calls these entry
// points (src/npu/sim_exec_encoder.cpp).
//
// Per query row i (position q_pos0 + i) and block (keys k_pos0 ..., K then V, [keys][head_dim]):
//  - visible keys j: j < seq_len; causal: j <= p; window w > 0: p - j < w (causal) or
//    |p - j| < w (banded); a row that sees no key of the block skips it;
//  - s_j = (q_i . k_j: 16-lane f32 mac over d = lane mod 16, pairwise reduction) * scale;
//  - m' = max(m, max_j s_j); alpha = 1 when m' == m, else exp(m - m') (0 while m = -inf);
//  - p_j = bf16(exp(s_j - m')) rounded to nearest even (the PV mac takes bf16 operands);
//  - l = l * alpha + (sum_j p_j in key order, f32);
//  - o[d] = o[d] * alpha + (16-lane f32 mac of p_j * v_j[d] over the visible j in order).
// finish: out[d] = bf16(o[d] * recip(l)), zeros for a row that saw no key. exp and recip are the
// table functions of xdna_aie_api.h. head_dim must be a multiple of 16.
// Numerical reference: these rules, written out independently in tests/npu/test_encoder_attention.cpp
// (direct_same_numerics, bit-exact); the simulator has no second copy (it calls this source).
#include <cmath>

#include "xdna_aie_api.h"

namespace {
constexpr int kLanes = 16;

bool visible(int32_t p, int32_t j, int32_t seq_len, int32_t causal, int32_t window) {
  if (j >= seq_len) return false;
  if (causal) return j <= p && (window <= 0 || p - j < window);
  return window <= 0 || (p - j < window && j - p < window);
}
}  // namespace

extern "C" void attention_encoder_bf16_init(float* m, float* l, float* o, int32_t rows, int32_t head_dim) {
  for (int32_t i = 0; i < rows; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  for (int32_t i = 0; i < rows * head_dim; ++i) o[i] = 0.0f;
}

extern "C" void attention_encoder_bf16(const xk::bf16* q, const xk::bf16* kv, float* m, float* l, float* o,
                                       float* scores, int32_t rows, int32_t keys, int32_t head_dim,
                                       int32_t q_pos0, int32_t k_pos0, int32_t seq_len, int32_t causal,
                                       int32_t window, int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const float scale = xk::f32_from_bits(scale_bits);  // the f32 logit scale, as the host passes it
  const xk::bf16* K = kv;
  const xk::bf16* V = kv + keys * head_dim;
  for (int32_t i = 0; i < rows; ++i) {
    const int32_t p = q_pos0 + i;
    const xk::bf16* qi = q + i * head_dim;
    float bmax = -INFINITY;
    bool any = false;
    for (int32_t j = 0; j < keys; ++j) {
      if (!visible(p, k_pos0 + j, seq_len, causal, window)) continue;
      xk::accum<xk::accfloat, kLanes> acc = xk::zeros<xk::accfloat, kLanes>();
      for (int32_t d = 0; d < head_dim; d += kLanes)
        acc = xk::mac(acc, xk::load_v<kLanes>(qi + d), xk::load_v<kLanes>(K + j * head_dim + d));
      scores[j] = xk::reduce_add_pairwise(acc) * scale;
      bmax = bmax >= scores[j] ? bmax : scores[j];
      any = true;
    }
    if (!any) continue;
    const float m_new = m[i] >= bmax ? m[i] : bmax;
    const float alpha = m_new == m[i] ? 1.0f : m[i] == -INFINITY ? 0.0f : xk::exp_lut(m[i] - m_new);
    float bsum = 0.0f;
    for (int32_t j = 0; j < keys; ++j) {  // scores -> bf16 probabilities (kept as f32 values)
      if (!visible(p, k_pos0 + j, seq_len, causal, window)) continue;
      scores[j] = xk::to_float(xk::to_bf16(xk::exp_lut(scores[j] - m_new), scope.mode));
      bsum += scores[j];
    }
    float* oi = o + i * head_dim;
    for (int32_t d = 0; d < head_dim; d += kLanes) {
      xk::accum<xk::accfloat, kLanes> acc = xk::zeros<xk::accfloat, kLanes>();
      for (int32_t j = 0; j < keys; ++j) {
        if (!visible(p, k_pos0 + j, seq_len, causal, window)) continue;
        alignas(32) xk::bf16 pj[kLanes];
        const xk::bf16 pb = xk::to_bf16(scores[j], scope.mode);  // exact: already a bf16 value
        for (int t = 0; t < kLanes; ++t) pj[t] = pb;
        acc = xk::mac(acc, xk::load_v<kLanes>(pj), xk::load_v<kLanes>(V + j * head_dim + d));
      }
      for (int t = 0; t < kLanes; ++t) oi[d + t] = oi[d + t] * alpha + float(xk::lane(acc, t));
    }
    m[i] = m_new;
    l[i] = l[i] * alpha + bsum;
  }
}

extern "C" void attention_encoder_bf16_finish(const float* l, const float* o, xk::bf16* out, int32_t rows,
                                              int32_t head_dim) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  for (int32_t i = 0; i < rows; ++i) {
    const float r = l[i] > 0.0f ? xk::reciprocal_lut(l[i]) : 0.0f;
    for (int32_t d = 0; d < head_dim; ++d)
      out[i * head_dim + d] = xk::to_bf16(l[i] > 0.0f ? o[i * head_dim + d] * r : 0.0f, scope.mode);
  }
}

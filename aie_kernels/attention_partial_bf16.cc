// attention_partial_bf16 / attention_combine_bf16: flash-decoding attention of one query head
// (the attention stage of the attention_decode and decode_layer designs: each core computes the
// partial of its block of positions, then the partials are combined). npu (needs hardware and
// the toolchain, unverified here).
// Numerical reference (tests/npu/test_aie_kernels.cpp, against a plain f32 loop):
//  partial over `positions` keys/values ([position][head_dim] bf16, head_dim a multiple of 16):
//   s_t = (q . k_t: 16-lane f32 mac, pairwise reduce) * scale in f32; m = max s_t;
//   p_t = bf16(exp(s_t - m)) (table exp); l = sum p_t (f32, t in order);
//   o = sum p_t v_t in 16-lane f32 accumulators (t in order); out = bf16(o * recip(l)).
//   positions == 0 gives the empty partial: m = -inf, l = 0, out = 0.
//  combine of n partials in the order given: M = max m_i, w_i = exp(m_i - M) l_i (0 for an
//   empty partial), acc[d] = sum_i w_i o_i[d] (f32, in order), out[d] = bf16(acc[d] * recip(sum w_i)).
// Entry points: attention_partial_bf16(q, K, V, out, max_sum, scores, positions, head_dim,
// scale_bits) with max_sum = {m, l} (f32) and scores a positions-long f32 scratch (the core's
// "scores" buffer); attention_combine_bf16(max_sums, outs, out, n_parts, head_dim).
// Status: npu (needs hardware and the toolchain, unverified here).
#include <limits>

#include "kernels.h"

namespace {
constexpr int kAttnLanes = 16;
}

namespace xk_impl {
void attention_partial_bf16(const xk::bf16* q, const xk::bf16* K, const xk::bf16* V, xk::bf16* out, float* max_sum,
                            float* scores, int32_t positions, int32_t head_dim, float scale, xk::Rounding rnd) {
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  if (positions <= 0) {
    for (int32_t d = 0; d < head_dim; ++d) out[d] = xk::bf16{};
    max_sum[0] = m, max_sum[1] = l;
    return;
  }
  for (int32_t t = 0; t < positions; ++t) {
    xk::accum<xk::accfloat, kAttnLanes> acc = xk::zeros<xk::accfloat, kAttnLanes>();
    for (int32_t d = 0; d < head_dim; d += kAttnLanes)
      acc = xk::mac(acc, xk::load_v<kAttnLanes>(q + d), xk::load_v<kAttnLanes>(K + int64_t(t) * head_dim + d));
    scores[t] = xk::reduce_add_pairwise(acc) * scale;
    if (m < scores[t]) m = scores[t];
  }
  for (int32_t t = 0; t < positions; ++t) {  // scores[t] becomes p_t (a bf16 value, exact in f32)
    scores[t] = xk::to_float(xk::to_bf16(xk::exp_lut(scores[t] - m), rnd));
    l += scores[t];
  }
  const float r = xk::reciprocal_lut(l);
  // One 16-lane accumulator per chunk of head_dim; each lane sums over t in order.
  for (int32_t c = 0; c < head_dim; c += kAttnLanes) {
    xk::accum<xk::accfloat, kAttnLanes> o = xk::zeros<xk::accfloat, kAttnLanes>();
    for (int32_t t = 0; t < positions; ++t) {
      alignas(32) xk::bf16 p[kAttnLanes];
      for (int i = 0; i < kAttnLanes; ++i) p[i] = xk::to_bf16(scores[t], rnd);  // exact: already bf16
      o = xk::mac(o, xk::load_v<kAttnLanes>(p), xk::load_v<kAttnLanes>(V + int64_t(t) * head_dim + c));
    }
    for (int i = 0; i < kAttnLanes; ++i) out[c + i] = xk::to_bf16(float(xk::lane(o, i)) * r, rnd);
  }
  max_sum[0] = m, max_sum[1] = l;
}

void attention_combine_bf16(const float* max_sums, const xk::bf16* outs, xk::bf16* out, int32_t n_parts,
                            int32_t head_dim, xk::Rounding rnd) {
  float M = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n_parts; ++i)
    if (M < max_sums[2 * i]) M = max_sums[2 * i];
  const auto weight = [&](int32_t i) {  // an empty partial (l = 0) weighs nothing
    return max_sums[2 * i + 1] > 0.0f ? xk::exp_lut(max_sums[2 * i] - M) * max_sums[2 * i + 1] : 0.0f;
  };
  float L = 0.0f;
  for (int32_t i = 0; i < n_parts; ++i) L += weight(i);
  const float r = xk::reciprocal_lut(L);
  for (int32_t d = 0; d < head_dim; ++d) {
    float acc = 0.0f;
    for (int32_t i = 0; i < n_parts; ++i) acc += weight(i) * xk::to_float(outs[int64_t(i) * head_dim + d]);
    out[d] = xk::to_bf16(acc * r, rnd);
  }
}
}  // namespace xk_impl

extern "C" void attention_partial_bf16(const xk::bf16* q, const xk::bf16* K, const xk::bf16* V, xk::bf16* out,
                                       float* max_sum, float* scores, int32_t positions, int32_t head_dim,
                                       int32_t scale_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::attention_partial_bf16(q, K, V, out, max_sum, scores, positions, head_dim, xk::f32_from_bits(scale_bits),
                                  scope.mode);
}

extern "C" void attention_combine_bf16(const float* max_sums, const xk::bf16* outs, xk::bf16* out, int32_t n_parts,
                                       int32_t head_dim) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::attention_combine_bf16(max_sums, outs, out, n_parts, head_dim, scope.mode);
}

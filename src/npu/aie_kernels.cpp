#include "npu/aie_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/numeric.h"

namespace xdna::aie {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

void gemv_bf16(const bf16* W, const bf16* x, bf16* y, int64_t rows, int64_t K, Rounding rnd) {
  check(rows >= 0 && K > 0 && K % kGemvLanes == 0,
        "gemv_bf16: K = " + std::to_string(K) + " is not a positive multiple of 16");
  for (int64_t r = 0; r < rows; ++r) {
    accum<float, kGemvLanes> acc;
    for (int64_t k = 0; k < K; k += kGemvLanes)
      acc = mac(acc, load_v<kGemvLanes>(W + r * K + k), load_v<kGemvLanes>(x + k));
    y[r] = to_bf16(reduce_add(acc), rnd);
  }
}

void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int64_t rows, int64_t K, int shift,
               Rounding rnd) {
  check(rows >= 0 && K > 0 && K % kGemvLanesI8 == 0,
        "gemv_int8: K = " + std::to_string(K) + " is not a positive multiple of 32");
  check(shift >= 0 && shift < 32, "gemv_int8: shift " + std::to_string(shift) + " outside 0..31");
  for (int64_t r = 0; r < rows; ++r) {
    accum<int32_t, kGemvLanesI8> acc;
    for (int64_t k = 0; k < K; k += kGemvLanesI8)
      acc = mac(acc, load_v<kGemvLanesI8>(W + r * K + k), load_v<kGemvLanesI8>(x + k));
    y[r] = srs_int8(reduce_add(acc), shift, rnd);
  }
}

void gemm_bfp16(const uint8_t* A, const uint8_t* B, float* C, int64_t m, int64_t k, int64_t n) {
  check(m > 0 && k > 0 && n > 0 && m % 8 == 0 && k % 8 == 0 && n % 8 == 0,
        "gemm_bfp16: m, k, n = " + std::to_string(m) + ", " + std::to_string(k) + ", " +
            std::to_string(n) + " are not positive multiples of 8");
  const int64_t kb = k / 8, tile = 72;
  for (int64_t i = 0; i < m / 8; ++i)
    for (int64_t j = 0; j < n / 8; ++j) {
      mmul_bfp16_888 mm;
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) mm.c.lane[r * 8 + c] = C[(i * 8 + r) * n + j * 8 + c];
      for (int64_t b = 0; b < kb; ++b) mm.mac(A + (i * kb + b) * tile, B + (j * kb + b) * tile);
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) C[(i * 8 + r) * n + j * 8 + c] = mm.c.lane[r * 8 + c];
    }
}

void pack_bfp16_a(const float* A, int64_t m, int64_t k, uint8_t* out) {
  check(m % 8 == 0 && k % 8 == 0, "pack_bfp16_a: m and k must be multiples of 8");
  for (int64_t i = 0; i < m / 8; ++i)
    for (int64_t b = 0; b < k / 8; ++b)
      for (int r = 0; r < 8; ++r)
        bfp16_encode(A + (i * 8 + r) * k + b * 8, 8, out + ((i * (k / 8) + b) * 8 + r) * 9);
}

void pack_bfp16_b(const float* B, int64_t k, int64_t n, uint8_t* out) {
  check(k % 8 == 0 && n % 8 == 0, "pack_bfp16_b: k and n must be multiples of 8");
  float col[8];
  for (int64_t j = 0; j < n / 8; ++j)
    for (int64_t b = 0; b < k / 8; ++b)
      for (int c = 0; c < 8; ++c) {
        for (int t = 0; t < 8; ++t) col[t] = B[(b * 8 + t) * n + j * 8 + c];
        bfp16_encode(col, 8, out + ((j * (k / 8) + b) * 8 + c) * 9);
      }
}

// ---- decode-layer kernels ----------------------------------------------------------------------

void gemv_bf16_f32(const bf16* W, const bf16* x, float* y, int64_t rows, int64_t K) {
  check(rows >= 0 && K > 0 && K % kGemvLanes == 0,
        "gemv_bf16_f32: K = " + std::to_string(K) + " is not a positive multiple of 16");
  for (int64_t r = 0; r < rows; ++r) {
    accum<float, kGemvLanes> acc;
    for (int64_t k = 0; k < K; k += kGemvLanes)
      acc = mac(acc, load_v<kGemvLanes>(W + r * K + k), load_v<kGemvLanes>(x + k));
    y[r] = reduce_add(acc);
  }
}

void rmsnorm_bf16(const bf16* x, const bf16* gamma, float offset, float eps, bf16* y, int64_t n, Rounding rnd) {
  check(n > 0, "rmsnorm_bf16: n = " + std::to_string(n) + " is not positive");
  accum<float, kGemvLanes> acc;
  for (int64_t i = 0; i < n; i += kGemvLanes) {
    vector<bf16, kGemvLanes> v;  // a short tail loads zeros (a masked load on the core)
    for (int l = 0; l < kGemvLanes && i + l < n; ++l) v.lane[l] = x[i + l];
    acc = mac(acc, v, v);
  }
  const float inv = 1.0f / std::sqrt(reduce_add(acc) / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(to_float(x[i]) * inv * (to_float(gamma[i]) + offset), rnd);
}

void add_bf16(const bf16* a, const bf16* b, bf16* y, int64_t n, Rounding rnd) {
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(to_float(a[i]) + to_float(b[i]), rnd);
}

void mul_bf16(const bf16* a, const bf16* b, bf16* y, int64_t n, Rounding rnd) {
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(to_float(a[i]) * to_float(b[i]), rnd);
}

void silu_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = to_float(x[i]);
    y[i] = to_bf16(v * reciprocal_lut(1.0f + exp_lut(-v)), rnd);
  }
}

void gelu_tanh_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = to_float(x[i]);
    const float u = 0.7978845608f * (v + 0.044715f * v * v * v);
    y[i] = to_bf16(v * reciprocal_lut(1.0f + exp_lut(-2.0f * u)), rnd);
  }
}

void rope_bf16(bf16* x, const float* cos, const float* sin, int64_t heads, int64_t head_dim, bool interleaved,
               Rounding rnd) {
  check(head_dim > 0 && head_dim % 2 == 0, "rope_bf16: head_dim " + std::to_string(head_dim) + " is not even");
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    bf16* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      bf16& lo = interleaved ? v[2 * i] : v[i];
      bf16& hi = interleaved ? v[2 * i + 1] : v[i + half];
      const float a = to_float(lo), b = to_float(hi);
      lo = to_bf16(a * cos[i] - b * sin[i], rnd);
      hi = to_bf16(b * cos[i] + a * sin[i], rnd);
    }
  }
}

AttnPartial attention_partial_bf16(const bf16* q, const bf16* K, const bf16* V, int64_t positions,
                                   int64_t head_dim, float scale, bf16* out, Rounding rnd) {
  check(head_dim > 0 && head_dim % kGemvLanes == 0,
        "attention_partial_bf16: head_dim " + std::to_string(head_dim) + " is not a multiple of 16");
  AttnPartial p{-std::numeric_limits<float>::infinity(), 0.0f};
  if (positions <= 0) {
    for (int64_t d = 0; d < head_dim; ++d) out[d] = bf16{};
    return p;
  }
  std::vector<float> s(static_cast<size_t>(positions));
  for (int64_t t = 0; t < positions; ++t) {
    accum<float, kGemvLanes> acc;
    for (int64_t d = 0; d < head_dim; d += kGemvLanes)
      acc = mac(acc, load_v<kGemvLanes>(q + d), load_v<kGemvLanes>(K + t * head_dim + d));
    s[size_t(t)] = reduce_add(acc) * scale;
    p.max = std::max(p.max, s[size_t(t)]);
  }
  const int64_t chunks = head_dim / kGemvLanes;
  std::vector<accum<float, kGemvLanes>> o(static_cast<size_t>(chunks));
  for (int64_t t = 0; t < positions; ++t) {
    const bf16 pt = to_bf16(exp_lut(s[size_t(t)] - p.max), rnd);
    p.sum += to_float(pt);
    vector<bf16, kGemvLanes> pv;
    pv.lane.fill(pt);
    for (int64_t c = 0; c < chunks; ++c)
      o[size_t(c)] = mac(o[size_t(c)], pv, load_v<kGemvLanes>(V + t * head_dim + c * kGemvLanes));
  }
  const float r = reciprocal_lut(p.sum);
  for (int64_t c = 0; c < chunks; ++c)
    for (int l = 0; l < kGemvLanes; ++l) out[c * kGemvLanes + l] = to_bf16(o[size_t(c)].lane[l] * r, rnd);
  return p;
}

void attention_combine_bf16(const AttnPartial* parts, const bf16* outs, int64_t n_parts, int64_t head_dim,
                            bf16* out, Rounding rnd) {
  check(n_parts > 0, "attention_combine_bf16: no partials");
  float M = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n_parts; ++i) M = std::max(M, parts[i].max);
  std::vector<float> w(static_cast<size_t>(n_parts)), acc(static_cast<size_t>(head_dim), 0.0f);
  float L = 0.0f;
  for (int64_t i = 0; i < n_parts; ++i) {  // an empty partial (l = 0) weighs nothing
    w[size_t(i)] = parts[i].sum > 0.0f ? exp_lut(parts[i].max - M) * parts[i].sum : 0.0f;
    L += w[size_t(i)];
  }
  for (int64_t i = 0; i < n_parts; ++i)
    for (int64_t d = 0; d < head_dim; ++d) acc[size_t(d)] += w[size_t(i)] * to_float(outs[i * head_dim + d]);
  const float r = reciprocal_lut(L);
  for (int64_t d = 0; d < head_dim; ++d) out[d] = to_bf16(acc[size_t(d)] * r, rnd);
}

}  // namespace xdna::aie

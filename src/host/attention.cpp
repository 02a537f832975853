#include "host/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "host/matmul.h"
#include "host/ops.h"

namespace xdna::host {
namespace {

// From this many query rows on, scores and outputs are computed as GEMMs (host::matmul); below
// it (decode) a per-row loop is cheaper than packing.
constexpr int64_t kGemmMinRows = 16;
// Query rows per GEMM block: the score block [rows, S] stays within ~8 MiB.
constexpr int64_t kBlockRows = 64;
constexpr int64_t kScoreBudget = int64_t{1} << 21;

Tensor packed(const char* what, const Tensor& t) {
  if (!t.defined()) throw std::invalid_argument(std::string("attention: ") + what + " is undefined");
  if (t.dtype() != DType::F32)
    throw std::invalid_argument(std::string("attention: ") + what + " must be f32, got " +
                                std::string(dtype_name(t.dtype())));
  return t.contiguous();
}

struct Problem {
  int64_t T, Hq, D, S, Hkv, Dv, group;
  const float *q, *k, *v, *mask;
  float* y;
  AttentionParams p;
  float scale;

  // Keys [lo, hi) visible to query row t.
  void visible(int64_t t, int64_t& lo, int64_t& hi) const {
    const int64_t pos = p.q_offset + t;
    hi = p.causal ? std::min(S, pos + 1) : S;
    lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
  }
  // Scale, soft-cap and mask one raw dot product q·k_j of query row t.
  float logit(float dot, int64_t t, int64_t j) const {
    float s = dot * scale;
    if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
    if (mask) s += mask[t * S + j];
    return s;
  }
};

// Plain-pointer loops (see ops.cpp: captured pointers would be reloaded after each store).
float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
void axpy(float w, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}

// One work item per (query row, head): dot products, softmax, weighted sum of values.
void attention_rows(const Problem& a) {
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(a.S * a.D, 1));
  parallel_for(a.T * a.Hq, grain, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores(a.S);
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t t = it / a.Hq, h = it % a.Hq, kh = h / a.group;
      const float* qr = a.q + (t * a.Hq + h) * a.D;
      float* out = a.y + (t * a.Hq + h) * a.Dv;
      std::fill(out, out + a.Dv, 0.0f);
      int64_t lo, hi;
      a.visible(t, lo, hi);
      if (lo >= hi) continue;  // nothing visible
      for (int64_t j = lo; j < hi; ++j)
        scores[j - lo] = a.logit(dot(qr, a.k + (j * a.Hkv + kh) * a.D, a.D), t, j);
      softmax_rows(scores.data(), 1, hi - lo);
      for (int64_t j = lo; j < hi; ++j) {
        const float w = scores[j - lo];
        if (w != 0.0f) axpy(w, a.v + (j * a.Hkv + kh) * a.Dv, out, a.Dv);
      }
    }
  });
}

// Copies rows [r0, r1) of head h of x [R, H, C], times `mul`, into a packed [r1 - r0, C] tensor.
Tensor gather_head(const float* x, int64_t H, int64_t C, int64_t h, int64_t r0, int64_t r1,
                   float mul = 1.0f) {
  Tensor out = Tensor::empty({r1 - r0, C});
  float* o = out.data<float>();
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = x + (r * H + h) * C;
    float* dst = o + (r - r0) * C;
    if (mul == 1.0f)
      std::memcpy(dst, src, C * sizeof(float));
    else
      for (int64_t c = 0; c < C; ++c) dst[c] = src[c] * mul;
  }
  return out;
}

// Values of keys [lo, hi) of kv head kh of v [S, H, Dv], transposed to [Dv, hi - lo]: matmul's
// weight layout. Tiles of 8 keys keep both the reads and the writes in few cache lines.
Tensor transpose_values(const float* v, int64_t H, int64_t Dv, int64_t kh, int64_t lo, int64_t hi) {
  const int64_t w = hi - lo;
  Tensor vt = Tensor::empty({Dv, w});
  float* o = vt.data<float>();
  for (int64_t j0 = lo; j0 < hi; j0 += 8) {
    const int64_t j1 = std::min(hi, j0 + 8);
    for (int64_t d = 0; d < Dv; ++d)
      for (int64_t j = j0; j < j1; ++j) o[d * w + (j - lo)] = v[(j * H + kh) * Dv + d];
  }
  return vt;
}

// Per (query head, block of query rows): scores = Q Kᵀ and out = P V as GEMMs over the keys any
// row of the block can see; the per-row visibility, cap and mask are applied in between. All
// items run in ONE parallel region, and the GEMMs and softmax inside it run on the calling thread
// (nested OpenMP regions are inactive): a region per GEMM cost 3 fork/joins per head and block,
// ~430 per MiniLM sequence, which dominated encoder attention on 2 threads (profile in
// docs/benchmarks-embeddings.md).
void attention_gemm(const Problem& a) {
  const int64_t rows = std::clamp<int64_t>(kScoreBudget / std::max<int64_t>(a.S, 1), 1, kBlockRows);
  const int64_t blocks = (a.T + rows - 1) / rows;
  parallel_for(a.Hq * blocks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t h = it / blocks, kh = h / a.group, t0 = (it % blocks) * rows;
      const int64_t t1 = std::min(a.T, t0 + rows), n = t1 - t0;
      int64_t lo = a.S, hi = 0;  // union of the rows' visible ranges
      for (int64_t t = t0; t < t1; ++t) {
        int64_t l, hh;
        a.visible(t, l, hh);
        if (l < hh) lo = std::min(lo, l), hi = std::max(hi, hh);
      }
      if (lo >= hi) {  // no row of the block sees any key
        for (int64_t t = t0; t < t1; ++t) std::fill_n(a.y + (t * a.Hq + h) * a.Dv, a.Dv, 0.0f);
        continue;
      }
      const int64_t w = hi - lo;
      const Tensor keys = gather_head(a.k, a.Hkv, a.D, kh, lo, hi);  // [w, D]
      const Tensor vt = transpose_values(a.v, a.Hkv, a.Dv, kh, lo, hi);  // [Dv, w]
      // The logit scale is folded into the gathered queries: the scores come out scaled.
      const Tensor qb = gather_head(a.q, a.Hq, a.D, h, t0, t1, a.scale);
      Tensor scores = matmul(qb, keys);  // [n, w]
      const bool plain = a.p.softcap <= 0.0f && !a.mask;
      for (int64_t r = 0; r < n; ++r) {
        float* s = scores.data<float>() + r * w;
        int64_t l, hh;
        a.visible(t0 + r, l, hh);
        if (!plain || l > lo || hh < hi) {  // only rows with a cap, mask or hidden keys need work
          const float* mrow = a.mask ? a.mask + (t0 + r) * a.S : nullptr;
          for (int64_t j = lo; j < hi; ++j) {
            float x = s[j - lo];
            if (a.p.softcap > 0.0f) x = a.p.softcap * std::tanh(x / a.p.softcap);
            if (mrow) x += mrow[j];
            s[j - lo] = j >= l && j < hh ? x : -std::numeric_limits<float>::infinity();
          }
        }
        softmax_rows(s, 1, w);
      }
      const Tensor out = matmul(scores, vt);  // [n, Dv]
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(a.y + ((t0 + r) * a.Hq + h) * a.Dv, out.data<float>() + r * a.Dv, a.Dv * sizeof(float));
    }
  });
}

}  // namespace

Tensor attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                 const AttentionParams& p, const Tensor* mask_in) {
  const Tensor q = packed("q", q_in), k = packed("k", k_in), v = packed("v", v_in);
  const std::string shapes = "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) +
                             ", v " + shape_str(v.shape());
  if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3)
    throw std::invalid_argument("attention: expects q [T, Hq, D], k/v [S, Hkv, D]; got " + shapes);
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t S = k.dim(0), Hkv = k.dim(1), Dv = v.dim(2);
  if (k.dim(2) != D || v.dim(0) != S || v.dim(1) != Hkv || Hkv == 0 || Hq % Hkv != 0)
    throw std::invalid_argument("attention: mismatched shapes " + shapes);
  if (p.q_offset < 0 || p.window < 0)
    throw std::invalid_argument("attention: negative q_offset or window");
  Tensor mask;
  if (mask_in) {
    mask = packed("mask", *mask_in);
    if (mask.shape() != Shape{T, S})
      throw std::invalid_argument("attention: mask " + shape_str(mask.shape()) +
                                  " must be [T, S] for " + shapes);
  }
  Tensor y = Tensor::empty({T, Hq, Dv});
  if (y.numel() == 0) return y;
  const Problem a{T, Hq, D, S, Hkv, Dv, Hq / Hkv, q.data<float>(), k.data<float>(),
                  v.data<float>(), mask.defined() ? mask.data<float>() : nullptr,
                  y.data<float>(), p, p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(D))};
  if (T >= kGemmMinRows && S > 0 && D > 0)
    attention_gemm(a);
  else
    attention_rows(a);
  return y;
}

}  // namespace xdna::host

#include "host/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/gemm.h"
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
    hi = p.causal ? std::min(S, pos + 1) : p.window > 0 ? std::min(S, pos + p.window) : S;
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

// y += w · x over n floats. The attention file is built for the baseline ISA, so the loop is
// compiled once per vector width (target attributes) and picked at run time like the kernels.
void axpy_scalar(float w, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) void axpy_avx2(float w, const float* __restrict x, float* __restrict y,
                                                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}
__attribute__((target("avx512f"))) void axpy_avx512(float w, const float* __restrict x, float* __restrict y,
                                                    int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}
#endif
using AxpyFn = void (*)(float, const float* __restrict, float* __restrict, int64_t);
AxpyFn active_axpy() {
#if defined(__GNUC__) && defined(__x86_64__)
  switch (active_isa()) {
    case Isa::Avx512: return axpy_avx512;
    case Isa::Avx2: return axpy_avx2;
    default: break;
  }
#endif
  return axpy_scalar;
}

// Per-thread scratch that only grows: decode runs this op ~20 times a token, so no allocations.
float* scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Few query rows (decode): flash-decoding. Work items are (query row, kv head, key chunk); one
// item streams its chunk of K and V once for ALL the query heads of the kv head's group (GQA),
// keeping their softmax numerators in a chunk-local scale (max m, sum l). The chunks are then
// merged per (row, head): y = Σ_c l_c e^(m_c - M) y_c / Σ_c l_c e^(m_c - M). Splitting the keys
// keeps both threads busy when there is one kv head (Gemma 3 270M) and reads the cache once.
void attention_rows(const Problem& a) {
  const IsaKernels& kern = active_kernels();
  const AxpyFn axpy = active_axpy();
  const int64_t G = a.group, rows_heads = a.T * a.Hkv;
  // Chunks of at least 64 keys, enough of them for every thread to get a share.
  const int64_t max_split = std::max<int64_t>(1, (a.S + 63) / 64);
  const int64_t split =
      std::clamp<int64_t>((2 * num_threads() + rows_heads - 1) / rows_heads, 1, std::min<int64_t>(max_split, 64));
  const int64_t items = rows_heads * split, stride = G * (a.Dv + 2);  // per item: G × (y_c, m_c, l_c)
  thread_local std::vector<float> partial_buf;
  float* partial = scratch(partial_buf, static_cast<size_t>(items * stride));
  parallel_for(items, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> score_buf;
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t c = it % split, kh = (it / split) % a.Hkv, t = it / (split * a.Hkv);
      float* part = partial + it * stride;  // [G][Dv] outputs, then [G] maxima, then [G] sums
      float* pm = part + G * a.Dv;
      float* pl = pm + G;
      std::fill(part, part + G * a.Dv, 0.0f);
      int64_t lo, hi;
      a.visible(t, lo, hi);
      const int64_t per = (std::max<int64_t>(hi - lo, 0) + split - 1) / split;
      const int64_t c0 = lo + c * per, c1 = std::min(hi, c0 + per), n = c1 - c0;
      for (int64_t g = 0; g < G; ++g) pm[g] = -std::numeric_limits<float>::infinity(), pl[g] = 0.0f;
      if (n <= 0) continue;
      float* s = scratch(score_buf, static_cast<size_t>(G * n));  // [G][n]
      XRow xq[64];
      const int64_t gq = std::min<int64_t>(G, 64);
      for (int64_t g = 0; g < gq; ++g) xq[g] = {a.q + (t * a.Hq + kh * G + g) * a.D, nullptr, nullptr, a.D};
      for (int64_t j = c0; j < c1; ++j) {
        const float* kr = a.k + (j * a.Hkv + kh) * a.D;
        for (int64_t g = 0; g < G; ++g) {
          const float d = g < gq ? kern.dot_f32(kr, xq[g]) : kern.dot_f32(kr, XRow{a.q + (t * a.Hq + kh * G + g) * a.D, nullptr, nullptr, a.D});
          s[g * n + (j - c0)] = a.logit(d, t, j);
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        float* sg = s + g * n;
        const int64_t arg = std::max_element(sg, sg + n) - sg;
        if (sg[arg] == -std::numeric_limits<float>::infinity()) {  // every key masked out
          std::fill(sg, sg + n, 0.0f);
          continue;
        }
        pm[g] = sg[arg];
        softmax_rows(sg, 1, n);
        pl[g] = 1.0f / sg[arg];  // the max's numerator is e^0 = 1, so it holds 1 / l
      }
      for (int64_t j = c0; j < c1; ++j) {
        const float* vr = a.v + (j * a.Hkv + kh) * a.Dv;
        for (int64_t g = 0; g < G; ++g) {
          const float w = s[g * n + (j - c0)];
          if (w != 0.0f) axpy(w, vr, part + g * a.Dv, a.Dv);
        }
      }
    }
  });
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t h = 0; h < a.Hq; ++h) {
      const int64_t kh = h / G, g = h % G;
      const float* first = partial + ((t * a.Hkv + kh) * split) * stride;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < split; ++c) mx = std::max(mx, first[c * stride + G * a.Dv + g]);
      float* out = a.y + (t * a.Hq + h) * a.Dv;
      std::fill(out, out + a.Dv, 0.0f);
      if (mx == -std::numeric_limits<float>::infinity()) continue;  // nothing visible
      float weights[64], total = 0.0f;
      const int64_t nc = split;
      for (int64_t c = 0; c < nc; ++c) {
        const float* pc = first + c * stride;
        const float l = pc[G * a.Dv + G + g], m = pc[G * a.Dv + g];
        weights[c] = l > 0.0f ? l * std::exp(m - mx) : 0.0f;
        total += weights[c];
      }
      for (int64_t c = 0; c < nc; ++c)
        if (weights[c] > 0.0f) axpy(weights[c] / total, first + c * stride + g * a.Dv, out, a.Dv);
    }
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
  if (T >= kGemmMinRows && S > 0 && D > 0) {
    attention_gemm(a);
  } else if (T > 1 && !p.causal && p.window == 0 && !mask.defined() && T * a.group <= 64) {
    // A few query rows that all see every key (Whisper's cross-attention over 5 beams): fold the
    // rows into the GQA group, so each K/V row is streamed once for all of them, not T times.
    // q [T, Hkv, G, D] -> [Hkv, T, G, D] (a 1-row problem with group T·G), and back for y.
    const int64_t G = a.group;
    Tensor qf = Tensor::empty({1, Hq * T, D}), yf = Tensor::empty({1, Hq * T, Dv});
    const float* qs = q.data<float>();
    float* qd = qf.data<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t kh = 0; kh < Hkv; ++kh)
        std::copy_n(qs + (t * Hq + kh * G) * D, G * D, qd + ((kh * T + t) * G) * D);
    Problem f = a;
    f.T = 1, f.Hq = Hq * T, f.group = G * T, f.q = qd, f.y = yf.data<float>();
    attention_rows(f);
    const float* ys = yf.data<float>();
    float* yd = y.data<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t kh = 0; kh < Hkv; ++kh)
        std::copy_n(ys + ((kh * T + t) * G) * Dv, G * Dv, yd + (t * Hq + kh * G) * Dv);
  } else {
    attention_rows(a);
  }
  return y;
}

}  // namespace xdna::host

#include "host/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/attention_decode.h"
#include "host/gemm.h"
#include "host/kv_cache.h"
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

// t itself when it is [S, H, C] with each row of C packed (any strides between positions and
// heads: a head-major KvCache view is read in place), else a packed copy.
Tensor rows_packed(const Tensor& t) {
  return t.ndim() == 3 && t.strides()[2] == 1 ? t : t.contiguous();
}

Tensor packed(const char* what, const Tensor& t, bool strided_rows = false) {
  if (!t.defined()) throw std::invalid_argument(std::string("attention: ") + what + " is undefined");
  if (t.dtype() != DType::F32)
    throw std::invalid_argument(std::string("attention: ") + what + " must be f32, got " +
                                std::string(dtype_name(t.dtype())));
  return strided_rows ? rows_packed(t) : t.contiguous();
}

struct Problem {
  int64_t T, Hq, D, S, Hkv, Dv, group;
  const float *q, *k, *v, *mask;
  float* y;
  AttentionParams p;
  float scale;
  // A half-precision KV cache (decode): k and v are unset and these hold the f16 / bf16 rows.
  DType kv = DType::F32;
  const void *k_half = nullptr, *v_half = nullptr;
  // Element strides of k and v between positions and between kv heads (rows of D are packed):
  // Hkv·D and D for a packed [S, Hkv, D], D and capacity·D for a head-major KvCache view.
  int64_t k_pos = 0, k_head = 0, v_pos = 0, v_head = 0;

  // Keys [lo, hi) visible to query row t.
  void visible(int64_t t, int64_t& lo, int64_t& hi) const {
    const int64_t pos = p.q_offset + t;
    hi = p.causal ? std::min(S, pos + 1) : p.window > 0 ? std::min(S, pos + p.window) : S;
    lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
  }
  // Logits are only scaled: no soft-cap, no mask.
  bool plain_logits() const { return p.softcap <= 0.0f && !mask; }
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

// Keys (or values) per tile widened from a half-precision cache: 32 rows of up to 128 floats
// stay in L1 between the widening and the dots.
constexpr int64_t kHalfTile = 32;

// Rows [j0, j1) of kv head kh of k or v (rows `pos` elements apart, heads `head` apart): a
// pointer to row j0 and the float stride between rows. An f32 cache is read in place; a half
// cache's rows are widened into `tile`.
const float* kv_rows(const float* f32, const void* half, DType dt, int64_t pos, int64_t head, int64_t C,
                     int64_t kh, int64_t j0, int64_t j1, float* tile, int64_t& stride) {
  if (dt == DType::F32) {
    stride = pos;
    return f32 + j0 * pos + kh * head;
  }
  kv_load_rows(static_cast<const uint16_t*>(half) + j0 * pos + kh * head, dt, pos, j1 - j0, C, tile);
  stride = C;
  return tile;
}

// Softmax of each of the G score rows s[g] (n keys) in place, keeping the row's max in pm[g] and its
// 1 / (sum of numerators) in pl[g]; a row whose keys are all masked becomes zeros (pm, pl stay
// -inf, 0). False when every row was masked.
bool softmax_groups(float* s, int64_t G, int64_t n, float* pm, float* pl) {
  bool any = false;
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
    any = true;
  }
  return any;
}

const float** q_ptrs(std::vector<const float*>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Element `off` of an f32 cache (f32 set) or of a half one.
const void* kv_at(const float* f32, const void* half, DType dt, int64_t off) {
  return dt == DType::F32 ? static_cast<const void*>(f32 + off) : static_cast<const uint16_t*>(half) + off;
}

// Few query rows (decode): flash-decoding. Work items are (query row, kv head, key chunk); one
// item streams its chunk of K and V once for ALL the query heads of the kv head's group (GQA),
// keeping their softmax numerators in a chunk-local scale (max m, sum l). The chunks are then
// merged per (row, head): y = Σ_c l_c e^(m_c - M) y_c / Σ_c l_c e^(m_c - M). Splitting the keys
// keeps both threads busy when there is one kv head (Gemma 3 270M) and reads the cache once.
// With AVX-512 a half-precision cache is read by the kernels of host/attention_decode.h, which widen
// K and V in registers (its result differs from an f32 cache of the same values only by f32
// summation order); elsewhere it is widened tile by tile and runs the f32 loops, so it equals an
// f32 cache holding the rounded values bit for bit.
void attention_rows(const Problem& a) {
  const IsaKernels& kern = active_kernels();
  const AxpyFn axpy = active_axpy();
  // f32 keeps the prefetching dot / axpy loops: the fused kernels measured ~35% slower over an f32
  // cache at Gemma 3's shape (docs/benchmarks-llm.md, 2026-12-01).
  const bool fused = active_isa() == Isa::Avx512 && a.kv != DType::F32;
  const int64_t G = a.group, rows_heads = a.T * a.Hkv;
  // Chunks of at least 64 keys, enough of them for every thread to get a share.
  const int64_t max_split = std::max<int64_t>(1, (a.S + 63) / 64);
  const int64_t split =
      std::clamp<int64_t>((2 * num_threads() + rows_heads - 1) / rows_heads, 1, std::min<int64_t>(max_split, 64));
  const int64_t items = rows_heads * split, stride = G * (a.Dv + 2);  // per item: G × (y_c, m_c, l_c)
  thread_local std::vector<float> partial_buf;
  float* partial = scratch(partial_buf, static_cast<size_t>(items * stride));
  // Items are claimed one at a time, not split in fixed halves: an item streams ~100 KB or more,
  // and with fixed halves the thread that started later (or shares its core) left the other
  // waiting ~15% of decode attention's time (perf, Qwen3-0.6B). An item's result does not depend
  // on the thread that runs it.
  std::atomic<int64_t> next_item{0};
  parallel_for(std::min<int64_t>(num_threads(), items), 1, [&](int64_t, int64_t) {
    thread_local std::vector<float> score_buf, tile_buf;
    thread_local std::vector<const float*> qp_buf;
    float* tile = a.kv == DType::F32 || fused ? nullptr
                                     : scratch(tile_buf, static_cast<size_t>(kHalfTile * std::max(a.D, a.Dv)));
    for (int64_t it; (it = next_item.fetch_add(1, std::memory_order_relaxed)) < items;) {
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
      if (fused) {  // AVX-512, f16 / bf16: K and V read in their own type, widened in registers
        const float** qp = q_ptrs(qp_buf, G);
        for (int64_t g = 0; g < G; ++g) qp[g] = a.q + (t * a.Hq + kh * G + g) * a.D;
        decode_scores_avx512(kv_at(a.k, a.k_half, a.kv, c0 * a.k_pos + kh * a.k_head), a.kv, a.k_pos, n, a.D, qp, G,
                             s, n);
        if (a.plain_logits()) {  // the same product as logit(), in a loop the compiler vectorises
          for (int64_t i = 0; i < G * n; ++i) s[i] *= a.scale;
        } else {
          for (int64_t g = 0; g < G; ++g)
            for (int64_t j = 0; j < n; ++j) s[g * n + j] = a.logit(s[g * n + j], t, c0 + j);
        }
        if (softmax_groups(s, G, n, pm, pl))
          decode_wsum_avx512(kv_at(a.v, a.v_half, a.kv, c0 * a.v_pos + kh * a.v_head), a.kv, a.v_pos, n, a.Dv, s, n,
                             G, part);
        continue;
      }
      XRow xq[64];
      const int64_t gq = std::min<int64_t>(G, 64);
      for (int64_t g = 0; g < gq; ++g) xq[g] = {a.q + (t * a.Hq + kh * G + g) * a.D, nullptr, nullptr, a.D};
      for (int64_t j0 = c0; j0 < c1; j0 += kHalfTile) {
        const int64_t j1 = std::min(c1, j0 + kHalfTile);
        int64_t ks;
        const float* k0 = kv_rows(a.k, a.k_half, a.kv, a.k_pos, a.k_head, a.D, kh, j0, j1, tile, ks);
        for (int64_t j = j0; j < j1; ++j) {
          const float* kr = k0 + (j - j0) * ks;
          for (int64_t g = 0; g < G; ++g) {
            const float d = g < gq ? kern.dot_f32(kr, xq[g]) : kern.dot_f32(kr, XRow{a.q + (t * a.Hq + kh * G + g) * a.D, nullptr, nullptr, a.D});
            s[g * n + (j - c0)] = a.logit(d, t, j);
          }
        }
      }
      softmax_groups(s, G, n, pm, pl);
      for (int64_t j0 = c0; j0 < c1; j0 += kHalfTile) {
        const int64_t j1 = std::min(c1, j0 + kHalfTile);
        int64_t vs;
        const float* v0 = kv_rows(a.v, a.v_half, a.kv, a.v_pos, a.v_head, a.Dv, kh, j0, j1, tile, vs);
        for (int64_t j = j0; j < j1; ++j) {
          const float* vr = v0 + (j - j0) * vs;
          for (int64_t g = 0; g < G; ++g) {
            const float w = s[g * n + (j - c0)];
            if (w != 0.0f) axpy(w, vr, part + g * a.Dv, a.Dv);
          }
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

// Copies rows [r0, r1) of head h of x [R, H, C] (rows `pos` floats apart, heads `head` apart),
// times `mul`, into a packed [r1 - r0, C] tensor.
Tensor gather_head(const float* x, int64_t pos, int64_t head, int64_t C, int64_t h, int64_t r0, int64_t r1,
                   float mul = 1.0f) {
  Tensor out = Tensor::empty({r1 - r0, C});
  float* o = out.data<float>();
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = x + r * pos + h * head;
    float* dst = o + (r - r0) * C;
    if (mul == 1.0f)
      std::memcpy(dst, src, C * sizeof(float));
    else
      for (int64_t c = 0; c < C; ++c) dst[c] = src[c] * mul;
  }
  return out;
}

// Values of keys [lo, hi) of kv head kh of v [S, H, Dv] (strides pos, head), transposed to
// [Dv, hi - lo]: matmul's weight layout. Tiles of 8 keys keep both the reads and the writes in few
// cache lines.
Tensor transpose_values(const float* v, int64_t pos, int64_t head, int64_t Dv, int64_t kh, int64_t lo,
                        int64_t hi) {
  const int64_t w = hi - lo;
  Tensor vt = Tensor::empty({Dv, w});
  float* o = vt.data<float>();
  for (int64_t j0 = lo; j0 < hi; j0 += 8) {
    const int64_t j1 = std::min(hi, j0 + 8);
    for (int64_t d = 0; d < Dv; ++d)
      for (int64_t j = j0; j < j1; ++j) o[d * w + (j - lo)] = v[j * pos + kh * head + d];
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
      const Tensor keys = gather_head(a.k, a.k_pos, a.k_head, a.D, kh, lo, hi);  // [w, D]
      const Tensor vt = transpose_values(a.v, a.v_pos, a.v_head, a.Dv, kh, lo, hi);  // [Dv, w]
      // The logit scale is folded into the gathered queries: the scores come out scaled.
      const Tensor qb = gather_head(a.q, a.Hq * a.D, a.D, a.D, h, t0, t1, a.scale);
      Tensor scores = matmul(qb, keys);  // [n, w]
      const bool plain = a.p.softcap <= 0.0f && !a.mask;
      for (int64_t r = 0; r < n; ++r) {
        float* s = scores.data<float>() + r * w;
        int64_t l, hh;
        a.visible(t0 + r, l, hh);
        if (plain && l == lo && hh > l) {  // causal prefill: only keys past the row's own are hidden
          std::fill(s + (hh - lo), s + w, -std::numeric_limits<float>::infinity());
        } else if (!plain || l > lo || hh < hi) {  // rows with a cap, mask or hidden keys
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

// k and v as attention reads them: f32, or (both f16 or both bf16, a half-precision KV cache)
// packed half rows when few query rows run (decode); the GEMM path widens a half cache to f32.
bool half_kv(const Tensor& k, const Tensor& v) {
  return k.defined() && v.defined() && k.dtype() == v.dtype() &&
         (k.dtype() == DType::F16 || k.dtype() == DType::BF16);
}

// The GEMM's packed weights for Vᵀ (kv head kh of v [S, H, Dv], strides pos and head) built
// straight from v: panel p
// holds, for each key k, values [p·NR, p·NR + NR) of that key (zero past Dv), which is exactly
// what pack_weights makes of the transposed [Dv, S] matrix, so the products are unchanged; each
// key's values are one contiguous copy instead of a transpose and a second pass.
std::shared_ptr<const PackedWeights> pack_values(const float* v, int64_t pos, int64_t head, int64_t Dv,
                                                 int64_t kh, int64_t S) {
  const int64_t NR = active_kernels().nr, panels = (Dv + NR - 1) / NR;
  auto p = std::make_shared<PackedWeights>();
  p->nr = static_cast<int>(NR);
  p->rows = Dv, p->cols = S;
  p->storage = std::make_unique<HeapBuffer>(static_cast<size_t>(panels * NR * S) * sizeof(float));
  float* dst = reinterpret_cast<float*>(p->storage->data());
  for (int64_t pn = 0; pn < panels; ++pn) {
    const int64_t d0 = pn * NR, w = std::min(NR, Dv - d0);
    for (int64_t k = 0; k < S; ++k) {
      float* out = dst + (pn * S + k) * NR;
      std::memcpy(out, v + k * pos + kh * head + d0, w * sizeof(float));
      std::fill(out + w, out + NR, 0.0f);
    }
  }
  return p;
}

// Bidirectional attention (encoders: no causal mask, no window, no soft-cap): every query row sees
// all S keys.
// Work items are whole heads, so each head's keys and values are packed for the GEMM once
// (attention_gemm gathers and packs them again for every block of query rows: 4 times per head
// at T = 197) and the output block is written straight into y. The keys are packed from their
// strided rows in place, the values by pack_values; only the scaled queries are gathered. Used
// when the heads split evenly over the threads (a multiple of the thread count, or at least 4 per
// thread); otherwise attention_gemm's finer row blocks keep every thread busy. Same GEMM kernels and k order as attention_gemm, so the results are bit-identical
// to it, except where its last 64-row block has <= 4 rows (matmul runs those as GEMV dots). Row
// blocks are balanced (197 rows: 50, 49, 49, 49, not 64, 64, 64, 5).
void attention_encoder(const Problem& a) {
  const int64_t max_rows = std::clamp<int64_t>(kScoreBudget / a.S, 1, kBlockRows);
  const int64_t blocks = (a.T + max_rows - 1) / max_rows, base = a.T / blocks, extra = a.T % blocks;
  const int64_t ld_k = a.k_pos, ld_y = a.Hq * a.Dv;
  parallel_for(a.Hq, 1, [&](int64_t h0, int64_t h1) {
    thread_local std::vector<float> q_buf, s_buf;
    float* qb = scratch(q_buf, static_cast<size_t>((base + 1) * a.D));
    float* scores = scratch(s_buf, static_cast<size_t>((base + 1) * a.S));
    std::shared_ptr<const PackedWeights> keys_packed, values_packed;
    int64_t kv_head = -1;
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kh = h / a.group;
      WeightRows keys;  // [S, D] rows of kv head kh, in place
      keys.data = reinterpret_cast<const uint8_t*>(a.k + kh * a.k_head);
      keys.row_bytes = ld_k * static_cast<int64_t>(sizeof(float));
      keys.rows = a.S, keys.cols = a.D;
      WeightRows values;  // [Dv, S], the transposed values: read only from values_packed
      values.rows = a.Dv, values.cols = a.S;
      if (kh != kv_head) {  // GQA: the heads of one group share the packs
        keys_packed = pack_weights(keys);
        values_packed = pack_values(a.v, a.v_pos, a.v_head, a.Dv, kh, a.S);
        kv_head = kh;
      }
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t t0 = b * base + std::min(b, extra), n = base + (b < extra ? 1 : 0);
        // The logit scale is folded into the gathered queries: the scores come out scaled.
        for (int64_t r = 0; r < n; ++r) {
          const float* src = a.q + ((t0 + r) * a.Hq + h) * a.D;
          float* dst = qb + r * a.D;
          for (int64_t c = 0; c < a.D; ++c) dst[c] = src[c] * a.scale;
        }
        gemm(qb, a.D, keys, scores, a.S, n, keys_packed.get());
        for (int64_t r = 0; r < n; ++r) {
          float* s = scores + r * a.S;
          if (a.mask) {
            const float* mrow = a.mask + (t0 + r) * a.S;
            for (int64_t j = 0; j < a.S; ++j) s[j] += mrow[j];
          }
          softmax_rows(s, 1, a.S);
        }
        gemm(scores, a.S, values, a.y + (t0 * a.Hq + h) * a.Dv, ld_y, n, values_packed.get());
      }
    }
  });
}

}  // namespace

Tensor attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                 const AttentionParams& p, const Tensor* mask_in) {
  const bool half = half_kv(k_in, v_in) && q_in.defined() && q_in.ndim() == 3 && q_in.dim(0) < kGemmMinRows;
  const Tensor q = packed("q", q_in);
  const Tensor k = half ? rows_packed(k_in) : packed("k", half_kv(k_in, v_in) ? to_f32(k_in) : k_in, true);
  const Tensor v = half ? rows_packed(v_in) : packed("v", half_kv(k_in, v_in) ? to_f32(v_in) : v_in, true);
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
  Problem a{T, Hq, D, S, Hkv, Dv, Hq / Hkv, q.data<float>(), k.data<float>(),
            v.data<float>(), mask.defined() ? mask.data<float>() : nullptr,
            y.data<float>(), p, p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(D))};
  a.k_pos = k.strides()[0], a.k_head = k.strides()[1], a.v_pos = v.strides()[0], a.v_head = v.strides()[1];
  if (half) a.kv = k.dtype(), a.k = a.v = nullptr, a.k_half = k.raw(), a.v_half = v.raw();
  const int64_t nt = num_threads();
  if (T >= kGemmMinRows && S > 0 && D > 0 && !p.causal && p.window == 0 && p.softcap <= 0.0f &&
      (Hq % nt == 0 || Hq >= 4 * nt)) {
    attention_encoder(a);
  } else if (T >= kGemmMinRows && S > 0 && D > 0) {
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

// Decode attention's scores and weighted sum over an f32, f16 or bf16 cache (host/attention_decode.h).
// GCC 12's AVX-512 headers build vectors from _mm*_undefined_*() and trip these warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "host/attention_decode.h"

namespace xdna::host {
namespace {

// 16 elements of the cache at p as 16 floats: all of them, or the lanes of m (the rest 0).
struct LoadF32 {
  using T = float;
  static __m512 full(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 part(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadF16 {
  using T = uint16_t;
  static __m512 full(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 part(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct LoadBF16 {  // bf16 is the top half of an f32: widening is a 16-bit shift
  using T = uint16_t;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 full(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 part(const uint16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

// Software prefetch this far ahead of each cache row read (as the GEMV kernels do): with the
// hardware prefetchers alone these loops ran slower than attention.cpp's dot / axpy loops, which
// prefetch. Into L2 only (T2), as the Q6_K GEMV does, so that the demand loads keep the L1 miss
// slots: against 4 KiB into L1, Qwen3-0.6B's decode attention at 640 keys (f16) took 24% less
// time on one thread and 11% less on two (medians of 5 interleaved runs, 2026-12-01).
constexpr int kPrefetchBytes = 8192;
template <typename T>
inline void prefetch(const T* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T2);
}

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }

// KB keys (ks elements apart) against GB queries: KB·GB accumulators, each key chunk widened once
// and used for all GB queries.
template <class L, int GB, int KB>
void scores_block(const typename L::T* k, int64_t ks, int64_t D, const float* const* q, float* s, int64_t ld_s) {
  __m512 acc[KB][GB];
  for (int r = 0; r < KB; ++r)
    for (int g = 0; g < GB; ++g) acc[r][g] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= D; c += 16) {
    __m512 kv[KB];
    for (int r = 0; r < KB; ++r) prefetch(k + r * ks + c), kv[r] = L::full(k + r * ks + c);
    for (int g = 0; g < GB; ++g) {
      const __m512 qv = _mm512_loadu_ps(q[g] + c);
      for (int r = 0; r < KB; ++r) acc[r][g] = _mm512_fmadd_ps(kv[r], qv, acc[r][g]);
    }
  }
  if (c < D) {
    const __mmask16 m = lanes(D - c);
    __m512 kv[KB];
    for (int r = 0; r < KB; ++r) kv[r] = L::part(k + r * ks + c, m);
    for (int g = 0; g < GB; ++g) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q[g] + c);
      for (int r = 0; r < KB; ++r) acc[r][g] = _mm512_fmadd_ps(kv[r], qv, acc[r][g]);
    }
  }
  for (int r = 0; r < KB; ++r)
    for (int g = 0; g < GB; ++g) s[g * ld_s + r] = _mm512_reduce_add_ps(acc[r][g]);
}

template <class L, int GB>
void scores_group(const typename L::T* k, int64_t ks, int64_t n, int64_t D, const float* const* q, float* s,
                  int64_t ld_s) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) scores_block<L, GB, 4>(k + j * ks, ks, D, q, s + j, ld_s);
  for (; j < n; ++j) scores_block<L, GB, 1>(k + j * ks, ks, D, q, s + j, ld_s);
}

// Keys per tile when the queries take several passes (G > 4): the tile stays in L1 between them.
constexpr int64_t kTile = 64;

template <class L>
void scores(const void* kp, int64_t ks, int64_t n, int64_t D, const float* const* q, int64_t G, float* s,
            int64_t ld_s) {
  const auto* k = static_cast<const typename L::T*>(kp);
  for (int64_t j0 = 0; j0 < n; j0 += kTile) {
    const int64_t nj = std::min(kTile, n - j0);
    for (int64_t g0 = 0; g0 < G; g0 += 4) {
      const typename L::T* kt = k + j0 * ks;
      float* st = s + g0 * ld_s + j0;
      switch (std::min<int64_t>(4, G - g0)) {
        case 1: scores_group<L, 1>(kt, ks, nj, D, q + g0, st, ld_s); break;
        case 2: scores_group<L, 2>(kt, ks, nj, D, q + g0, st, ld_s); break;
        case 3: scores_group<L, 3>(kt, ks, nj, D, q + g0, st, ld_s); break;
        default: scores_group<L, 4>(kt, ks, nj, D, q + g0, st, ld_s); break;
      }
    }
  }
}

// 64 output columns [d0, d0 + 64) of GB queries held in registers over n value rows; Full: all 64
// columns exist (else lanes past Dv are masked off).
template <class L, int GB, bool Full>
void wsum_block(const typename L::T* v, int64_t vs, int64_t n, int64_t Dv, int64_t d0, const float* w,
                int64_t ld_w, float* out) {
  __mmask16 m[4];
  for (int u = 0; u < 4; ++u) m[u] = lanes(Dv - d0 - 16 * u);
  __m512 acc[GB][4];
  for (int g = 0; g < GB; ++g)
    for (int u = 0; u < 4; ++u)
      acc[g][u] = Full ? _mm512_loadu_ps(out + g * Dv + d0 + 16 * u)
                       : _mm512_maskz_loadu_ps(m[u], out + g * Dv + d0 + 16 * u);
  for (int64_t j = 0; j < n; ++j) {
    const typename L::T* row = v + j * vs + d0;
    __m512 vv[4];
    for (int u = 0; u < 4; ++u) prefetch(row + 16 * u), vv[u] = Full ? L::full(row + 16 * u) : L::part(row + 16 * u, m[u]);
    for (int g = 0; g < GB; ++g) {
      const __m512 wb = _mm512_set1_ps(w[g * ld_w + j]);
      for (int u = 0; u < 4; ++u) acc[g][u] = _mm512_fmadd_ps(wb, vv[u], acc[g][u]);
    }
  }
  for (int g = 0; g < GB; ++g)
    for (int u = 0; u < 4; ++u) {
      if (Full)
        _mm512_storeu_ps(out + g * Dv + d0 + 16 * u, acc[g][u]);
      else
        _mm512_mask_storeu_ps(out + g * Dv + d0 + 16 * u, m[u], acc[g][u]);
    }
}

template <class L, int GB>
void wsum_group(const typename L::T* v, int64_t vs, int64_t n, int64_t Dv, const float* w, int64_t ld_w,
                float* out) {
  for (int64_t d0 = 0; d0 < Dv; d0 += 64) {
    if (d0 + 64 <= Dv)
      wsum_block<L, GB, true>(v, vs, n, Dv, d0, w, ld_w, out);
    else
      wsum_block<L, GB, false>(v, vs, n, Dv, d0, w, ld_w, out);
  }
}

// Value rows per pass of wsum: the outputs are reloaded every few rows so that the passes over
// the 64-column blocks stay within a few KiB of V and the rows are read nearly in order.
constexpr int64_t kWsumTile = 8;

template <class L>
void wsum(const void* vp, int64_t vs, int64_t n, int64_t Dv, const float* w, int64_t ld_w, int64_t G,
          float* out) {
  const auto* v = static_cast<const typename L::T*>(vp);
  for (int64_t j0 = 0; j0 < n; j0 += kWsumTile) {
    const int64_t nj = std::min(kWsumTile, n - j0);
    for (int64_t g0 = 0; g0 < G; g0 += 4) {
      const typename L::T* vt = v + j0 * vs;
      const float* wt = w + g0 * ld_w + j0;
      float* ot = out + g0 * Dv;
      switch (std::min<int64_t>(4, G - g0)) {
        case 1: wsum_group<L, 1>(vt, vs, nj, Dv, wt, ld_w, ot); break;
        case 2: wsum_group<L, 2>(vt, vs, nj, Dv, wt, ld_w, ot); break;
        case 3: wsum_group<L, 3>(vt, vs, nj, Dv, wt, ld_w, ot); break;
        default: wsum_group<L, 4>(vt, vs, nj, Dv, wt, ld_w, ot); break;
      }
    }
  }
}

[[noreturn]] void bad_type(DType dt) {
  throw std::invalid_argument("decode attention: K/V must be f32, f16 or bf16, not " + std::string(dtype_name(dt)));
}

}  // namespace

void decode_scores_avx512(const void* k, DType dt, int64_t k_stride, int64_t n, int64_t D, const float* const* q,
                          int64_t G, float* s, int64_t ld_s) {
  switch (dt) {
    case DType::F32: return scores<LoadF32>(k, k_stride, n, D, q, G, s, ld_s);
    case DType::F16: return scores<LoadF16>(k, k_stride, n, D, q, G, s, ld_s);
    case DType::BF16: return scores<LoadBF16>(k, k_stride, n, D, q, G, s, ld_s);
    default: bad_type(dt);
  }
}

void decode_wsum_avx512(const void* v, DType dt, int64_t v_stride, int64_t n, int64_t Dv, const float* w,
                        int64_t ld_w, int64_t G, float* out) {
  switch (dt) {
    case DType::F32: return wsum<LoadF32>(v, v_stride, n, Dv, w, ld_w, G, out);
    case DType::F16: return wsum<LoadF16>(v, v_stride, n, Dv, w, ld_w, G, out);
    case DType::BF16: return wsum<LoadBF16>(v, v_stride, n, Dv, w, ld_w, G, out);
    default: bad_type(dt);
  }
}

}  // namespace xdna::host

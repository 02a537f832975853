// AVX-512 kernels (F/BW/VL/DQ, + BF16 for the bf16 GEMM): 14x32 f32 and bf16 microkernels and
// 16-wide dots with masked tails.
// GCC 12's AVX-512 headers build vectors from _mm*_undefined_*() and trip these warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "host/gemm.h"

namespace xdna::host {
namespace {

// 14 rows x 32 columns: 28 zmm accumulators, 2 B loads and 14 broadcasts per k step.
constexpr int MR = 14, NR = 32;

template <typename Acc>
inline void store_tile(Acc& acc, float* c, int64_t ldc, int64_t mr, int64_t nr, bool accumulate) {
  if (mr == MR && nr == NR) {
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
      __m512 c0 = acc[i][0], c1 = acc[i][1];
      if (accumulate) {
        c0 = _mm512_add_ps(c0, _mm512_loadu_ps(ci));
        c1 = _mm512_add_ps(c1, _mm512_loadu_ps(ci + 16));
      }
      _mm512_storeu_ps(ci, c0);
      _mm512_storeu_ps(ci + 16, c1);
    }
    return;
  }
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
  for (int i = 0; i < mr; ++i) {
    float* ci = c + i * ldc;
    __m512 c0 = acc[i][0], c1 = acc[i][1];
    if (accumulate) {
      c0 = _mm512_add_ps(c0, _mm512_maskz_loadu_ps(m0, ci));
      c1 = _mm512_add_ps(c1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, c0);
    _mm512_mask_storeu_ps(ci + 16, m1, c1);
  }
}

// The C tile is read after the k loop: start fetching its rows now (they are often in L3/DRAM).
inline void prefetch_tile(const float* c, int64_t ldc, int64_t mr) {
  for (int64_t i = 0; i < mr; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
}

void sgemm_14x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                 int64_t nr, bool accumulate) {
  __m512 acc[MR][2];
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  prefetch_tile(c, ldc, mr);
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * NR), _MM_HINT_T0);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += MR;
    b += NR;
  }
  store_tile(acc, c, ldc, mr, nr, accumulate);
}

// vdpbf16ps: each lane adds a[2p]·b[2p] + a[2p+1]·b[2p+1] (bf16 products, f32 accumulation).
void bf16gemm_14x32(int64_t kpairs, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                    int64_t mr, int64_t nr, bool accumulate) {
  __m512 acc[MR][2];
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  prefetch_tile(c, ldc, mr);
  for (int64_t p = 0; p < kpairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * NR), _MM_HINT_T0);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    a += MR;
    b += NR;
  }
  store_tile(acc, c, ldc, mr, nr, accumulate);
}

// GEMV streams weights once: software prefetch this far ahead (it runs on into the next row,
// which is the next in memory) keeps enough misses in flight for one core to reach DRAM speed.
constexpr int kPrefetchBytes = 4096;

template <typename T>
inline void prefetch(const T* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

// Horizontal sum (GCC 12's _mm512_reduce_add_ps trips -Wuninitialized in its own header).
inline float hsum(__m512 v) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float dot_f32(const float* w, const XRow& x) {
  const float* xv = x.x;
  const int64_t n = x.k;
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    prefetch(w + k);
    prefetch(w + k + 32);
    prefetch(w + k + 48);
    prefetch(w + k + 16);
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(xv + k), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16), _mm512_loadu_ps(xv + k + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 32), _mm512_loadu_ps(xv + k + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 48), _mm512_loadu_ps(xv + k + 48), s3);
  }
  for (; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? 0xffff : tail_mask(n - k);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + k), _mm512_maskz_loadu_ps(m, xv + k), s0);
  }
  return hsum(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

inline __m512 load_f16(__mmask16 m, const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
inline __m512 load_bf16(__mmask16 m, const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

template <__m512 (*Load)(__mmask16, const uint16_t*)>
float dot_16bit(const uint16_t* w, const XRow& x) {
  const float* xv = x.x;
  const int64_t n = x.k;
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    prefetch(w + k);
    prefetch(w + k + 32);
    s0 = _mm512_fmadd_ps(Load(0xffff, w + k), _mm512_loadu_ps(xv + k), s0);
    s1 = _mm512_fmadd_ps(Load(0xffff, w + k + 16), _mm512_loadu_ps(xv + k + 16), s1);
    s2 = _mm512_fmadd_ps(Load(0xffff, w + k + 32), _mm512_loadu_ps(xv + k + 32), s2);
    s3 = _mm512_fmadd_ps(Load(0xffff, w + k + 48), _mm512_loadu_ps(xv + k + 48), s3);
  }
  for (; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? 0xffff : tail_mask(n - k);
    s0 = _mm512_fmadd_ps(Load(m, w + k), _mm512_maskz_loadu_ps(m, xv + k), s0);
  }
  return hsum(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

inline __m512 load_i8(__mmask16 m, const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

float dot_i8(const int8_t* w, const float* scales, int64_t group, const XRow& x) {
  const float* xv = x.x;
  __m512 total = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    const int64_t g1 = g0 + group;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t k = g0;
    for (; k + 32 <= g1; k += 32) {
      prefetch(w + k);
      s0 = _mm512_fmadd_ps(load_i8(0xffff, w + k), _mm512_loadu_ps(xv + k), s0);
      s1 = _mm512_fmadd_ps(load_i8(0xffff, w + k + 16), _mm512_loadu_ps(xv + k + 16), s1);
    }
    for (; k < g1; k += 16) {
      const __mmask16 m = g1 - k >= 16 ? 0xffff : tail_mask(g1 - k);
      s0 = _mm512_fmadd_ps(load_i8(m, w + k), _mm512_maskz_loadu_ps(m, xv + k), s0);
    }
    total = _mm512_fmadd_ps(_mm512_add_ps(s0, s1), _mm512_set1_ps(scales[g0 / group]), total);
  }
  return hsum(total);
}

// 32 int4 values (16 bytes, fewer under mask m) -> even and odd values as f32 vectors.
inline void load_i4(__mmask16 m, const uint8_t* p, __m512& even, __m512& odd) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
  const __m512i eight = _mm512_set1_epi32(8), mask = _mm512_set1_epi32(0xf);
  even = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_xor_si512(_mm512_and_si512(v, mask), eight), eight));
  odd = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_xor_si512(_mm512_srli_epi32(v, 4), eight), eight));
}

float dot_i4(const uint8_t* w, const float* scales, int64_t group, const XRow& x) {
  __m512 total = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    const int64_t p1 = (g0 + group) / 2;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (int64_t p = g0 / 2; p < p1; p += 16) {
      const __mmask16 m = p1 - p >= 16 ? 0xffff : tail_mask(p1 - p);
      __m512 we, wo;
      load_i4(m, w + p, we, wo);
      s0 = _mm512_fmadd_ps(we, _mm512_maskz_loadu_ps(m, x.even + p), s0);
      s1 = _mm512_fmadd_ps(wo, _mm512_maskz_loadu_ps(m, x.odd + p), s1);
    }
    total = _mm512_fmadd_ps(_mm512_add_ps(s0, s1), _mm512_set1_ps(scales[g0 / group]), total);
  }
  return hsum(total);
}

// 128 int4 weights (64 bytes) per step. Nibbles XOR 8 are the weights + 8 as unsigned bytes,
// so vpdpbusd(nibbles, q) = Σ(w + 8)·q and q_corr8 removes the 8·Σq. Low nibbles (even k) meet
// q_even and high nibbles q_odd in the same lane: lane j covers k in [8j, 8j + 8).
float dot_i4_q8(const uint8_t* w, const float* scales, int64_t group, const XRow& x) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8(static_cast<char>(0x88));
  __m512 total = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = g0; c < g0 + group; c += 128) {
      prefetch(w + c / 2);
      const __m512i v = _mm512_xor_si512(_mm512_loadu_si512(w + c / 2), flip);
      const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x.q_even + c / 2));
      s = _mm512_dpbusd_epi32(s, hi, _mm512_loadu_si512(x.q_odd + c / 2));
      s = _mm512_sub_epi32(s, _mm512_loadu_si512(x.q_corr8 + c / 8));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_loadu_ps(x.q_scale8 + c / 8), acc);
    }
    total = _mm512_fmadd_ps(acc, _mm512_set1_ps(scales[g0 / group]), total);
  }
  return hsum(total);
}

// 64 int8 weights per step: vpdpbusd(q + 128, w) = Σq·w + 128·Σw, and a second vpdpbusd with
// all-ones bytes gives the Σw to remove. Lane j covers k in [4j, 4j + 4).
float dot_i8_q8(const int8_t* w, const float* scales, int64_t group, const XRow& x) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512 total = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = g0; c < g0 + group; c += 64) {
      prefetch(w + c);
      const __m512i wv = _mm512_loadu_si512(w + c);
      const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(x.q_u8 + c), wv);
      const __m512i sw = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, wv);
      const __m512i d = _mm512_sub_epi32(s, _mm512_slli_epi32(sw, 7));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_loadu_ps(x.q_scale4 + c / 4), acc);
    }
    total = _mm512_fmadd_ps(acc, _mm512_set1_ps(scales[g0 / group]), total);
  }
  return hsum(total);
}

// Two 9-byte blocks per 16 lanes: mantissas sign-extended, each half scaled by its block's 2^(E-133).
float dot_bfp16(const uint8_t* w, const XRow& x) {
  const float* scale = bfp16_scale_table();
  const int64_t blocks = x.k / 8;
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  int64_t b = 0;
  auto pair = [&](const uint8_t* p, const float* xp, __m512 acc) {
    const __m128i m = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 1)),
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 10)));
    const __m512 sc = _mm512_mask_broadcastss_ps(_mm512_set1_ps(scale[p[0]]), 0xff00, _mm_set_ss(scale[p[9]]));
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(m)), sc), _mm512_loadu_ps(xp), acc);
  };
  for (; b + 4 <= blocks; b += 4) {
    prefetch(w + b * 9);
    s0 = pair(w + b * 9, x.x + b * 8, s0);
    s1 = pair(w + b * 9 + 18, x.x + b * 8 + 16, s1);
  }
  for (; b + 2 <= blocks; b += 2) s0 = pair(w + b * 9, x.x + b * 8, s0);
  float s = hsum(_mm512_add_ps(s0, s1));
  for (; b < blocks; ++b) {
    const uint8_t* p = w + b * 9;
    float bs = 0;
    for (int i = 0; i < 8; ++i) bs += static_cast<float>(static_cast<int8_t>(p[1 + i])) * x.x[b * 8 + i];
    s += bs * scale[p[0]];
  }
  return s;
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, load_f16(m, src + i));
  }
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, load_bf16(m, src + i));
  }
}

// vcvtneps2bf16 rounds to nearest even like float_to_bf16_rne (it also flushes f32 denormals
// to zero, which a bf16 product could not resolve anyway).
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
    const __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, v);
  }
}

}  // namespace

const IsaKernels& avx512_kernels() {
  static const IsaKernels k = {"avx512",
                               MR,
                               NR,
                               sgemm_14x32,
                               MR,
                               NR,
                               bf16gemm_14x32,
                               dot_f32,
                               dot_16bit<load_f16>,
                               dot_16bit<load_bf16>,
                               dot_i8,
                               dot_i4,
                               dot_bfp16,
                               dot_i4_q8,
                               dot_i8_q8,
                               f16_to_f32,
                               bf16_to_f32,
                               pack_panel_avx2,
                               f32_to_bf16};
  return k;
}

}  // namespace xdna::host

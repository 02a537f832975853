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

// Stores an R x 32 accumulator tile into C (nr columns of it), adding C's old values when
// accumulating. R is the tile's real row count, so no accumulator past it is read.
template <int R>
inline void store_tile(__m512 (&acc)[R][2], float* c, int64_t ldc, int64_t nr, bool accumulate) {
  if (nr == NR) {
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
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
  for (int i = 0; i < R; ++i) {
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

// R rows (R <= MR) of the A panel (packed MR wide) times a 32-column B panel.
template <int R>
void sgemm_rows(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t nr,
                bool accumulate) {
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  prefetch_tile(c, ldc, R);
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * NR), _MM_HINT_T0);
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += MR;
    b += NR;
  }
  store_tile<R>(acc, c, ldc, nr, accumulate);
}

// vdpbf16ps: each lane adds a[2p]·b[2p] + a[2p+1]·b[2p+1] (bf16 products, f32 accumulation).
template <int R>
void bf16gemm_rows(int64_t kpairs, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                   int64_t nr, bool accumulate) {
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  prefetch_tile(c, ldc, R);
  for (int64_t p = 0; p < kpairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * NR), _MM_HINT_T0);
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    a += MR;
    b += NR;
  }
  store_tile<R>(acc, c, ldc, nr, accumulate);
}

// A partial tile (mr < MR rows: the last rows of x) runs a kernel for exactly mr rows, so its
// cost is proportional to mr: at M = 16 the 14 + 2 split otherwise computes 28 rows for 16.
constexpr void (*kSgemmRows[MR + 1])(int64_t, const float*, const float*, float*, int64_t, int64_t, bool) = {
    nullptr,         sgemm_rows<1>,  sgemm_rows<2>,  sgemm_rows<3>,  sgemm_rows<4>,
    sgemm_rows<5>,   sgemm_rows<6>,  sgemm_rows<7>,  sgemm_rows<8>,  sgemm_rows<9>,
    sgemm_rows<10>,  sgemm_rows<11>, sgemm_rows<12>, sgemm_rows<13>, sgemm_rows<14>};
constexpr void (*kBf16Rows[MR + 1])(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, int64_t, bool) = {
    nullptr,           bf16gemm_rows<1>,  bf16gemm_rows<2>,  bf16gemm_rows<3>,  bf16gemm_rows<4>,
    bf16gemm_rows<5>,  bf16gemm_rows<6>,  bf16gemm_rows<7>,  bf16gemm_rows<8>,  bf16gemm_rows<9>,
    bf16gemm_rows<10>, bf16gemm_rows<11>, bf16gemm_rows<12>, bf16gemm_rows<13>, bf16gemm_rows<14>};

void sgemm_14x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                 int64_t nr, bool accumulate) {
  if (mr == MR) return sgemm_rows<MR>(kc, a, b, c, ldc, nr, accumulate);
  if (mr > 0) kSgemmRows[mr](kc, a, b, c, ldc, nr, accumulate);
}

void bf16gemm_14x32(int64_t kpairs, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                    int64_t mr, int64_t nr, bool accumulate) {
  if (mr == MR) return bf16gemm_rows<MR>(kpairs, a, b, c, ldc, nr, accumulate);
  if (mr > 0) kBf16Rows[mr](kpairs, a, b, c, ldc, nr, accumulate);
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

// 128 bf16 weights per step over four accumulators; x was rounded to bf16 once per call, so
// each vdpbf16ps does 32 products with no widening. Tails load zeros under a mask.
float dot_bf16_bf16(const uint16_t* w, const XRow& x) {
  const uint16_t* xb = x.x_bf16;
  const int64_t n = x.k;
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  auto bh = [](__m512i v) { return (__m512bh)v; };
  int64_t k = 0;
  for (; k + 128 <= n; k += 128) {
    prefetch(w + k);
    prefetch(w + k + 32);
    prefetch(w + k + 64);
    prefetch(w + k + 96);
    s0 = _mm512_dpbf16_ps(s0, bh(_mm512_loadu_si512(w + k)), bh(_mm512_loadu_si512(xb + k)));
    s1 = _mm512_dpbf16_ps(s1, bh(_mm512_loadu_si512(w + k + 32)), bh(_mm512_loadu_si512(xb + k + 32)));
    s2 = _mm512_dpbf16_ps(s2, bh(_mm512_loadu_si512(w + k + 64)), bh(_mm512_loadu_si512(xb + k + 64)));
    s3 = _mm512_dpbf16_ps(s3, bh(_mm512_loadu_si512(w + k + 96)), bh(_mm512_loadu_si512(xb + k + 96)));
  }
  for (; k < n; k += 32) {
    const __mmask32 m = n - k >= 32 ? 0xffffffffu : static_cast<__mmask32>((1ull << (n - k)) - 1);
    s0 = _mm512_dpbf16_ps(s0, bh(_mm512_maskz_loadu_epi16(m, w + k)), bh(_mm512_maskz_loadu_epi16(m, xb + k)));
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

// bfp16 with x quantized to int8 (q_u8 = q + 128), 8 blocks (72 bytes, 64 values) per step.
// vpermt2b gathers the 64 mantissas out of two overlapping loads (bytes 0-63 and 8-71) and the 8
// exponent bytes into the low byte of the two dword lanes of their block. Then, as for int8,
// vpdpbusd(q + 128, m) - 128·Σm, times the x scale and the block scale 2^(E-133) (vscalefps).
// Needs AVX512-VBMI; the table only offers it where CPUID reports it.
struct Bfp16Perm {
  alignas(64) uint8_t mant[64], expo[64];
  Bfp16Perm() {
    for (int o = 0; o < 64; ++o) {
      const int src = 9 * (o / 8) + 1 + o % 8;
      mant[o] = static_cast<uint8_t>(src < 64 ? src : 64 + src - 8);
      expo[o] = static_cast<uint8_t>(9 * (o / 8));  // only byte 0 of each dword is kept
    }
  }
};

#define XDNA_VBMI __attribute__((target("avx512vbmi")))

XDNA_VBMI inline __m512 bfp16_step(const uint8_t* p, int64_t c, const XRow& x, __m512i mant_idx, __m512i expo_idx,
                                   __m512 acc) {
  const __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + 8);
  const __m512i m = _mm512_permutex2var_epi8(a, mant_idx, b);
  const __m512i e = _mm512_maskz_permutex2var_epi8(0x1111111111111111ull, a, expo_idx, b);
  const __m512 scale = _mm512_scalef_ps(_mm512_set1_ps(1.f), _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(133))));
  const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(x.q_u8 + c), m);
  const __m512i sm = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), m);
  const __m512i d = _mm512_sub_epi32(s, _mm512_slli_epi32(sm, 7));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(scale, _mm512_loadu_ps(x.q_scale4 + c / 4)), acc);
}

XDNA_VBMI float dot_bfp16_q8(const uint8_t* w, const XRow& x) {
  static const Bfp16Perm perm;
  const __m512i mant_idx = _mm512_load_si512(perm.mant), expo_idx = _mm512_load_si512(perm.expo);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t c = 0;
  for (; c + 128 <= x.k; c += 128) {
    const uint8_t* p = w + c / 8 * 9;
    prefetch(p);
    prefetch(p + 64);
    prefetch(p + 128);
    acc0 = bfp16_step(p, c, x, mant_idx, expo_idx, acc0);
    acc1 = bfp16_step(p + 72, c + 64, x, mant_idx, expo_idx, acc1);
  }
  if (c < x.k) acc0 = bfp16_step(w + c / 8 * 9, c, x, mant_idx, expo_idx, acc0);
  return hsum(_mm512_add_ps(acc0, acc1));
}

// ---- GGML formats with x quantized to int8 per 32 (q_s8, scale per 4 values in q_scale4) ----
// Each dot computes Σ w·x̂ exactly as the reference decoder defines w (f32 rounding aside): the
// integer products go through vpdpbusd, the offsets (Q4_0 -8, Q6_K -32) and K-quant mins through
// the per-16 sums of x̂ (q_xsum16).

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 lanes: the first 8 take a, the last 8 take b.
inline __m512 halves(float a, float b) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(a), 0xff00, _mm_set_ss(b));
}

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Q8_0 (34-byte blocks: f16 d, int8 q[32]): the row kernel (gemm_ggml_avx512.cpp) on one row, so
// the one-row dot and the GEMV share one loop and agree bit for bit.
float dot_q8_0(const uint8_t* w, const XRow& x) {
  const WeightRows one{DType::Q8_0, w, x.k / 32 * 34, 1, x.k};
  float out;
  rows_q8_0_avx512(one, 0, 1, x, &out);
  return out;
}

// Q5_0 (22-byte blocks): the row kernel on one row, bit-identical to dot_q8_0 on its q8_0 form.
float dot_q5_0(const uint8_t* w, const XRow& x) {
  const WeightRows one{DType::Q5_0, w, x.k / 32 * 22, 1, x.k};
  float out;
  rows_q5_0_avx512(one, 0, 1, x, &out);
  return out;
}

// Q4_0 (18-byte blocks: f16 d, 16 bytes holding values i (low nibble) and i + 16 (high)): the
// nibbles are unsigned, so vpdpbusd(nibbles, x) and the -8 comes off as 8·d·Σx̂.
float dot_q4_0(const uint8_t* w, const XRow& x) {
  const int64_t blocks = x.k / 32;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  float corr = 0;
  auto block = [&](int64_t b, __m256 acc) {
    const uint8_t* p = w + b * 18;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_s8 + b * 32));
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nib, xv);
    const float d = f16_at(p);
    corr += d * (x.q_xsum16[2 * b] + x.q_xsum16[2 * b + 1]);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * x.q_scale4[b * 8]), acc);
  };
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    prefetch(w + b * 18);
    prefetch(w + b * 18 + 64);
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
    acc0 = block(b + 2, acc0);
    acc1 = block(b + 3, acc1);
  }
  for (; b < blocks; ++b) acc0 = block(b, acc0);
  return hsum256(_mm256_add_ps(acc0, acc1)) - 8 * corr;
}

// The 6-bit scales and mins of a Q4_K / Q5_K super-block (layout: ggml::k_scale_min) as bytes:
// out[0..8) scales, out[8..16) mins. Bytes 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 (low 6 bits);
// scales/mins 4-7 are the low/high nibble of bytes 8-11 plus the top 2 bits of bytes 0-3 / 4-7.
inline __m128i k_scales(const uint8_t* s) {
  uint32_t a, b, c;
  __builtin_memcpy(&a, s, 4);
  __builtin_memcpy(&b, s + 4, 4);
  __builtin_memcpy(&c, s + 8, 4);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  const uint32_t sc_lo = a & low6, mn_lo = b & low6;
  const uint32_t sc_hi = (c & low4) | (((a >> 6) & top2) << 4);
  const uint32_t mn_hi = ((c >> 4) & low4) | (((b >> 6) & top2) << 4);
  return _mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo), static_cast<int>(sc_hi), static_cast<int>(sc_lo));
}

// Q4_K / Q5_K super-blocks of 256: per pair of 32-value sub-blocks, one 512-bit vpdpbusd of the
// unsigned quants (low nibbles: first sub-block, high nibbles: second; Q5_K adds bit s of qh)
// against 64 values of x, scaled by d·scale per sub-block; the mins come off as dmin·min·Σx̂.
template <bool kFive>
float dot_k4(const uint8_t* w, const XRow& x) {
  constexpr int64_t kBytes = kFive ? 176 : 144, kQ = kFive ? 48 : 16;
  const int64_t supers = x.k / 256;
  const __m256i low4 = _mm256_set1_epi8(0x0f), bit = _mm256_set1_epi8(1);
  const __m512i pairs = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  // x̂ sums per 32 (low 8 lanes): adjacent per-16 sums added pairwise.
  const __m512i even = _mm512_set_epi32(14, 12, 10, 8, 6, 4, 2, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  __m512 acc = _mm512_setzero_ps();
  __m256 corr = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < supers; ++sb) {
    const uint8_t* p = w + sb * kBytes;
    prefetch(p);
    prefetch(p + 64);
    prefetch(p + 128);
    const __m512 sm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k_scales(p + 4)));  // 8 scales, 8 mins
    const __m512 dd = halves(f16_at(p), f16_at(p + 2));
    const __m512 scm = _mm512_mul_ps(sm, dd);  // d·scale, dmin·min
    const __m512 xs16 = _mm512_loadu_ps(x.q_xsum16 + sb * 16);
    const __m512 xs32 = _mm512_add_ps(_mm512_permutexvar_ps(even, xs16), _mm512_permutexvar_ps(odd, xs16));
    corr = _mm256_fmadd_ps(_mm512_extractf32x8_ps(scm, 1), _mm512_castps512_ps256(xs32), corr);
    const __m256i qh = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)) : _mm256_setzero_si256();
    for (int pr = 0; pr < 4; ++pr) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQ + 32 * pr));
      __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if (kFive) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * pr), bit), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * pr + 1), bit), 4));
      }
      const int64_t c = sb * 256 + 64 * pr;
      const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), join(lo, hi), _mm512_loadu_si512(x.q_s8 + c));
      const __m512 wscale = _mm512_permutexvar_ps(_mm512_add_epi32(pairs, _mm512_set1_epi32(2 * pr)), scm);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wscale, _mm512_loadu_ps(x.q_scale4 + c / 4)), acc);
    }
  }
  return hsum(acc) - hsum256(corr);
}

// Q6_K super-blocks (ql[128], qh[64], int8 scales[16], f16 d): per half of 128 values, the low
// nibbles of ql[0..64) are values 0-63 and the high nibbles values 64-127, with the top 2 bits
// from qh[i] bits 2k..2k+1 (k = value / 32). Quants are unsigned (stored + 32); the -32 comes off
// as 32·d·scale·Σx̂ per 16 values. Lane j of a 64-value vpdpbusd covers 4 values, so scale s
// (16 values) spans 4 lanes: vpermps spreads the 16 scales.
float dot_q6_k(const uint8_t* w, const XRow& x) {
  const int64_t supers = x.k / 256;
  const __m512i low4 = _mm512_set1_epi8(0x0f), two = _mm512_set1_epi8(3);
  const __m512i shift01 = join(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
  const __m512i shift23 = join(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
  const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  __m512 acc = _mm512_setzero_ps(), corr = acc;
  for (int64_t sb = 0; sb < supers; ++sb) {
    const uint8_t* p = w + sb * 210;
    prefetch(p);
    prefetch(p + 64);
    prefetch(p + 128);
    prefetch(p + 192);
    const __m512 scf = _mm512_mul_ps(_mm512_set1_ps(f16_at(p + 208)),
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)))));
    corr = _mm512_fmadd_ps(scf, _mm512_loadu_ps(x.q_xsum16 + sb * 16), corr);
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(p + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(l, low4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift01), two), 4));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift23), two), 4));
      const int64_t c = sb * 256 + 128 * h;
      const __m512i s01 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q01, _mm512_loadu_si512(x.q_s8 + c));
      const __m512i s23 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q23, _mm512_loadu_si512(x.q_s8 + c + 64));
      const __m512i i01 = _mm512_add_epi32(spread, _mm512_set1_epi32(8 * h));
      const __m512i i23 = _mm512_add_epi32(i01, _mm512_set1_epi32(4));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s01),
                            _mm512_mul_ps(_mm512_permutexvar_ps(i01, scf), _mm512_loadu_ps(x.q_scale4 + c / 4)), acc);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s23),
                            _mm512_mul_ps(_mm512_permutexvar_ps(i23, scf), _mm512_loadu_ps(x.q_scale4 + c / 4 + 16)), acc);
    }
  }
  return hsum(acc) - 32 * hsum(corr);
}

// ---- GEMV row kernels (RowsKernel): `count` consecutive rows, each streamed start to end ----
// Measured on Zen 4: one contiguous stream per core, prefetched ahead, reads DRAM faster than
// several rows interleaved at 64-byte steps (that halved the int8 and bfp16 rates). So the rows
// run one after another, and the work per weight byte is cut instead: at two cores' DRAM rate a
// core has only ~10 cycles per 64 weight bytes. Several accumulators keep FMA latency off the
// critical path.

// int8 row · signed int8 x (q_s8): w XOR 0x80 is w + 128 as an unsigned byte, so
// vpdpbusd(w ^ 0x80, q) = Σw·q + 128·Σq. The 128·Σq term depends on x alone: it comes off once per
// group as 128·scale·Σx̂ (q_xsum_group), not per step. 64 values per step, two accumulators.
float i8_row(const int8_t* w, const float* sc, int64_t group, const XRow& x) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 total = _mm512_setzero_ps();
  float corr = 0;
  for (int64_t g0 = 0, g = 0; g0 < x.k; g0 += group, ++g) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    auto step = [&](int64_t c, __m512 acc) {
      prefetch(w + c);
      const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(w + c), flip);
      const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(x.q_s8 + c));
      return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_loadu_ps(x.q_scale4 + c / 4), acc);
    };
    int64_t c = g0;
    for (; c + 128 <= g0 + group; c += 128) {
      acc0 = step(c, acc0);
      acc1 = step(c + 64, acc1);
    }
    if (c < g0 + group) acc0 = step(c, acc0);
    total = _mm512_fmadd_ps(_mm512_add_ps(acc0, acc1), _mm512_set1_ps(sc[g]), total);
    corr += sc[g] * x.q_xsum_group[g];
  }
  return hsum(total) - 128 * corr;
}

// int4 row · int8 x deinterleaved (q_even, q_odd): (nibble & 0xf) ^ 8 = w + 8 (one vpternlogd),
// low nibbles (even k) meet q_even and high nibbles q_odd in the same lane (k in [8j, 8j + 8)).
// The 8·Σq offset comes off per group as 8·scale·Σx̂. 128 values (64 bytes) per step; the group
// scale goes into the step's lane scales, so groups of one step need no second FMA chain.
float i4_row(const uint8_t* w, const float* sc, int64_t group, const XRow& x) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  auto step = [&](int64_t c, __m512 a) {
    prefetch(w + c / 2);
    const __m512i v = _mm512_loadu_si512(w + c / 2);
    // vpternlogd 0x6a: (A & B) ^ C.
    const __m512i lo = _mm512_ternarylogic_epi32(v, low4, eight, 0x6a);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), low4, eight, 0x6a);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x.q_even + c / 2)),
                                          hi, _mm512_loadu_si512(x.q_odd + c / 2));
    const __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(x.q_scale8 + c / 8), _mm512_set1_ps(sc[c / group]));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, a);
  };
  int64_t c = 0;
  for (; c + 512 <= x.k; c += 512) {
    acc[0] = step(c, acc[0]);
    acc[1] = step(c + 128, acc[1]);
    acc[2] = step(c + 256, acc[2]);
    acc[3] = step(c + 384, acc[3]);
  }
  for (; c < x.k; c += 128) acc[0] = step(c, acc[0]);
  float corr = 0;
  for (int64_t g = 0; g < x.k / group; ++g) corr += sc[g] * x.q_xsum_group[g];
  return hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]))) - 8 * corr;
}

// bfp16 row · signed int8 x (VBMI): 8 blocks (72 bytes, 64 values) per step, gathered as in
// dot_bfp16_q8. Mantissas XOR 0x80 are m + 128 unsigned; the 128·Σq per lane (q_off4) comes off in
// int32, and the lane scale is x scale · 2^(E-133) from one vscalefps. Two accumulators.
XDNA_VBMI float bfp16_row(const uint8_t* w, const XRow& x) {
  static const Bfp16Perm perm;
  const __m512i mant_idx = _mm512_load_si512(perm.mant), expo_idx = _mm512_load_si512(perm.expo);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), bias = _mm512_set1_epi32(133);
  auto step = [&](int64_t c, __m512 acc) XDNA_VBMI {
    const uint8_t* b = w + c / 8 * 9;
    prefetch(b);
    prefetch(b + 64);
    const __m512i lo = _mm512_loadu_si512(b), hi = _mm512_loadu_si512(b + 8);
    const __m512i m = _mm512_xor_si512(_mm512_permutex2var_epi8(lo, mant_idx, hi), flip);
    const __m512i e = _mm512_maskz_permutex2var_epi8(0x1111111111111111ull, lo, expo_idx, hi);
    const __m512 scale = _mm512_scalef_ps(_mm512_loadu_ps(x.q_scale4 + c / 4), _mm512_cvtepi32_ps(_mm512_sub_epi32(e, bias)));
    const __m512i d = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), m, _mm512_loadu_si512(x.q_s8 + c)),
                                       _mm512_loadu_si512(x.q_off4 + c / 4));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), scale, acc);
  };
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t c = 0;
  for (; c + 128 <= x.k; c += 128) {
    acc0 = step(c, acc0);
    acc1 = step(c + 64, acc1);
  }
  if (c < x.k) acc0 = step(c, acc0);
  return hsum(_mm512_add_ps(acc0, acc1));
}

// x -> int8 per block of 32, bit-identical to matmul.cpp's scalar quantize_x_s8 (same f32 max,
// scale and product; vcvtps2dq rounds to nearest even as nearbyint does): signed q, the scale per
// 4 values and s·Σq per 16. At K = 4096 this is ~10x faster than the scalar loop, which cost
// ~10 µs per GEMV call (serial, before the threads start).
inline float hmax(__m512 v) {
  __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int32_t hsum_i32(__m512i v) {
  __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

void quantize_x_s8(const float* x, int64_t K, int8_t* q, float* scale4, float* xsum16) {
  for (int64_t b = 0; b < K; b += 32) {
    const __m512 a0 = _mm512_loadu_ps(x + b), a1 = _mm512_loadu_ps(x + b + 16);
    const float amax = hmax(_mm512_max_ps(_mm512_abs_ps(a0), _mm512_abs_ps(a1)));
    const float s = amax / 127, inv = amax > 0 ? 127 / amax : 0;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i v0 = _mm512_cvtps_epi32(_mm512_mul_ps(a0, vinv)), v1 = _mm512_cvtps_epi32(_mm512_mul_ps(a1, vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b), _mm512_cvtepi32_epi8(v0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b + 16), _mm512_cvtepi32_epi8(v1));
    xsum16[b / 16] = s * static_cast<float>(hsum_i32(v0));
    xsum16[b / 16 + 1] = s * static_cast<float>(hsum_i32(v1));
    _mm256_storeu_ps(scale4 + b / 4, _mm256_set1_ps(s));
  }
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// x -> int8 per block of 32 for the int4 dots, bit-identical to matmul.cpp's quantize_x_q8:
// deinterleaved into [even k | odd k], with 8·Σq and the scale per 8 values.
void quantize_x_q8(const float* x, int64_t K, int8_t* q, int32_t* corr8, float* scale8) {
  int8_t* even = q;
  int8_t* odd = q + K / 2;
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t b = 0; b < K; b += 32) {
    const __m512 a0 = _mm512_loadu_ps(x + b), a1 = _mm512_loadu_ps(x + b + 16);
    const float amax = hmax(_mm512_max_ps(_mm512_abs_ps(a0), _mm512_abs_ps(a1)));
    const float s = amax / 127, inv = amax > 0 ? 127 / amax : 0;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i v0 = _mm512_cvtps_epi32(_mm512_mul_ps(a0, vinv)), v1 = _mm512_cvtps_epi32(_mm512_mul_ps(a1, vinv));
    const __m128i p0 = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(v0), split);
    const __m128i p1 = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(v1), split);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(even + b / 2), _mm_unpacklo_epi64(p0, p1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(odd + b / 2), _mm_unpackhi_epi64(p0, p1));
    corr8[b / 8] = 8 * hsum_i32(_mm512_castsi512_si256(v0));
    corr8[b / 8 + 1] = 8 * hsum_i32(_mm512_extracti64x4_epi64(v0, 1));
    corr8[b / 8 + 2] = 8 * hsum_i32(_mm512_castsi512_si256(v1));
    corr8[b / 8 + 3] = 8 * hsum_i32(_mm512_extracti64x4_epi64(v1, 1));
    _mm_storeu_ps(scale8 + b / 8, _mm_set1_ps(s));
  }
}

void rows_bf16(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  for (int r = 0; r < count; ++r) out[r] = dot_bf16_bf16(reinterpret_cast<const uint16_t*>(w.row(n + r)), x);
}
void rows_i8(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  for (int r = 0; r < count; ++r) out[r] = i8_row(reinterpret_cast<const int8_t*>(w.row(n + r)), w.row_scales(n + r), w.group, x);
}
void rows_i4(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  for (int r = 0; r < count; ++r) out[r] = i4_row(w.row(n + r), w.row_scales(n + r), w.group, x);
}
XDNA_VBMI void rows_bfp16(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  for (int r = 0; r < count; ++r) out[r] = bfp16_row(w.row(n + r), x);
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
                               f32_to_bf16,
                               __builtin_cpu_supports("avx512vbmi") ? dot_bfp16_q8 : nullptr,
                               dot_q8_0,
                               dot_q4_0,
                               dot_q5_0,
                               dot_k4<false>,
                               dot_k4<true>,
                               dot_q6_k,
                               dot_bf16_bf16,
                               rows_bf16,
                               rows_i8,
                               rows_i4,
                               __builtin_cpu_supports("avx512vbmi") ? rows_bfp16 : nullptr,
                               quantize_x_s8,
                               quantize_x_q8,
                               rows_q4_0_avx512,
                               rows_q6_k_avx512,
                               rows_q8_0_avx512,
                               rows_q5_0_avx512};
  return k;
}

}  // namespace xdna::host

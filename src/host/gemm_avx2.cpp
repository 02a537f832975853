// AVX2 + FMA + F16C kernels: the baseline x86-64 path (6x16 f32 microkernel, 8-wide dots).
#include <immintrin.h>

#include <algorithm>

#include "host/gemm.h"

namespace xdna::host {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// GEMV streams weights once: prefetch ahead into the next rows (see gemm_avx512.cpp).
constexpr int kPrefetchBytes = 4096;
template <typename T>
inline void prefetch(const T* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

// 6 rows x 16 columns: 12 ymm accumulators, 2 B loads and 6 broadcasts per k.
constexpr int MR = 6, NR = 16;

void sgemm_6x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                int64_t nr, bool accumulate) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * NR), b1 = _mm256_load_ps(b + k * NR + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + k * MR + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  if (mr == MR && nr == NR) {
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
      if (accumulate) {
        acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(ci));
        acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(ci + 8));
      }
      _mm256_storeu_ps(ci, acc[i][0]);
      _mm256_storeu_ps(ci + 8, acc[i][1]);
    }
    return;
  }
  alignas(32) float tile[MR][NR];
  for (int i = 0; i < MR; ++i) {
    _mm256_store_ps(tile[i], acc[i][0]);
    _mm256_store_ps(tile[i] + 8, acc[i][1]);
  }
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.f) + tile[i][j];
}

float dot_f32(const float* w, const XRow& x) {
  const float* xv = x.x;
  const int64_t n = x.k;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    prefetch(w + k);
    prefetch(w + k + 16);
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(xv + k), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8), _mm256_loadu_ps(xv + k + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 16), _mm256_loadu_ps(xv + k + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 24), _mm256_loadu_ps(xv + k + 24), s3);
  }
  for (; k + 8 <= n; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(xv + k), s0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; k < n; ++k) s += w[k] * xv[k];
  return s;
}

inline __m256 load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load_bf16(const uint16_t* p) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

template <__m256 (*Load)(const uint16_t*), float (*Scalar)(uint16_t)>
float dot_16bit(const uint16_t* w, const XRow& x) {
  const float* xv = x.x;
  const int64_t n = x.k;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    prefetch(w + k);
    s0 = _mm256_fmadd_ps(Load(w + k), _mm256_loadu_ps(xv + k), s0);
    s1 = _mm256_fmadd_ps(Load(w + k + 8), _mm256_loadu_ps(xv + k + 8), s1);
    s2 = _mm256_fmadd_ps(Load(w + k + 16), _mm256_loadu_ps(xv + k + 16), s2);
    s3 = _mm256_fmadd_ps(Load(w + k + 24), _mm256_loadu_ps(xv + k + 24), s3);
  }
  for (; k + 8 <= n; k += 8) s0 = _mm256_fmadd_ps(Load(w + k), _mm256_loadu_ps(xv + k), s0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; k < n; ++k) s += Scalar(w[k]) * xv[k];
  return s;
}

float dot_i8(const int8_t* w, const float* scales, int64_t group, const XRow& x) {
  const float* xv = x.x;
  __m256 total = _mm256_setzero_ps();
  float tail = 0;
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    const int64_t g1 = g0 + group;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t k = g0;
    for (; k + 16 <= g1; k += 16) {
      prefetch(w + k);
      __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + k))));
      __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + k + 8))));
      s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xv + k), s0);
      s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xv + k + 8), s1);
    }
    float gt = 0;
    for (; k < g1; ++k) gt += static_cast<float>(w[k]) * xv[k];
    const float sc = scales[g0 / group];
    total = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), _mm256_set1_ps(sc), total);
    tail += gt * sc;
  }
  return hsum(total) + tail;
}

// 16 int4 values (8 bytes) -> even and odd values as two 8-lane f32 vectors.
inline void load_i4(const uint8_t* p, __m256& even, __m256& odd) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i eight = _mm256_set1_epi32(8), mask = _mm256_set1_epi32(0xf);
  even = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_xor_si256(_mm256_and_si256(v, mask), eight), eight));
  odd = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_xor_si256(_mm256_srli_epi32(v, 4), eight), eight));
}

float dot_i4(const uint8_t* w, const float* scales, int64_t group, const XRow& x) {
  __m256 total = _mm256_setzero_ps();
  float tail = 0;
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    const int64_t p1 = (g0 + group) / 2;  // pair index range of this group
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t p = g0 / 2;
    for (; p + 8 <= p1; p += 8) {
      prefetch(w + p);
      __m256 we, wo;
      load_i4(w + p, we, wo);
      s0 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x.even + p), s0);
      s1 = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x.odd + p), s1);
    }
    float gt = 0;
    for (; p < p1; ++p) {
      gt += static_cast<float>(((w[p] & 0xf) ^ 8) - 8) * x.even[p];
      gt += static_cast<float>(((w[p] >> 4) ^ 8) - 8) * x.odd[p];
    }
    const float sc = scales[g0 / group];
    total = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), _mm256_set1_ps(sc), total);
    tail += gt * sc;
  }
  return hsum(total) + tail;
}

float dot_bfp16(const uint8_t* w, const XRow& x) {
  const float* scale = bfp16_scale_table();
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  const int64_t blocks = x.k / 8;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const uint8_t* p = w + b * 9;
    prefetch(p);
    __m256 m0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 1))));
    __m256 m1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 10))));
    s0 = _mm256_fmadd_ps(_mm256_mul_ps(m0, _mm256_set1_ps(scale[p[0]])), _mm256_loadu_ps(x.x + b * 8), s0);
    s1 = _mm256_fmadd_ps(_mm256_mul_ps(m1, _mm256_set1_ps(scale[p[9]])), _mm256_loadu_ps(x.x + b * 8 + 8), s1);
  }
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; b < blocks; ++b) {
    const uint8_t* p = w + b * 9;
    float bs = 0;
    for (int i = 0; i < 8; ++i) bs += static_cast<float>(static_cast<int8_t>(p[1 + i])) * x.x[b * 8 + i];
    s += bs * scale[p[0]];
  }
  return s;
}

// ---- GGML formats with x quantized to int8 per 32 (see gemm_avx512.cpp for the scheme) ----
// Without VNNI the u8 x s8 products go through vpmaddubsw (pairs summed to int16, saturating) and
// vpmaddwd with ones. No pair can saturate here: the unsigned side is at most 128 (|q| for Q8_0)
// or 63 (nibbles, 5- and 6-bit quants) and |x| <= 127.

inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 8 lanes: the first 4 take a, the last 4 take b.
inline __m256 halves(float a, float b) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(a)), _mm_set1_ps(b), 1);
}

float dot_q8_0(const uint8_t* w, const XRow& x) {
  const int64_t blocks = x.k / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  auto block = [&](int64_t b, __m256 acc) {
    const uint8_t* p = w + b * 34;
    const __m256i q = load256(p + 2);
    const __m256i s = dot_u8s8(_mm256_abs_epi8(q), _mm256_sign_epi8(load256(x.q_s8 + b * 32), q));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(f16_at(p) * x.q_scale4[b * 8]), acc);
  };
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    prefetch(w + b * 34);
    prefetch(w + b * 34 + 64);
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
  }
  if (b < blocks) acc0 = block(b, acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

float dot_q4_0(const uint8_t* w, const XRow& x) {
  const int64_t blocks = x.k / 32;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  float corr = 0;
  auto block = [&](int64_t b, __m256 acc) {
    const uint8_t* p = w + b * 18;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
    const __m256i s = dot_u8s8(nib, load256(x.q_s8 + b * 32));
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
  return hsum(_mm256_add_ps(acc0, acc1)) - 8 * corr;
}

// Q5_0 (22-byte blocks: f16 d; u32 qh, bit i the fifth bit of value i; 16 bytes of low nibbles):
// each block is widened to its exact q8_0 form (q - 16 as int8, same d) in registers, then dotted
// as dot_q8_0 does, so the two agree bit for bit.
inline __m256i q5_0_as_int8(const uint8_t* p) {
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f));
  uint32_t qh;
  __builtin_memcpy(&qh, p + 2, 4);
  // Byte i of the 32 takes byte i / 8 of qh, then tests its bit i % 8.
  const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), pick), bit), bit);
  // set is 0xFF where the fifth bit is 1: q = nibble + 16·bit - 16 = nibble - 16 + (set & 16).
  return _mm256_add_epi8(_mm256_sub_epi8(nib, _mm256_set1_epi8(16)), _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

float dot_q5_0(const uint8_t* w, const XRow& x) {
  const int64_t blocks = x.k / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  auto block = [&](int64_t b, __m256 acc) {
    const uint8_t* p = w + b * 22;
    const __m256i q = q5_0_as_int8(p);
    const __m256i s = dot_u8s8(_mm256_abs_epi8(q), _mm256_sign_epi8(load256(x.q_s8 + b * 32), q));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(f16_at(p) * x.q_scale4[b * 8]), acc);
  };
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    prefetch(w + b * 22);  // one line per 44 bytes: every line once
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
  }
  if (b < blocks) acc0 = block(b, acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

inline void k_scales(const uint8_t* s, float* sc, float* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = static_cast<float>(s[j] & 63);
    mn[j] = static_cast<float>(s[j + 4] & 63);
    sc[j + 4] = static_cast<float>((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
    mn[j + 4] = static_cast<float>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

template <bool kFive>
float dot_k4(const uint8_t* w, const XRow& x) {
  constexpr int64_t kBytes = kFive ? 176 : 144, kQ = kFive ? 48 : 16;
  const int64_t supers = x.k / 256;
  const __m256i low4 = _mm256_set1_epi8(0x0f), bit = _mm256_set1_epi8(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  float corr = 0;
  for (int64_t sb = 0; sb < supers; ++sb) {
    const uint8_t* p = w + sb * kBytes;
    prefetch(p);
    prefetch(p + 64);
    prefetch(p + 128);
    const float d = f16_at(p), dmin = f16_at(p + 2);
    float sc[8], mn[8];
    k_scales(p + 4, sc, mn);
    const float* xs = x.q_xsum16 + sb * 16;
    float mins = 0;
    for (int j = 0; j < 8; ++j) mins += mn[j] * (xs[2 * j] + xs[2 * j + 1]);
    corr += dmin * mins;
    const __m256i qh = kFive ? load256(p + 16) : _mm256_setzero_si256();
    for (int pr = 0; pr < 4; ++pr) {
      const __m256i q = load256(p + kQ + 32 * pr);
      __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if (kFive) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * pr), bit), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * pr + 1), bit), 4));
      }
      const int64_t c = sb * 256 + 64 * pr;
      const __m256i s0 = dot_u8s8(lo, load256(x.q_s8 + c)), s1 = dot_u8s8(hi, load256(x.q_s8 + c + 32));
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0),
                             _mm256_mul_ps(_mm256_set1_ps(d * sc[2 * pr]), _mm256_loadu_ps(x.q_scale4 + c / 4)), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1),
                             _mm256_mul_ps(_mm256_set1_ps(d * sc[2 * pr + 1]), _mm256_loadu_ps(x.q_scale4 + c / 4 + 8)), acc1);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - corr;
}

float dot_q6_k(const uint8_t* w, const XRow& x) {
  const int64_t supers = x.k / 256;
  const __m256i low4 = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, corr = acc0;
  for (int64_t sb = 0; sb < supers; ++sb) {
    const uint8_t* p = w + sb * 210;
    prefetch(p);
    prefetch(p + 64);
    prefetch(p + 128);
    prefetch(p + 192);
    const float d = f16_at(p + 208);
    const int8_t* sc8 = reinterpret_cast<const int8_t*>(p + 192);
    float sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = d * sc8[j];
    corr = _mm256_fmadd_ps(_mm256_loadu_ps(sc), _mm256_loadu_ps(x.q_xsum16 + sb * 16), corr);
    corr = _mm256_fmadd_ps(_mm256_loadu_ps(sc + 8), _mm256_loadu_ps(x.q_xsum16 + sb * 16 + 8), corr);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load256(p + 64 * h), l1 = load256(p + 64 * h + 32), qh = load256(p + 128 + 32 * h);
      const __m256i nib[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4),
                              _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                              _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i q = _mm256_or_si256(nib[k], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), three), 4));
        const int64_t c = sb * 256 + 128 * h + 32 * k;
        const int j = 8 * h + 2 * k;  // scales of values c .. c + 15 and c + 16 .. c + 31
        const __m256 scale = _mm256_mul_ps(halves(sc[j], sc[j + 1]), _mm256_loadu_ps(x.q_scale4 + c / 4));
        __m256& acc = k % 2 ? acc1 : acc0;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(q, load256(x.q_s8 + c))), scale, acc);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - 32 * hsum(corr);
}

// Panel packing as 8x8 transposes (unpack / shuffle / permute2f128), 8 panel columns at a time.
// A ragged group (nr or NR not a multiple of 8: the 14-row x panels, the last weight rows) is
// transposed too, with zero rows past nr and a masked store up to NR: before, its columns went
// through a scalar strided loop, ~40% of packing x for the 14x32 kernel.
void pack_panel(const float* const* src, int64_t nr, int64_t NR, int64_t kc, float* dst) {
  for (int64_t c0 = 0; c0 < NR; c0 += 8) {
    const int64_t rows = std::clamp<int64_t>(nr - c0, 0, 8), lanes = std::min<int64_t>(8, NR - c0);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = i < rows ? _mm256_loadu_ps(src[c0 + i] + k) : _mm256_setzero_ps();
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      for (int i = 0; i < 4; ++i) {
        const __m256 lo = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        const __m256 hi = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
        if (lanes == 8) {
          _mm256_storeu_ps(dst + (k + i) * NR + c0, lo);
          _mm256_storeu_ps(dst + (k + i + 4) * NR + c0, hi);
        } else {
          _mm256_maskstore_ps(dst + (k + i) * NR + c0, mask, lo);
          _mm256_maskstore_ps(dst + (k + i + 4) * NR + c0, mask, hi);
        }
      }
    }
    for (; k < kc; ++k)
      for (int64_t c = c0; c < c0 + lanes; ++c) dst[k * NR + c] = c - c0 < rows ? src[c][k] : 0.f;
  }
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16(src + i));
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16(src + i));
  for (; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}

}  // namespace

void pack_panel_avx2(const float* const* src, int64_t nr, int64_t NR, int64_t kc, float* dst) {
  pack_panel(src, nr, NR, kc, dst);
}

const IsaKernels& avx2_kernels() {
  static const IsaKernels k = {"avx2",
                               MR,
                               NR,
                               sgemm_6x16,
                               0,
                               0,
                               nullptr,
                               dot_f32,
                               dot_16bit<load_f16, half_to_float>,
                               dot_16bit<load_bf16, bf16_bits_to_float>,
                               dot_i8,
                               dot_i4,
                               dot_bfp16,
                               nullptr,
                               nullptr,
                               f16_to_f32,
                               bf16_to_f32,
                               pack_panel,
                               scalar_kernels().f32_to_bf16,
                               nullptr,
                               dot_q8_0,
                               dot_q4_0,
                               dot_q5_0,
                               dot_k4<false>,
                               dot_k4<true>,
                               dot_q6_k};
  return k;
}

}  // namespace xdna::host

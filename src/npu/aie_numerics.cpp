#include "npu/aie_numerics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xdna::aie {

#if defined(__x86_64__)
void mac_run_i8x32_sse2(int32_t* lanes, const int8_t* a, const int8_t* b, int blocks) {
  // One pass per 16-lane half h (four accumulators of four lanes, kept in registers), blocks
  // taken in pairs j, j + 1 (an odd last one paired with zeros): the two blocks' bytes of a lane
  // interleaved and sign-extended to int16, so that pmaddwd gives a_j b_j + a_j+1 b_j+1 per
  // lane, exact in int32 (|.| <= 2^15); paddd adds it modulo 2^32 as the accumulator wraps.
  const auto ld = [](const int8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
  const auto widen_lo = [](__m128i x) { return _mm_srai_epi16(_mm_unpacklo_epi8(x, x), 8); };
  const auto widen_hi = [](__m128i x) { return _mm_srai_epi16(_mm_unpackhi_epi8(x, x), 8); };
  for (int h = 0; h < 2; ++h) {
    int32_t* out = lanes + 16 * h;
    __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(out));
    __m128i c1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(out + 4));
    __m128i c2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(out + 8));
    __m128i c3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(out + 12));
    const auto step = [&](__m128i a0, __m128i a1, __m128i b0, __m128i b1) {
      const __m128i xa_lo = _mm_unpacklo_epi8(a0, a1), xb_lo = _mm_unpacklo_epi8(b0, b1);  // lanes 0-7
      const __m128i xa_hi = _mm_unpackhi_epi8(a0, a1), xb_hi = _mm_unpackhi_epi8(b0, b1);  // lanes 8-15
      c0 = _mm_add_epi32(c0, _mm_madd_epi16(widen_lo(xa_lo), widen_lo(xb_lo)));
      c1 = _mm_add_epi32(c1, _mm_madd_epi16(widen_hi(xa_lo), widen_hi(xb_lo)));
      c2 = _mm_add_epi32(c2, _mm_madd_epi16(widen_lo(xa_hi), widen_lo(xb_hi)));
      c3 = _mm_add_epi32(c3, _mm_madd_epi16(widen_hi(xa_hi), widen_hi(xb_hi)));
    };
    const int8_t *pa = a + 16 * h, *pb = b + 16 * h;
    int j = 0;
    for (; j + 2 <= blocks; j += 2, pa += 64, pb += 64) step(ld(pa), ld(pa + 32), ld(pb), ld(pb + 32));
    if (j < blocks) step(ld(pa), _mm_setzero_si128(), ld(pb), _mm_setzero_si128());
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), c0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4), c1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8), c2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 12), c3);
  }
}

namespace {
// 16 int8 values at p sign-extended to int16.
__attribute__((target("avx2"), always_inline)) inline __m256i avx2_wide(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// Blocks j, j + 1 (int16 lanes, a1 / b1 zero for an odd last block) into the four accumulators
// of mac_run_i8x32_avx2: lanes of a pair interleaved (within each 128-bit half), so vpmaddwd
// gives a_j b_j + a_j+1 b_j+1 per lane, exact in int32.
__attribute__((target("avx2"), always_inline)) inline void avx2_pair(__m256i* c, const int8_t* pa, const int8_t* pb,
                                                                      bool pair) {
  for (int h = 0; h < 2; ++h) {
    const __m256i a0 = avx2_wide(pa + 16 * h), b0 = avx2_wide(pb + 16 * h);
    const __m256i a1 = pair ? avx2_wide(pa + 32 + 16 * h) : _mm256_setzero_si256();
    const __m256i b1 = pair ? avx2_wide(pb + 32 + 16 * h) : _mm256_setzero_si256();
    c[2 * h] = _mm256_add_epi32(c[2 * h], _mm256_madd_epi16(_mm256_unpacklo_epi16(a0, a1), _mm256_unpacklo_epi16(b0, b1)));
    c[2 * h + 1] =
        _mm256_add_epi32(c[2 * h + 1], _mm256_madd_epi16(_mm256_unpackhi_epi16(a0, a1), _mm256_unpackhi_epi16(b0, b1)));
  }
}
}  // namespace

__attribute__((target("avx2"))) void mac_run_i8x32_avx2(int32_t* lanes, const int8_t* a, const int8_t* b,
                                                         int blocks) {
  // Accumulator 2h holds lanes 16h + 0-3 and 16h + 8-11 (its two 128-bit halves), 2h + 1 lanes
  // 16h + 4-7 and 16h + 12-15: the order vpunpck{l,h}wd leave them in; put back at the end.
  __m256i c[4];
  for (int h = 0; h < 2; ++h) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + 16 * h));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + 16 * h + 8));
    c[2 * h] = _mm256_permute2x128_si256(x, y, 0x20);
    c[2 * h + 1] = _mm256_permute2x128_si256(x, y, 0x31);
  }
  int j = 0;
  for (; j + 2 <= blocks; j += 2, a += 64, b += 64) avx2_pair(c, a, b, true);
  if (j < blocks) avx2_pair(c, a, b, false);
  for (int h = 0; h < 2; ++h) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + 16 * h), _mm256_permute2x128_si256(c[2 * h], c[2 * h + 1], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + 16 * h + 8),
                        _mm256_permute2x128_si256(c[2 * h], c[2 * h + 1], 0x31));
  }
}

bool cpu_has_avx2() { return cpu_features().avx2; }  // the host kernels' CPUID probe, read once
#endif

void mac_run_i8x32(int32_t* lanes, const int8_t* a, const int8_t* b, int blocks) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) mac_run_i8x32_avx2(lanes, a, b, blocks);
  else mac_run_i8x32_sse2(lanes, a, b, blocks);
#else
  mac_run_lanes<32>(lanes, a, b, blocks);
#endif
}

int8_t srs_int8(int64_t x, int shift, Rounding r) {
  int64_t q = x >> shift;  // floor (arithmetic shift, C++20)
  if (r == Rounding::NearestEven && shift > 0) {
    const int64_t rem = x - (q << shift), half = int64_t(1) << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  return int8_t(q < -128 ? -128 : q > 127 ? 127 : q);
}

void mmul_bfp16_888::mac(const uint8_t* a, const uint8_t* b) {
  for (int r = 0; r < 8; ++r) {
    const uint8_t* ar = a + r * 9;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* bj = b + j * 9;
      float add;
      if (ar[0] == 255 || bj[0] == 255) {
        add = std::numeric_limits<float>::quiet_NaN();
      } else {
        int32_t dot = 0;  // exact: |dot| <= 8 * 128 * 128
        for (int k = 0; k < 8; ++k) dot += int32_t(int8_t(ar[1 + k])) * int8_t(bj[1 + k]);
        // value = m * 2^(E - 127) / 64 for each operand.
        add = std::ldexp(float(dot), int(ar[0]) + int(bj[0]) - 254 - 12);
      }
      c.lane[r * 8 + j] = c.lane[r * 8 + j] + add;
    }
  }
}

void mmul_int8_888::mac(const int8_t* a, const int8_t* b) {
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < 8; ++j) {
      uint32_t s = uint32_t(c.lane[r * 8 + j]);  // wraps as the 32-bit lane does
      for (int k = 0; k < 8; ++k) s += uint32_t(int32_t(a[r * 8 + k]) * int32_t(b[j * 8 + k]));
      c.lane[r * 8 + j] = int32_t(s);
    }
}

namespace {

struct Tables {
  std::array<float, kExpLutEntries> exp2_frac;
  std::array<float, kRecipLutEntries> recip;
  Tables() {
    for (int j = 0; j < kExpLutEntries; ++j)
      exp2_frac[j] = float(std::exp2((j + 0.5) / kExpLutEntries));
    for (int j = 0; j < kRecipLutEntries; ++j) {
      const double lo = 1.0 + double(j) / kRecipLutEntries, hi = 1.0 + double(j + 1) / kRecipLutEntries;
      recip[j] = float(2.0 / (lo + hi));
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

float exp_lut(float x) {
  if (std::isnan(x)) return x;
  const float t = x * 1.44269504f;  // log2(e) in f32
  if (t >= 128.0f) return std::numeric_limits<float>::infinity();
  if (t < -126.0f) return 0.0f;
  const float i = std::floor(t);
  const int j = std::min(kExpLutEntries - 1, int((t - i) * kExpLutEntries));
  return std::ldexp(tables().exp2_frac[j], int(i));
}

float reciprocal_lut(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t sign = bits & 0x80000000u, e = (bits >> 23) & 0xFF;
  if (e == 255) return (bits & 0x7FFFFF) ? x : (sign ? -0.0f : 0.0f);
  if (e == 0) return sign ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const int j = int((bits >> 15) & 0xFF);  // top 8 mantissa bits
  const float r = std::ldexp(tables().recip[j], 127 - int(e));
  return sign ? -r : r;
}

}  // namespace xdna::aie

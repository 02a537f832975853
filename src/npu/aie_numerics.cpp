#include "npu/aie_numerics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace xdna::aie {

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

#include "core/numeric.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/ggml_blocks.h"

namespace xdna {

namespace {

uint32_t f32_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float f32_from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// Rows inside mapped files may sit at any byte offset: load and store through memcpy.
template <typename T>
T load(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * int64_t(sizeof(T)), sizeof(T));
  return v;
}

template <typename T>
void store(uint8_t* p, int64_t i, T v) {
  std::memcpy(p + i * int64_t(sizeof(T)), &v, sizeof(T));
}

std::string where(int64_t r, int64_t c) {
  return "row " + std::to_string(r) + ", column " + std::to_string(c);
}

void check_matrix(const char* what, int64_t rows, int64_t cols, int64_t group) {
  if (rows < 0 || cols < 0)
    throw std::invalid_argument(std::string(what) + ": negative shape [" + std::to_string(rows) +
                                ", " + std::to_string(cols) + "]");
  if (group <= 0 || cols % group != 0)
    throw std::invalid_argument(std::string(what) + ": group " + std::to_string(group) +
                                " does not divide " + std::to_string(cols) + " columns");
}

// Largest |x| of one group; non-finite weights have no symmetric scale, so they are refused.
float group_absmax(const char* what, const float* x, int64_t r, int64_t c0, int64_t group) {
  float amax = 0.0f;
  for (int64_t j = 0; j < group; ++j) {
    if (!std::isfinite(x[j]))
      throw std::invalid_argument(std::string(what) + ": non-finite value at " +
                                  where(r, c0 + j));
    amax = std::max(amax, std::fabs(x[j]));
  }
  return amax;
}

// Round to nearest (ties to even, the default FP environment), clamped to [lo, hi].
int quantize_value(float x, float scale, int lo, int hi) {
  if (scale == 0.0f) return 0;
  const float q = std::nearbyint(x / scale);
  return int(std::clamp(q, float(lo), float(hi)));
}

}  // namespace

// ---- bf16 ----------------------------------------------------------------------------------

uint16_t f32_to_bf16(float x) {
  uint32_t b = f32_bits(x);
  if ((b & 0x7FFFFFFF) > 0x7F800000) return uint16_t((b >> 16) | 0x0040);  // NaN: quiet it
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to even; a carry out of
  // the mantissa bumps the exponent, and past the largest finite bf16 that gives Inf.
  b += 0x7FFF + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}

uint16_t f32_to_bf16_floor(float x) {
  const uint32_t b = f32_bits(x);
  if ((b & 0x7FFFFFFF) > 0x7F800000) return uint16_t((b >> 16) | 0x0040);
  uint16_t h = uint16_t(b >> 16);
  // Truncating the bits rounds the magnitude down: toward -inf for positive values. Negative
  // values with dropped bits move one step further from zero (to -Inf past the largest bf16).
  if ((b & 0x80000000) && (b & 0xFFFF)) ++h;
  return h;
}

float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

// ---- f16 -----------------------------------------------------------------------------------

uint16_t f32_to_f16(float x) {
  const uint32_t b = f32_bits(x);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000);
  uint32_t a = b & 0x7FFFFFFF;
  if (a > 0x7F800000) return uint16_t(sign | 0x7E00 | ((a >> 13) & 0x3FF));  // quiet NaN
  if (a >= 0x477FF000) return uint16_t(sign | 0x7C00);  // >= 65520 (the tie above 65504): Inf
  if (a >= 0x38800000) {                                 // >= 2^-14: a normal f16
    // Rebias the exponent from 127 to 15 and round the 13 dropped bits to nearest even; a
    // mantissa carry moves into the exponent, which is the correctly rounded result.
    a += 0xC8000000u + 0x0FFF + ((a >> 13) & 1);
    return uint16_t(sign | (a >> 13));
  }
  // Subnormal f16: a multiple of 2^-24. Values below 2^-25 (f32 denormals included) round to 0.
  const int exp = int(a >> 23);
  const int shift = 126 - exp;  // >= 14 here
  if (shift > 24) return sign;
  const uint32_t mant = (a & 0x7FFFFF) | 0x800000;
  uint32_t q = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1))) ++q;  // may carry into the smallest normal
  return uint16_t(sign | q);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    const float v = float(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7F800000 | (mant << 13));  // Inf, NaN payload
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// ---- bfp16ebs8 -----------------------------------------------------------------------------
//
// Encoding follows the mlir-aie host helper (floatToBfp16 with rounding 0) and the AIE2P
// hardware: the mantissa is the two's-complement value truncated, i.e. floor(x * 2^(133-E)),
// rounded toward minus infinity. Edge cases (docs/formats.md):
//  - f32 denormals are flushed to zero (their exponent field is 0, not a real exponent);
//  - a block holding any NaN or Inf is stored as E = 255 with zero mantissas and decodes to 8 NaNs;
//  - an all-zero block is E = 0, mantissas 0.

void bfp16_encode(const float* x, int64_t n, uint8_t* out) {
  if (n < 0 || n % kBfp16BlockValues != 0)
    throw std::invalid_argument("bfp16_encode: " + std::to_string(n) +
                                " values is not a whole number of 8-value blocks");
  for (int64_t blk = 0; blk < n / kBfp16BlockValues; ++blk) {
    const float* v = x + blk * kBfp16BlockValues;
    uint8_t* o = out + blk * kBfp16BlockBytes;
    uint32_t max_exp = 0;
    bool non_finite = false;
    for (int i = 0; i < kBfp16BlockValues; ++i) {
      const uint32_t e = (f32_bits(v[i]) >> 23) & 0xFF;
      non_finite |= (e == 255);
      max_exp = std::max(max_exp, e);
    }
    if (non_finite) {
      o[0] = 0xFF;
      std::memset(o + 1, 0, kBfp16BlockValues);
      continue;
    }
    o[0] = uint8_t(max_exp);
    for (int i = 0; i < kBfp16BlockValues; ++i) {
      const uint32_t b = f32_bits(v[i]);
      const uint32_t e = (b >> 23) & 0xFF;
      int32_t m = 0;
      if (e != 0) {  // normal; zeros and denormals stay 0
        const int32_t mant = int32_t((b & 0x7FFFFF) | 0x800000);  // 1.f * 2^23
        const int32_t s = (b >> 31) ? -mant : mant;
        // value = s * 2^(e-150); stored unit is 2^(E-133): shift by 17 + (E - e), flooring.
        const uint32_t shift = 17 + (max_exp - e);
        m = shift > 30 ? (s < 0 ? -1 : 0) : (s >> shift);  // >> on int32 is arithmetic (C++20)
      }
      o[1 + i] = uint8_t(int8_t(m));
    }
  }
}

void bfp16_decode(const uint8_t* in, int64_t n, float* out) {
  if (n < 0 || n % kBfp16BlockValues != 0)
    throw std::invalid_argument("bfp16_decode: " + std::to_string(n) +
                                " values is not a whole number of 8-value blocks");
  for (int64_t blk = 0; blk < n / kBfp16BlockValues; ++blk) {
    const uint8_t* b = in + blk * kBfp16BlockBytes;
    float* o = out + blk * kBfp16BlockValues;
    if (b[0] == 0xFF) {
      std::fill(o, o + kBfp16BlockValues, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    // 2^(E-127) / 64, exact in f32 for every E in 0..254 (a denormal power of two for E < 7);
    // m * unit is exact too, except -128 * 2^121 (E = 254), which overflows to -Inf.
    const float unit = std::ldexp(1.0f, int(b[0]) - 133);
    for (int i = 0; i < kBfp16BlockValues; ++i) o[i] = float(int8_t(b[1 + i])) * unit;
  }
}

// ---- symmetric int8 / int4 -----------------------------------------------------------------

void quantize_int8(const float* x, int64_t rows, int64_t cols, int64_t group, int8_t* q,
                   float* scales) {
  check_matrix("quantize_int8", rows, cols, group);
  const int64_t groups = cols / group;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * group;
      const float* xs = x + r * cols + c0;
      const float scale = group_absmax("quantize_int8", xs, r, c0, group) / 127.0f;
      scales[r * groups + g] = scale;
      for (int64_t j = 0; j < group; ++j)
        q[r * cols + c0 + j] = int8_t(quantize_value(xs[j], scale, -127, 127));
    }
}

void quantize_int4(const float* x, int64_t rows, int64_t cols, int64_t group, uint8_t* q,
                   float* scales) {
  check_matrix("quantize_int4", rows, cols, group);
  if (group % 2 != 0)
    throw std::invalid_argument("quantize_int4: group " + std::to_string(group) +
                                " must be even (two values per byte)");
  const int64_t groups = cols / group;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * group;
      const float* xs = x + r * cols + c0;
      const float scale = group_absmax("quantize_int4", xs, r, c0, group) / 7.0f;
      scales[r * groups + g] = scale;
      uint8_t* qb = q + (r * cols + c0) / 2;
      for (int64_t j = 0; j < group; j += 2) {
        const int lo = quantize_value(xs[j], scale, -8, 7);
        const int hi = quantize_value(xs[j + 1], scale, -8, 7);
        qb[j / 2] = uint8_t((lo & 0x0F) | ((hi & 0x0F) << 4));
      }
    }
}

// ---- whole rows ----------------------------------------------------------------------------

void dequantize_row(DType t, const void* src, float* dst, int64_t n, const float* scales,
                    int64_t group) {
  dtype_bytes(t, n);  // throws unless n is a whole number of blocks
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t blocks = n / traits(t).block_elems;
  if ((t == DType::I8 || t == DType::I4) && (scales == nullptr || group <= 0))
    throw std::invalid_argument("dequantize_row(" + std::string(dtype_name(t)) +
                                "): needs the row's scales and a group size > 0");
  switch (t) {
    case DType::F32:
      if (n) std::memcpy(dst, s, size_t(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load<uint16_t>(s, i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load<uint16_t>(s, i));
      return;
    case DType::I32:
      for (int64_t i = 0; i < n; ++i) dst[i] = float(load<int32_t>(s, i));
      return;
    case DType::I8:
      for (int64_t i = 0; i < n; ++i) dst[i] = float(int8_t(s[i])) * scales[i / group];
      return;
    case DType::I4:
      for (int64_t i = 0; i < n; ++i) {
        const int nib = (i & 1) ? (s[i / 2] >> 4) : (s[i / 2] & 0x0F);
        dst[i] = float(nib >= 8 ? nib - 16 : nib) * scales[i / group];
      }
      return;
    case DType::BFP16: bfp16_decode(s, n, dst); return;
    case DType::Q8_0: ggml::dequantize_q8_0(s, blocks, dst); return;
    case DType::Q4_0: ggml::dequantize_q4_0(s, blocks, dst); return;
    case DType::Q5_0: ggml::dequantize_q5_0(s, blocks, dst); return;
    case DType::Q4_K: ggml::dequantize_q4_k(s, blocks, dst); return;
    case DType::Q5_K: ggml::dequantize_q5_k(s, blocks, dst); return;
    case DType::Q6_K: ggml::dequantize_q6_k(s, blocks, dst); return;
  }
  throw std::invalid_argument("dequantize_row: unknown dtype " + std::to_string(int(t)));
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  dtype_bytes(t, n);
  auto* d = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::F32:
      if (n) std::memcpy(d, src, size_t(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) store<uint16_t>(d, i, f32_to_f16(src[i]));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) store<uint16_t>(d, i, f32_to_bf16(src[i]));
      return;
    case DType::I32:
      for (int64_t i = 0; i < n; ++i) {
        const float r = std::nearbyint(src[i]);
        // 2^31 is the first float past int32's range; NaN fails both comparisons.
        if (!(r >= -2147483648.0f && r < 2147483648.0f))
          throw std::invalid_argument("quantize_row(i32): value " + std::to_string(src[i]) +
                                      " at index " + std::to_string(i) + " does not fit");
        store<int32_t>(d, i, int32_t(r));
      }
      return;
    case DType::BFP16: bfp16_encode(src, n, d); return;
    case DType::I8:
    case DType::I4:
      throw std::invalid_argument("quantize_row(" + std::string(dtype_name(t)) +
                                  "): needs scales; use quantize_int8 / quantize_int4");
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      throw std::invalid_argument("quantize_row(" + std::string(dtype_name(t)) +
                                  "): GGML formats are read, never written");
  }
  throw std::invalid_argument("quantize_row: unknown dtype " + std::to_string(int(t)));
}

}  // namespace xdna

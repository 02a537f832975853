// Number formats: hand-computed cases, round trips, error bounds, special values, and the GGML
// decoders against the gguf-py reference (fixtures from scripts/make_format_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/ggml_blocks.h"
#include "core/numeric.h"
#include "core/tensor.h"

using namespace xdna;

namespace {

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<uint8_t> read_fixture(const std::string& name) {
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/formats/" + name;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("missing fixture " + path);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<float> as_floats(const std::vector<uint8_t>& raw) {
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

// One bfp16 block from 8 values; returns the 9 bytes.
std::vector<uint8_t> encode_block(std::vector<float> x) {
  std::vector<uint8_t> out(kBfp16BlockBytes);
  bfp16_encode(x.data(), 8, out.data());
  return out;
}

}  // namespace

// ---- bf16 ----------------------------------------------------------------------------------

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(3.0f), 0x4040);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, kept bit even: down
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, kept bit odd: up
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F807FFF)), 0x3F80);  // below the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0xBF818000)), 0xBF82);  // negative tie, odd: away from 0
  EXPECT_EQ(f32_to_bf16(from_bits(0x3FFF8000)), 0x4000);  // mantissa carry into the exponent
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);  // denormal tie, odd: up
}

TEST(Bf16, InfNaNAndOverflow) {
  EXPECT_EQ(f32_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past max: Inf
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7F7FFF)), 0x7F7F);              // just below the tie
  // A signalling NaN whose payload sits in the dropped bits must stay NaN (and become quiet).
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F800001)), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(from_bits(0xFFFFFFFF)), 0xFFFF);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(kNaN))));
}

TEST(Bf16, FloorRoundsTowardMinusInfinity) {
  EXPECT_EQ(f32_to_bf16_floor(from_bits(0x3F80FFFF)), 0x3F80);  // positive: truncate
  EXPECT_EQ(f32_to_bf16_floor(from_bits(0xBF800001)), 0xBF81);  // negative: one step down
  EXPECT_EQ(f32_to_bf16_floor(-1.0f), 0xBF80);                   // exact stays
  EXPECT_EQ(f32_to_bf16_floor(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16_floor(std::numeric_limits<float>::max()), 0x7F7F);
  EXPECT_EQ(f32_to_bf16_floor(-std::numeric_limits<float>::max()), 0xFF80);  // -Inf
  EXPECT_EQ(f32_to_bf16_floor(-kInf), 0xFF80);
  EXPECT_EQ(f32_to_bf16_floor(from_bits(0x7F800001)), 0x7FC0);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1000.0f, 1000.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = u(rng);
    const float lo = bf16_to_f32(f32_to_bf16_floor(x));
    EXPECT_LE(lo, x);
    EXPECT_GT(bf16_to_f32(uint16_t(f32_to_bf16_floor(x) + (x > 0 ? 1 : -1))), x);
  }
}

TEST(Bf16, EveryPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float x = bf16_to_f32(uint16_t(h));
    EXPECT_EQ(bits(x), h << 16);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_bf16(x), h);
    ASSERT_EQ(f32_to_bf16_floor(x), h);
  }
}

// ---- f16 -----------------------------------------------------------------------------------

TEST(F16, HandComputed) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);      // largest finite
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7BFF);     // below the tie with 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);      // the tie rounds to even: Inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);      // smallest normal
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);      // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);      // tie between 0 and 2^-24: even (0)
  EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x3p-25f), 0x0002);      // 1.5 units: tie, up to even 2
  EXPECT_EQ(f32_to_f16(0x5p-25f), 0x0002);      // 2.5 units: tie, down to even 2
  EXPECT_EQ(f32_to_f16(0x7FFp-25f), 0x0400);    // 1023.5 units: rounds into the normals
  EXPECT_EQ(f32_to_f16(-0x1p-24f), 0x8001);
  EXPECT_EQ(f32_to_f16(1e-45f), 0x0000);        // f32 denormal: far below f16
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(0x1.002p0f), 0x3C00);    // 1 + 2^-11: tie, even
  EXPECT_EQ(f32_to_f16(0x1.006p0f), 0x3C02);    // 1 + 3 * 2^-11: tie, up to even
  EXPECT_EQ(f32_to_f16(kInf), 0x7C00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xFC00);
  const uint16_t nan = f32_to_f16(kNaN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(f32_to_f16(from_bits(0x7F800001)) & 0x03FF, 0);  // payload only in dropped bits
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x83FF), -0x3FFp-24f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
}

TEST(F16, EveryPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float x = f16_to_f32(uint16_t(h));
    if (((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF)) {
      ASSERT_TRUE(std::isnan(x)) << h;
      ASSERT_EQ(f32_to_f16(x), h | 0x0200) << h;  // payload kept, made quiet
      continue;
    }
    ASSERT_EQ(f32_to_f16(x), h) << h;
  }
}

#ifdef __FLT16_MANT_DIG__
// The compiler's own f32 -> _Float16 conversion (libgcc soft-float, round to nearest even).
TEST(F16, MatchesCompilerConversionOnRandomBits) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = from_bits(uint32_t(rng()));
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(f32_to_f16(x), hb) << std::hex << bits(x);
  }
}
#endif

// numpy (f16) and torch (bf16) conversions of edge cases, ties and random patterns.
TEST(HalfFloats, MatchReferenceFixture) {
  const auto raw = read_fixture("halves.bin");
  ASSERT_EQ(raw.size() % 8, 0u);
  ASSERT_GT(raw.size(), 8000u);
  for (size_t i = 0; i < raw.size(); i += 8) {
    uint32_t xb;
    uint16_t h, b;
    std::memcpy(&xb, &raw[i], 4);
    std::memcpy(&h, &raw[i + 4], 2);
    std::memcpy(&b, &raw[i + 6], 2);
    const float x = from_bits(xb);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(x))));
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(x))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(x), h) << std::hex << xb;
    EXPECT_EQ(f32_to_bf16(x), b) << std::hex << xb;
  }
}

// ---- bfp16ebs8 -----------------------------------------------------------------------------

TEST(Bfp16, ThreeEncodesAsE128M96) {
  const auto b = encode_block({3.0f, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(b[0], 128);
  EXPECT_EQ(b[1], 96);
  for (int i = 2; i < 9; ++i) EXPECT_EQ(b[i], 0);
  float y[8];
  bfp16_decode(b.data(), 8, y);
  EXPECT_EQ(y[0], 3.0f);
}

TEST(Bfp16, MantissasFloorInTwosComplement) {
  // E = 127 (from 1.0 and 1.5), so the unit is 1/64.
  const auto b = encode_block({1.0f, -1.0f, 0.5f, -0.5f, 0x1p-10f, -0x1p-10f, 1.5f, -1.99f});
  EXPECT_EQ(b[0], 127);
  const int8_t want[8] = {64, -64, 32, -32, 0, -1, 96, -128};  // floor(x * 64)
  for (int i = 0; i < 8; ++i) EXPECT_EQ(int8_t(b[1 + i]), want[i]) << i;
  float y[8];
  bfp16_decode(b.data(), 8, y);
  EXPECT_EQ(y[5], -1.0f / 64);  // -2^-10 floors to one unit below zero
  EXPECT_EQ(y[7], -2.0f);       // -128: a magnitude the positive side cannot reach
  // E = 128 (from 2.0): unit 1/32, so values with exponent 127 keep one bit fewer.
  const auto c = encode_block({2.0f, 1.0f + 0x1p-7f + 0x1p-9f, -(1.0f + 0x1p-7f), 0, 0, 0, 0, 0});
  EXPECT_EQ(c[0], 128);
  EXPECT_EQ(int8_t(c[1]), 64);
  EXPECT_EQ(int8_t(c[2]), 32);   // (1 + 2^-7 + 2^-9) * 32 = 32.3125 -> 32
  EXPECT_EQ(int8_t(c[3]), -33);  // -32.25 -> -33
}

TEST(Bfp16, ErrorBoundRelativeToBlockMax) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  const int n = 8 * 512;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = std::ldexp(mant(rng), expo(rng));
  std::vector<uint8_t> enc(n / 8 * 9);
  bfp16_encode(x.data(), n, enc.data());
  bfp16_decode(enc.data(), n, y.data());
  for (int b = 0; b < n / 8; ++b) {
    float amax = 0;
    for (int i = 0; i < 8; ++i) amax = std::max(amax, std::fabs(x[b * 8 + i]));
    const float unit = std::ldexp(1.0f, int(enc[b * 9]) - 133);
    EXPECT_LE(unit, amax / 64);
    for (int i = 0; i < 8; ++i) {
      const double xi = x[b * 8 + i], yi = y[b * 8 + i];
      EXPECT_LE(yi, xi);              // floor never rounds up
      EXPECT_LT(xi - yi, unit);       // by less than one unit...
      EXPECT_LT(xi - yi, amax / 64);  // ... which is at most 1/64 of the block's largest |x|
    }
  }
}

TEST(Bfp16, RepresentableValuesRoundTrip) {
  // Decode random blocks, re-encode the values: they must come back exactly. E stays where no
  // value is an f32 denormal; -128 is left out, as it raises the block exponent by one (so
  // odd mantissas beside it would lose their last bit).
  std::mt19937 rng(5);
  const int blocks = 256;
  std::vector<uint8_t> b(blocks * 9);
  for (int i = 0; i < blocks; ++i) {
    b[i * 9] = uint8_t(8 + rng() % 245);
    for (int j = 1; j < 9; ++j) b[i * 9 + j] = uint8_t(std::max(-127, int(int8_t(rng()))));
  }
  std::vector<float> y(blocks * 8), y2(blocks * 8);
  std::vector<uint8_t> b2(b.size());
  bfp16_decode(b.data(), blocks * 8, y.data());
  bfp16_encode(y.data(), blocks * 8, b2.data());
  bfp16_decode(b2.data(), blocks * 8, y2.data());
  for (int i = 0; i < blocks * 8; ++i) ASSERT_EQ(y2[i], y[i]) << i;
}

TEST(Bfp16, ZeroDenormalNaNInf) {
  EXPECT_EQ(encode_block({0, 0, 0, 0, 0, 0, 0, 0}), std::vector<uint8_t>(9, 0));
  EXPECT_EQ(encode_block({-0.0f, 0, -0.0f, 0, 0, 0, 0, 0}), std::vector<uint8_t>(9, 0));
  // Denormals are flushed: a block of them is all zero, and a negative one does not floor to -1.
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(encode_block({tiny, -tiny, 1e-39f, -1e-39f, 0, 0, 0, 0}), std::vector<uint8_t>(9, 0));
  const auto mixed = encode_block({1.0f, -1e-39f, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(mixed[0], 127);
  EXPECT_EQ(mixed[2], 0);
  // Any NaN or Inf poisons its block (E = 255, decoding to NaN), leaving other blocks alone.
  std::vector<float> x = {1, 2, kNaN, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8,
                          1, -kInf, 0, 0, 0, 0, 0, 0};
  std::vector<uint8_t> enc(27);
  bfp16_encode(x.data(), 24, enc.data());
  EXPECT_EQ(enc[0], 255);
  EXPECT_EQ(enc[18], 255);
  std::vector<float> y(24);
  bfp16_decode(enc.data(), 24, y.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(std::isnan(y[i]));
    EXPECT_EQ(y[8 + i], x[8 + i]);
    EXPECT_TRUE(std::isnan(y[16 + i]));
  }
}

TEST(Bfp16, ExtremeExponents) {
  const float fmax = std::numeric_limits<float>::max();
  const auto b = encode_block({fmax, -fmax, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(b[0], 254);
  EXPECT_EQ(int8_t(b[1]), 127);
  EXPECT_EQ(int8_t(b[2]), -128);
  float y[8];
  bfp16_decode(b.data(), 8, y);
  EXPECT_EQ(y[0], 127 * 0x1p121f);
  EXPECT_EQ(y[1], -kInf);  // -128 * 2^121 = -2^128: past f32's range (documented)
  // E = 0 decodes through f32 denormals exactly.
  const uint8_t z[9] = {0, 64, 0x80, 1, 0, 0, 0, 0, 0};
  bfp16_decode(z, 8, y);
  EXPECT_EQ(y[0], 0x1p-127f);
  EXPECT_EQ(y[1], -0x1p-126f);
  EXPECT_EQ(y[2], 0x1p-133f);
}

TEST(Bfp16, BadLengthsThrow) {
  std::vector<float> x(16);
  std::vector<uint8_t> b(18);
  EXPECT_THROW(bfp16_encode(x.data(), 7, b.data()), std::invalid_argument);
  EXPECT_THROW(bfp16_decode(b.data(), 12, x.data()), std::invalid_argument);
  EXPECT_THROW(quantize_row(DType::BFP16, x.data(), b.data(), 9), std::invalid_argument);
  EXPECT_THROW(dequantize_row(DType::BFP16, b.data(), x.data(), 4), std::invalid_argument);
}

// ---- int8 / int4 ---------------------------------------------------------------------------

TEST(Int8, PerChannelHandComputed) {
  const std::vector<float> x = {0, 127, -63.5f, 1, 0, 0, 0, 0};  // row 1 all zero
  std::vector<int8_t> q(8);
  std::vector<float> s(2);
  quantize_int8(x.data(), 2, 4, 4, q.data(), s.data());
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 127);
  EXPECT_EQ(q[2], -64);  // -63.5: tie to even
  EXPECT_EQ(q[3], 1);
  EXPECT_EQ(s[1], 0.0f);  // zero row: scale 0, no NaN
  std::vector<float> y(4);
  dequantize_row(DType::I8, q.data() + 4, y.data(), 4, s.data() + 1, 4);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Int8, GroupErrorBound) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int rows = 8, cols = 256, group = 64;
  std::vector<float> x(rows * cols), y(cols);
  for (auto& v : x) v = nd(rng);
  std::vector<int8_t> q(rows * cols);
  std::vector<float> s(rows * cols / group);
  quantize_int8(x.data(), rows, cols, group, q.data(), s.data());
  for (int r = 0; r < rows; ++r) {
    dequantize_row(DType::I8, q.data() + r * cols, y.data(), cols, s.data() + r * cols / group,
                   group);
    for (int c = 0; c < cols; ++c) {
      const float sc = s[(r * cols + c) / group];
      EXPECT_GT(sc, 0.0f);
      EXPECT_LE(std::fabs(y[c] - x[r * cols + c]), sc * 0.5f * (1 + 1e-5f));
    }
  }
}

TEST(Int8, BadInputsThrow) {
  std::vector<float> x(8, 1.0f), s(4);
  std::vector<int8_t> q(8);
  EXPECT_THROW(quantize_int8(x.data(), 2, 4, 3, q.data(), s.data()), std::invalid_argument);
  EXPECT_THROW(quantize_int8(x.data(), 2, 4, 0, q.data(), s.data()), std::invalid_argument);
  x[5] = kNaN;
  EXPECT_THROW(quantize_int8(x.data(), 2, 4, 4, q.data(), s.data()), std::invalid_argument);
  std::vector<float> y(4);
  EXPECT_THROW(dequantize_row(DType::I8, q.data(), y.data(), 4), std::invalid_argument);
  EXPECT_THROW(quantize_row(DType::I8, x.data(), q.data(), 4), std::invalid_argument);
}

TEST(Int4, HandComputedPacking) {
  const std::vector<float> x = {7, -7, 3.5f, -3.5f, 0, 1, 2, -1};
  std::vector<uint8_t> q(4);
  float s;
  quantize_int4(x.data(), 1, 8, 8, q.data(), &s);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(q[0], 0x97);  // 7 low, -7 (0x9) high
  EXPECT_EQ(q[1], 0xC4);  // 3.5 -> 4, -3.5 -> -4 (ties to even)
  EXPECT_EQ(q[2], 0x10);
  EXPECT_EQ(q[3], 0xF2);
  std::vector<float> y(8);
  dequantize_row(DType::I4, q.data(), y.data(), 8, &s, 8);
  const float want[8] = {7, -7, 4, -4, 0, 1, 2, -1};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y[i], want[i]);
  const uint8_t eight = 0x08;  // -8 is decodable even though the quantizer stays within +-7
  dequantize_row(DType::I4, &eight, y.data(), 2, &s, 2);
  EXPECT_EQ(y[0], -8.0f);
}

TEST(Int4, GroupErrorBoundAndZeroGroups) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const int rows = 4, cols = 128, group = 32;
  std::vector<float> x(rows * cols), y(cols);
  for (auto& v : x) v = u(rng);
  for (int c = 32; c < 64; ++c) x[c] = 0.0f;  // one all-zero group
  std::vector<uint8_t> q(rows * cols / 2);
  std::vector<float> s(rows * cols / group);
  quantize_int4(x.data(), rows, cols, group, q.data(), s.data());
  EXPECT_EQ(s[1], 0.0f);
  for (int r = 0; r < rows; ++r) {
    dequantize_row(DType::I4, q.data() + r * cols / 2, y.data(), cols, s.data() + r * cols / group,
                   group);
    for (int c = 0; c < cols; ++c) {
      const float sc = s[(r * cols + c) / group];
      EXPECT_FALSE(std::isnan(y[c]));
      EXPECT_LE(std::fabs(y[c] - x[r * cols + c]), sc * 0.5f * (1 + 1e-5f));
    }
  }
  EXPECT_THROW(quantize_int4(x.data(), 1, 6, 3, q.data(), s.data()), std::invalid_argument);
  EXPECT_THROW(dequantize_row(DType::I4, q.data(), y.data(), 3, s.data(), 4),
               std::invalid_argument);
}

// ---- plain rows ----------------------------------------------------------------------------

TEST(Rows, PlainTypesRoundTrip) {
  const std::vector<float> x = {1.0f, -2.5f, 65504.0f, 0x1p-24f, 100.0f, -0.0f};
  std::vector<uint8_t> buf(x.size() * 4 + 1);
  std::vector<float> y(x.size());
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    // Start one byte in: rows inside mapped files need not be aligned.
    quantize_row(t, x.data(), buf.data() + 1, int64_t(x.size()));
    dequantize_row(t, buf.data() + 1, y.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      float want = x[i];
      if (t == DType::BF16) want = bf16_to_f32(f32_to_bf16(x[i]));
      if (t == DType::I32) want = std::nearbyint(x[i]);
      EXPECT_EQ(y[i], want) << dtype_name(t) << " " << i;
    }
  }
  const float big = 3e9f;
  EXPECT_THROW(quantize_row(DType::I32, &big, buf.data(), 1), std::invalid_argument);
  EXPECT_THROW(quantize_row(DType::Q4_K, x.data(), buf.data(), 256), std::invalid_argument);
}

// ---- GGML blocks against gguf-py -----------------------------------------------------------

struct GgmlCase {
  DType type;
  const char* name;
};
void PrintTo(const GgmlCase& c, std::ostream* os) { *os << c.name; }

class Ggml : public ::testing::TestWithParam<GgmlCase> {};

TEST_P(Ggml, MatchesGgufPyExactly) {
  const auto [type, name] = GetParam();
  const auto blocks = read_fixture(std::string(name) + ".bin");
  const auto ref = as_floats(read_fixture(std::string(name) + ".f32"));
  const auto& tr = traits(type);
  ASSERT_GT(blocks.size(), 0u);
  ASSERT_EQ(blocks.size() % size_t(tr.block_bytes), 0u);
  const int64_t n = int64_t(blocks.size()) / tr.block_bytes * tr.block_elems;
  ASSERT_EQ(int64_t(ref.size()), n);
  // Decode from an odd address too (a GGUF tensor can start anywhere).
  std::vector<uint8_t> shifted(blocks.size() + 1);
  std::memcpy(shifted.data() + 1, blocks.data(), blocks.size());
  std::vector<float> y(n);
  dequantize_row(type, shifted.data() + 1, y.data(), n);
  int nonzero = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits(y[i]), bits(ref[i])) << name << " value " << i << ": " << y[i] << " vs "
                                        << ref[i];
    nonzero += y[i] != 0.0f;
  }
  EXPECT_GT(nonzero, n / 2);  // the fixture exercises real values, not zeros
  EXPECT_THROW(dequantize_row(type, blocks.data(), y.data(), tr.block_elems - 1),
               std::invalid_argument);
  EXPECT_THROW(dequantize_row(type, blocks.data(), y.data(), tr.block_elems + 8),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Formats, Ggml,
                         ::testing::Values(GgmlCase{DType::Q8_0, "q8_0"},
                                           GgmlCase{DType::Q4_0, "q4_0"},
                                           GgmlCase{DType::Q5_0, "q5_0"},
                                           GgmlCase{DType::Q4_K, "q4_k"},
                                           GgmlCase{DType::Q5_K, "q5_k"},
                                           GgmlCase{DType::Q6_K, "q6_k"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Ggml, KScaleMinUnpacking) {
  // Scale/min j < 4: low 6 bits of bytes j, j + 4; j >= 4: nibbles of byte j + 4 plus the top
  // two bits of bytes j - 4 (scale) and j (min).
  const uint8_t s[12] = {0xC1, 0x02, 0x03, 0x04, 0x45, 0x06, 0x07, 0x08, 0x9A, 0, 0, 0};
  uint8_t sc, m;
  ggml::k_scale_min(s, 0, &sc, &m);
  EXPECT_EQ(sc, 1);
  EXPECT_EQ(m, 5);
  ggml::k_scale_min(s, 4, &sc, &m);
  EXPECT_EQ(sc, 0x0A | (3 << 4));  // low nibble of 0x9A, top bits of 0xC1
  EXPECT_EQ(m, 0x09 | (1 << 4));   // high nibble of 0x9A, top bits of 0x45
}

// ---- Tensor::to_vector over every dtype ----------------------------------------------------

TEST(ToVector, EveryDtype) {
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f, 8.0f, 0.0f, -1.0f,
                                2.0f, 4.0f,  -8.0f, 1.5f, 0.75f, -3.0f, 6.0f, 0.125f};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::BFP16}) {
    Tensor tt = Tensor::empty({2, 8}, t);
    for (int r = 0; r < 2; ++r)
      quantize_row(t, x.data() + r * 8, tt.raw() + r * dtype_bytes(t, 8), 8);
    std::vector<float> want = x;
    if (t == DType::I32)
      for (auto& v : want) v = std::nearbyint(v);
    if (t == DType::BFP16) {
      std::vector<uint8_t> enc(18);
      bfp16_encode(x.data(), 16, enc.data());
      bfp16_decode(enc.data(), 16, want.data());
    }
    EXPECT_EQ(tt.to_vector(), want) << dtype_name(t);
  }
  // int8 / int4 carry their scales in the tensor.
  Tensor q8 = Tensor::empty({2, 8}, DType::I8);
  Tensor s8 = Tensor::empty({2, 2});
  quantize_int8(x.data(), 2, 8, 4, q8.data<int8_t>(), s8.data<float>());
  q8.set_scales(s8, 4);
  const auto v8 = q8.to_vector();
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(v8[i], x[i], s8.data<float>()[i / 4] / 2) << i;
  Tensor q4 = Tensor::empty({2, 8}, DType::I4);
  Tensor s4 = Tensor::empty({2, 1});
  quantize_int4(x.data(), 2, 8, 8, q4.data<uint8_t>(), s4.data<float>());
  q4.set_scales(s4, 8);
  const auto v4 = q4.to_vector();
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(v4[i], x[i], s4.data<float>()[i / 8] / 2) << i;
  // A GGML tensor viewing raw blocks, as a GGUF loader makes it.
  const auto raw = read_fixture("q4_k.bin");
  auto buf = std::make_shared<HeapBuffer>(raw.size());
  std::memcpy(buf->data(), raw.data(), raw.size());
  const int64_t rows = int64_t(raw.size()) / ggml::kQ4_KBytes;
  Tensor qk = Tensor::view(buf, 0, {rows, 256}, DType::Q4_K);
  EXPECT_EQ(qk.to_vector(), as_floats(read_fixture("q4_k.f32")));
}

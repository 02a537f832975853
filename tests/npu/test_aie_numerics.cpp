// The AIE numerics layer and the kernels written on it: bit-exact against direct host code of
// the same numerics and accumulation order, and within stated tolerances of f32/f64 results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "npu/aie_kernels.h"

using namespace xdna;
using namespace xdna::aie;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<bf16> to_bf16s(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = {f32_to_bf16(v[i])};
  return o;
}

}  // namespace

TEST(AieNumerics, RoundingOnStore) {
  const float x = 1.0f + 3.0f / 256.0f;  // between bf16 1+2/128... : 1.01171875
  EXPECT_EQ(to_float(to_bf16(x, Rounding::Floor)), 1.0078125f);
  EXPECT_EQ(to_float(to_bf16(x, Rounding::NearestEven)), 1.015625f);
  EXPECT_EQ(to_float(to_bf16(-x, Rounding::Floor)), -1.015625f);  // toward minus infinity
}

TEST(AieNumerics, ShiftRoundSaturate) {
  EXPECT_EQ(srs_int8(5, 1, Rounding::Floor), 2);
  EXPECT_EQ(srs_int8(-5, 1, Rounding::Floor), -3);
  EXPECT_EQ(srs_int8(5, 1, Rounding::NearestEven), 2);   // 2.5 -> 2
  EXPECT_EQ(srs_int8(7, 1, Rounding::NearestEven), 4);   // 3.5 -> 4
  EXPECT_EQ(srs_int8(-7, 1, Rounding::NearestEven), -4); // -3.5 -> -4
  EXPECT_EQ(srs_int8(13, 2, Rounding::NearestEven), 3);  // 3.25 -> 3
  EXPECT_EQ(srs_int8(1000, 1, Rounding::Floor), 127);
  EXPECT_EQ(srs_int8(-1000, 1, Rounding::NearestEven), -128);
  EXPECT_EQ(srs_int8(-77, 0, Rounding::Floor), -77);
}

TEST(AieNumerics, ReduceAddIsPairwiseHalving) {
  accum<float, 4> a;
  a.lane = {1e8f, 1.0f, -1e8f, 1.0f};
  // Pairwise: (1e8 + -1e8) + (1 + 1) = 2; left-to-right would give 1.
  EXPECT_EQ(reduce_add(a), 2.0f);
}

TEST(AieNumerics, GemvBf16BitExactAndClose) {
  const int64_t rows = 37, K = 1024;
  const auto wf = randn(rows * K, 1), xf = randn(K, 2);
  const auto W = to_bf16s(wf), x = to_bf16s(xf);
  for (Rounding rnd : {Rounding::Floor, Rounding::NearestEven}) {
    std::vector<bf16> y(rows);
    gemv_bf16(W.data(), x.data(), y.data(), rows, K, rnd);
    for (int64_t r = 0; r < rows; ++r) {
      // Direct host code of the same numerics: 16 f32 lanes, k = l mod 16, pairwise halving.
      float lane[16] = {};
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float w = bf16_to_f32(W[r * K + k].bits), v = bf16_to_f32(x[k].bits);
        lane[k % 16] += w * v;
        exact += double(w) * v;
        mag += std::fabs(double(w) * v);
      }
      for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; ++i) lane[i] += lane[i + h];
      const uint16_t want = rnd == Rounding::Floor ? f32_to_bf16_floor(lane[0]) : f32_to_bf16(lane[0]);
      ASSERT_EQ(y[r].bits, want) << "row " << r;
      // Tolerance vs f64: one bf16 step (2^-7 relative, floor) plus f32 accumulation 1e-5 x sum|w x|.
      EXPECT_NEAR(to_float(y[r]), exact, std::fabs(exact) * 0x1p-7 + 1e-5 * mag) << "row " << r;
    }
  }
  std::vector<bf16> y(1);
  EXPECT_THROW(gemv_bf16(W.data(), x.data(), y.data(), 1, 100, Rounding::Floor), std::invalid_argument);
}

TEST(AieNumerics, GemvInt8BitExact) {
  const int64_t rows = 9, K = 512;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> W(rows * K), x(K), y(rows);
  for (auto& v : W) v = int8_t(d(rng));
  for (auto& v : x) v = int8_t(d(rng));
  gemv_int8(W.data(), x.data(), y.data(), rows, K, 12, Rounding::NearestEven);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t s = 0;
    for (int64_t k = 0; k < K; ++k) s += int64_t(W[r * K + k]) * x[k];  // exact (no wrap here)
    const double q = std::nearbyint(double(s) / 4096.0);  // round half even (default FP env)
    EXPECT_EQ(y[r], int8_t(std::clamp(q, -128.0, 127.0))) << "row " << r;
  }
}

TEST(AieNumerics, GemmBfp16BitExactAndClose) {
  const int64_t m = 16, k = 64, n = 24;
  const auto Af = randn(m * k, 4), Bf = randn(k * n, 5, 0.5f);
  std::vector<uint8_t> A(m * k / 8 * 9), B(k * n / 8 * 9);
  pack_bfp16_a(Af.data(), m, k, A.data());
  pack_bfp16_b(Bf.data(), k, n, B.data());
  std::vector<float> C(m * n, 0.25f);  // accumulates in place onto an existing C
  gemm_bfp16(A.data(), B.data(), C.data(), m, k, n);
  // Reference: decode with the core format code, then per 8-value block an exact sum (shared
  // scale, integer mantissas) added to C in increasing k.
  std::vector<float> Ad(m * k), Bd(k * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < k / 8; ++b) {
      std::vector<float> blk(8);
      std::vector<uint8_t> enc(9);
      bfp16_encode(Af.data() + i * k + b * 8, 8, enc.data());
      bfp16_decode(enc.data(), 8, blk.data());
      for (int t = 0; t < 8; ++t) Ad[i * k + b * 8 + t] = blk[t];
    }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < k / 8; ++b) {
      float col[8], blk[8];
      uint8_t enc[9];
      for (int t = 0; t < 8; ++t) col[t] = Bf[(b * 8 + t) * n + j];
      bfp16_encode(col, 8, enc);
      bfp16_decode(enc, 8, blk);
      for (int t = 0; t < 8; ++t) Bd[(b * 8 + t) * n + j] = blk[t];
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float c = 0.25f;
      double exact = 0.25, mag = 0;
      for (int64_t b = 0; b < k / 8; ++b) {
        float s = 0;
        for (int t = 0; t < 8; ++t) s += Ad[i * k + b * 8 + t] * Bd[(b * 8 + t) * n + j];
        c += s;
      }
      for (int64_t t = 0; t < k; ++t) {
        exact += double(Af[i * k + t]) * Bf[t * n + j];
        mag += std::fabs(double(Af[i * k + t]) * Bf[t * n + j]);
      }
      ASSERT_EQ(C[i * n + j], c) << i << "," << j;
      // bfp16 truncation: each operand loses < 2^-5 of its block's largest magnitude; with
      // Gaussian data the product error stays below 0.05 x sum|a b| (stated tolerance).
      EXPECT_NEAR(C[i * n + j], exact, 0.05 * mag) << i << "," << j;
    }
}

TEST(AieNumerics, Int8MmulMatchesLoops) {
  int8_t a[64], b[64];
  for (int i = 0; i < 64; ++i) {
    a[i] = int8_t(i * 7 - 200);
    b[i] = int8_t(100 - i * 3);
  }
  mmul_int8_888 mm;
  mm.mac(a, b);
  mm.mac(a, b);
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < 8; ++j) {
      int32_t s = 0;
      for (int k = 0; k < 8; ++k) s += a[r * 8 + k] * b[j * 8 + k];
      EXPECT_EQ(mm.c.lane[r * 8 + j], 2 * s);
    }
}

TEST(AieNumerics, LookupTablesWithinStatedError) {
  double worst_exp = 0, worst_rec = 0;
  for (float x = -80.0f; x <= 80.0f; x += 0.0137f) {
    const double want = std::exp(double(x));
    worst_exp = std::max(worst_exp, std::fabs(exp_lut(x) - want) / want);
  }
  for (float x = 1e-3f; x <= 1e3f; x *= 1.00137f) {
    worst_rec = std::max(worst_rec, std::fabs(reciprocal_lut(x) * double(x) - 1.0));
    EXPECT_EQ(reciprocal_lut(-x), -reciprocal_lut(x));
  }
  EXPECT_LE(worst_exp, kExpLutMaxRelError + 2e-5);  // + f32 rounding of x * log2(e)
  EXPECT_GT(worst_exp, kExpLutMaxRelError / 2);     // the bound is tight, not loose
  EXPECT_LE(worst_rec, kRecipLutMaxRelError);
  EXPECT_GT(worst_rec, kRecipLutMaxRelError / 2);
  EXPECT_EQ(exp_lut(-200.0f), 0.0f);
  EXPECT_TRUE(std::isinf(exp_lut(200.0f)));
  EXPECT_TRUE(std::isnan(exp_lut(NAN)));
  EXPECT_TRUE(std::isinf(reciprocal_lut(0.0f)));
  EXPECT_EQ(reciprocal_lut(INFINITY), 0.0f);
}

// The layer's inline bf16 conversions (aie_numerics.h) give core/numeric.h's bits: every bf16
// pattern, every f32 whose dropped bits are a tie, just below or above one, zero or all ones
// (both signs, NaN and Inf payloads included), and random f32 bit patterns.
TEST(AieNumerics, ConversionsMatchCore) {
  const auto check = [](uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    ASSERT_EQ(to_bf16(x, Rounding::NearestEven).bits, f32_to_bf16(x)) << std::hex << b;
    ASSERT_EQ(to_bf16(x, Rounding::Floor).bits, f32_to_bf16_floor(x)) << std::hex << b;
  };
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    const float f = to_float(bf16{uint16_t(hi)});
    uint32_t fb;
    std::memcpy(&fb, &f, 4);
    ASSERT_EQ(fb, hi << 16);
    const float core = bf16_to_f32(uint16_t(hi));
    ASSERT_EQ(std::memcmp(&f, &core, 4), 0);
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) check(hi << 16 | lo);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) check(uint32_t(rng()));
}

// The int8 mac and reduce_add wrap as 32-bit lanes: against int64 sums truncated, at the
// products' and the accumulator's extremes.
TEST(AieNumerics, Int8MacWrapsAtExtremes) {
  constexpr int N = 32;
  const int8_t vals[] = {-128, -127, -1, 0, 1, 126, 127};
  const int32_t accs[] = {INT32_MIN, INT32_MIN + 1, -16384, 0, 16383, INT32_MAX - 1, INT32_MAX};
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    accum<int32_t, N> acc;
    vector<int8_t, N> a, b;
    for (int i = 0; i < N; ++i) {
      acc.lane[i] = round < 100 ? accs[rng() % 7] : int32_t(rng());
      a.lane[i] = round % 2 ? vals[rng() % 7] : int8_t(rng());
      b.lane[i] = round % 2 ? vals[rng() % 7] : int8_t(rng());
    }
    const accum<int32_t, N> out = mac(acc, a, b);
    int64_t total = 0;
    for (int i = 0; i < N; ++i) {
      const int64_t want = int64_t(acc.lane[i]) + int64_t(a.lane[i]) * b.lane[i];
      ASSERT_EQ(out.lane[i], int32_t(uint32_t(uint64_t(want)))) << "lane " << i;
      total += out.lane[i];
    }
    EXPECT_EQ(reduce_add(out), int32_t(uint32_t(uint64_t(total))));
  }
}

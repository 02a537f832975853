// The AIE numerics layer and the kernels written on it: bit-exact against direct host code of
// the same numerics and accumulation order, and within stated tolerances of f32/f64 results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "aie_kernels/fused_stage_int8.h"
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

namespace {
// The host's forms of an N-lane mac_run, each on its own (mac_run picks one): the portable loop,
// and for 32 lanes on x86-64 the SSE2 form and, where the CPU has it, the AVX2 one.
using MacRunForm = void (*)(int32_t*, const int8_t*, const int8_t*, int);
template <int N>
std::vector<MacRunForm> mac_run_forms() {
  std::vector<MacRunForm> forms = {mac_run_lanes<N>};
#if defined(__x86_64__)
  if constexpr (N == 32) {
    forms.push_back(mac_run_i8x32_sse2);
    if (cpu_has_avx2()) forms.push_back(mac_run_i8x32_avx2);
  }
#endif
  return forms;
}
}  // namespace

// mac_run (a run of int8 macs into one accumulator, the lanes kept in registers) and each host
// form of it give, lane for lane, what one mac per block gives: 32 and 16 lanes, runs of 0 to 40
// blocks (odd and even), random bytes or only the extremes, accumulators near the int32 limits
// (so the lanes wrap inside the run).
TEST(AieNumerics, MacRunEqualsPerBlockMacs) {
  const int8_t vals[] = {-128, -127, -1, 0, 1, 126, 127};
  const int32_t accs[] = {INT32_MIN, INT32_MIN + 1, -16384, 0, 16383, INT32_MAX - 1, INT32_MAX};
  std::mt19937 rng(13);
  const auto check = [&]<int N>(std::integral_constant<int, N>, int round) {
    const int blocks = int(rng() % 41);
    std::vector<int8_t> a(size_t(blocks) * N), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = round % 2 ? vals[rng() % 7] : int8_t(rng());
      b[i] = round % 3 ? int8_t(rng()) : vals[rng() % 7];
    }
    accum<int32_t, N> acc;
    for (int i = 0; i < N; ++i) acc.lane[i] = round % 4 < 2 ? accs[rng() % 7] : int32_t(rng());
    accum<int32_t, N> want = acc;
    for (int j = 0; j < blocks; ++j) want = mac(want, load_v<N>(a.data() + j * N), load_v<N>(b.data() + j * N));
    const accum<int32_t, N> got = mac_run(acc, a.data(), b.data(), blocks);
    for (int i = 0; i < N; ++i) ASSERT_EQ(got.lane[i], want.lane[i]) << "N " << N << " lane " << i;
    const std::vector<MacRunForm> forms = mac_run_forms<N>();
    for (size_t f = 0; f < forms.size(); ++f) {
      accum<int32_t, N> one = acc;
      forms[f](one.lane.data(), a.data(), b.data(), blocks);
      for (int i = 0; i < N; ++i) ASSERT_EQ(one.lane[i], want.lane[i]) << "form " << f << " N " << N << " lane " << i;
    }
  };
  for (int round = 0; round < 300; ++round) {
    check(std::integral_constant<int, 32>{}, round);
    check(std::integral_constant<int, 16>{}, round);
  }
  // All 32 lanes at INT32_MAX, 39 blocks of (-128)(-128): every lane wraps to the same value.
  const std::vector<int8_t> m(39 * 32, -128);
  for (MacRunForm form : mac_run_forms<32>()) {
    accum<int32_t, 32> acc;
    acc.lane.fill(INT32_MAX);
    form(acc.lane.data(), m.data(), m.data(), 39);
    for (int i = 0; i < 32; ++i) ASSERT_EQ(acc.lane[i], int32_t(uint32_t(INT32_MAX) + 39u * 16384u));
  }
#if defined(__x86_64__)
  std::printf("mac_run's 32-lane form on this CPU: %s\n", cpu_has_avx2() ? "AVX2" : "SSE2");
#endif
}

// fused_stage_int8.h gemv_i8_run: a row-major int8 matrix streamed in runs of random lengths
// (whole blocks, rows split across runs anywhere) gives each row's exact sum (int64, then
// wrapped to 32 bits), the same as the whole matrix in one run.
TEST(AieNumerics, GemvRunsSplitAnywhereGiveExactRowSums) {
  std::mt19937 rng(17);
  for (int round = 0; round < 40; ++round) {
    const int32_t k = 32 * int32_t(1 + rng() % 12), rows = int32_t(1 + rng() % 9);
    std::vector<uint8_t> w(size_t(rows) * k);
    std::vector<int8_t> q(static_cast<size_t>(k));
    for (uint8_t& v : w) v = round % 2 ? uint8_t(rng()) : uint8_t(rng() % 2 ? 0x80 : 0x7F);
    for (int8_t& v : q) v = round % 2 ? int8_t(rng()) : int8_t(-128);
    std::vector<int32_t> got(size_t(rows), -1), whole(size_t(rows), -1);
    xk_fused::Acc32 acc;
    for (int64_t e = 0; e < int64_t(w.size());) {
      const int64_t n = std::min<int64_t>(32 * int64_t(1 + rng() % 20), int64_t(w.size()) - e);
      xk_fused::gemv_i8_run(acc, w.data() + e, e, n, k, q.data(), got.data());
      e += n;
    }
    xk_fused::gemv_i8_run(acc, w.data(), 0, int64_t(w.size()), k, q.data(), whole.data());
    for (int32_t r = 0; r < rows; ++r) {
      int64_t sum = 0;
      for (int32_t c = 0; c < k; ++c) sum += int64_t(int8_t(w[size_t(r) * k + c])) * q[size_t(c)];
      ASSERT_EQ(got[size_t(r)], int32_t(uint32_t(uint64_t(sum)))) << "row " << r << " k " << k;
      ASSERT_EQ(whole[size_t(r)], got[size_t(r)]);
    }
  }
}

// fused_stage_int8.h quantize_row / quantize_row_int4 (partial maxima, the add-and-subtract
// rounding) give the bits of the plain loops they replace: max|x| in order, x / sx through
// std::nearbyint, saturated, converted. Rows with ties (max 127 or 7: sx = 1, halves exact),
// zeros, bf16 denormals, huge values, Inf and NaN, odd lengths.
TEST(AieNumerics, QuantizeRowMatchesNearbyintLoop) {
  const auto reference = [](const std::vector<bf16>& x, float lim, std::vector<int8_t>& q) {
    float amax = 0.0f;
    for (bf16 v : x) {
      const float a = std::fabs(to_float(v));
      if (amax < a) amax = a;
    }
    const float sx = amax / lim;
    for (size_t i = 0; i < x.size(); ++i) {
      float v = sx == 0.0f ? 0.0f : std::nearbyint(to_float(x[i]) / sx);
      v = v < -lim ? -lim : v > lim ? lim : v;
      q[i] = int8_t(v == v ? int32_t(v) : 0);  // (x86: NaN converts to 0x80000000, low byte 0)
    }
    return sx;
  };
  std::mt19937 rng(19);
  for (int round = 0; round < 400; ++round) {
    const int32_t n = 2 * int32_t(1 + rng() % 200);
    const int kind = round % 5;
    std::vector<bf16> x(static_cast<size_t>(n));
    for (bf16& v : x) {
      float f = std::normal_distribution<float>(0.0f, 1.0f)(rng);
      if (kind == 1) f = float(int(rng() % 255) - 127) + (rng() % 2 ? 0.5f : 0.0f);  // halves
      if (kind == 2) f *= 1e-39f;                                                     // denormals
      if (kind == 3) f *= 1e30f;
      v = {f32_to_bf16(f)};
    }
    if (kind == 1) x[rng() % x.size()] = {f32_to_bf16(rng() % 2 ? 127.0f : -127.0f)};  // sx = 1
    if (kind == 4) x[rng() % x.size()] = {uint16_t(rng() % 2 ? 0x7F80 : 0x7FC1)};   // Inf or NaN
    if (round % 50 == 0) std::fill(x.begin(), x.end(), bf16{});
    std::vector<int8_t> want(x.size()), got(x.size());
    const float sx_want = reference(x, 127.0f, want);
    const float sx = xk_fused::quantize_row(x.data(), got.data(), n);
    ASSERT_EQ(std::memcmp(&sx, &sx_want, 4), 0) << "round " << round;
    ASSERT_EQ(got, want) << "round " << round;
    // int4: the same with 7, packed two a byte (value 2i in the low nibble).
    std::vector<bf16> x4 = x;
    if (kind == 1)
      for (bf16& v : x4) v = {f32_to_bf16(float(int(rng() % 15) - 7) + (rng() % 2 ? 0.5f : 0.0f))};
    if (kind == 1) x4[0] = {f32_to_bf16(7.0f)};
    const float sx4_want = reference(x4, 7.0f, want);
    std::vector<uint8_t> packed(x4.size() / 2);
    const float sx4 = xk_fused::quantize_row_int4(x4.data(), packed.data(), n);
    ASSERT_EQ(std::memcmp(&sx4, &sx4_want, 4), 0) << "round " << round;
    for (size_t i = 0; i < packed.size(); ++i)
      ASSERT_EQ(packed[i], uint8_t((want[2 * i] & 0xF) | ((want[2 * i + 1] & 0xF) << 4))) << "round " << round;
  }
}

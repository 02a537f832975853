// The four-rows-at-a-time GEMV kernels for GGML Q4_0, Q6_K and Q8_0 (gemm_ggml_avx512.cpp) against
// scalar references (Q8_0: bit-identical to its one-row dot) written from the GGML block layouts,
// on the same int8-quantized x: the integer block sums must be exact, so the result may differ
// only by f32 rounding (within 1e-6 of Σ|terms|). Odd row counts (groups of four plus a
// remainder) and block counts that leave a tail (Q4_0's four-block steps, Q8_0's two-block ones).
// The AVX2 and scalar paths of the same matmuls: test_matmul.cpp; Q6_K at extreme values and the
// shared references (ggml_test_reference.h): test_gemm_q6k_repack.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/numeric.h"
#include "host/gemm.h"
#include "host/matmul.h"
#include "ggml_test_reference.h"

using namespace xdna;
using namespace xdna::host;

namespace {

using namespace ggml_ref;

// Σ_k w[k]·x̂[k] in double, per block: d · s_x · Σ q_w·q_x, with q_w the block's signed values.
double reference(const uint8_t* row, const Quantized& x, int64_t K) {
  double sum = 0;
  for (int64_t b = 0; b < K / 32; ++b) {
    const uint8_t* p = row + b * 18;
    uint16_t h;
    std::memcpy(&h, p, 2);
    int64_t dot = 0;
    for (int j = 0; j < 32; ++j) {
      const int wq = (j < 16 ? (p[2 + j] & 15) : (p[2 + j - 16] >> 4)) - 8;
      dot += static_cast<int64_t>(wq) * x.q[b * 32 + j];
    }
    sum += static_cast<double>(half_to_float(h)) * x.scale4[b * 8] * static_cast<double>(dot);
  }
  return sum;
}

void check(int64_t N, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t block_bytes = 18;
  std::vector<uint8_t> bytes(N * K / 32 * block_bytes);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < N * K / 32; ++b) {  // finite scales of about 2^-8 .. 2^-5
    const uint16_t d = static_cast<uint16_t>(((rng() & 1) << 15) | ((7 + rng() % 4) << 10) | (rng() & 1023));
    std::memcpy(bytes.data() + b * block_bytes, &d, 2);
  }
  const std::vector<float> x = random_x(K, rng);
  const Quantized xq = quantize(x);
  const XRow xr = ggml_x(x, xq);
  const WeightRows w{DType::Q4_0, bytes.data(), K / 32 * block_bytes, N, K};
  std::vector<float> out(N);
  for (int64_t n = 0; n < N; n += kGemvRows) {
    const int count = static_cast<int>(std::min<int64_t>(kGemvRows, N - n));
    rows_q4_0_avx512(w, n, count, xr, out.data() + n);
  }
  for (int64_t n = 0; n < N; ++n) {
    double mag = 0;  // Σ |terms|: the scale of the f32 rounding error
    const uint8_t* row = w.row(n);
    for (int64_t b = 0; b < K / 32; ++b) {
      uint16_t h;
      std::memcpy(&h, row + b * block_bytes, 2);
      mag += std::fabs(half_to_float(h)) * xq.scale4[b * 8] * 32 * 127 * 128;
    }
    const double ref = reference(row, xq, K);
    ASSERT_NEAR(out[n], ref, 1e-6 * mag) << "N=" << N << " K=" << K << " row " << n;
  }
}

void check_q6_k(int64_t N, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<uint8_t> bytes = random_q6_k(N, K, rng);
  const std::vector<float> x = random_x(K, rng);
  const Quantized xq = quantize(x);
  const XRow xr = ggml_x(x, xq);
  const WeightRows w{DType::Q6_K, bytes.data(), K / 256 * 210, N, K};
  std::vector<float> out(N);
  for (int64_t n = 0; n < N; n += kGemvRows) {
    const int count = static_cast<int>(std::min<int64_t>(kGemvRows, N - n));
    rows_q6_k_avx512(w, n, count, xr, out.data() + n);
  }
  for (int64_t n = 0; n < N; ++n) {
    double mag;
    const double ref = reference_q6_k(w.row(n), xq, K, &mag);
    ASSERT_NEAR(out[n], ref, 1e-6 * mag) << "N=" << N << " K=" << K << " row " << n;
    // The one-row AVX-512 dot on the same x: the same sums in another order.
    const float one = avx512_kernels().dot_q6_k(w.row(n), xr);
    ASSERT_NEAR(out[n], one, 1e-6 * mag) << "one-row dot, N=" << N << " K=" << K << " row " << n;
  }
}

bool has_kernels() { return active_isa() == Isa::Avx512 && has_avx512_vnni(); }

TEST(GemmGgmlRows, Q4_0MatchesScalarReference) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  uint32_t seed = 100;
  // K: 1, 9, 33 blocks (a tail of 1 after four-block steps), 3 (tail only), 10, 35 (tails of 2
  // and 3), 96 (Qwen3's FFN down, no tail).
  for (int64_t N : {1, 3, 4, 5, 16, 23})
    for (int64_t K : {32, 288, 1056, 96, 320, 1120, 3072}) check(N, K, seed++);
}

TEST(GemmGgmlRows, Q6_KMatchesScalarReference) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  uint32_t seed = 300;
  for (int64_t N : {1, 2, 4, 7, 16, 21, 37})
    for (int64_t K : {256, 768, 1280}) check_q6_k(N, K, seed++);
}

// Q8_0 rows (f16 d, int8 q[32]; q = -128 included) against the one-row AVX-512 dot (the same
// kernel on one row) and the AVX2 dot on the same x: bit-identical (the same integer sums,
// products and accumulation order), and near a double reference. Odd block counts take the
// 256-bit tail; odd row counts the one-row remainder.
TEST(GemmGgmlRows, Q8_0BitIdenticalToOneRowDot) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  uint32_t seed = 500;
  for (int64_t N : {1, 3, 4, 5, 16, 23, 37})
    for (int64_t K : {32, 64, 96, 640, 1056}) {
      std::mt19937 rng(seed++);
      std::vector<uint8_t> bytes(N * K / 32 * 34);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      for (int64_t b = 0; b < N * K / 32; ++b) {  // finite scales of about 2^-8 .. 2^-5, either sign
        const uint16_t d = static_cast<uint16_t>(((rng() & 1) << 15) | ((7 + rng() % 4) << 10) | (rng() & 1023));
        std::memcpy(bytes.data() + b * 34, &d, 2);
        if (b % 3 == 0) bytes[b * 34 + 2 + rng() % 32] = 0x80;  // q = -128
      }
      const std::vector<float> x = random_x(K, rng);
      const Quantized xq = quantize(x);
      const XRow xr = ggml_x(x, xq);
      const WeightRows w{DType::Q8_0, bytes.data(), K / 32 * 34, N, K};
      std::vector<float> out(N);
      for (int64_t n = 0; n < N; n += kGemvRows) {
        const int count = static_cast<int>(std::min<int64_t>(kGemvRows, N - n));
        rows_q8_0_avx512(w, n, count, xr, out.data() + n);
      }
      for (int64_t n = 0; n < N; ++n) {
        const float one = avx512_kernels().dot_q8_0(w.row(n), xr);
        ASSERT_EQ(std::memcmp(&out[n], &one, sizeof(float)), 0)
            << "N=" << N << " K=" << K << " row " << n << ": " << out[n] << " vs " << one;
        const float avx2 = avx2_kernels().dot_q8_0(w.row(n), xr);  // vpmaddubsw: the same sums
        ASSERT_EQ(std::memcmp(&out[n], &avx2, sizeof(float)), 0)
            << "AVX2 dot, N=" << N << " K=" << K << " row " << n << ": " << out[n] << " vs " << avx2;
        double ref = 0, mag = 0;
        for (int64_t b = 0; b < K / 32; ++b) {
          const uint8_t* p = w.row(n) + b * 34;
          uint16_t h;
          std::memcpy(&h, p, 2);
          int64_t dot = 0;
          for (int j = 0; j < 32; ++j) dot += static_cast<int64_t>(static_cast<int8_t>(p[2 + j])) * xq.q[b * 32 + j];
          ref += static_cast<double>(half_to_float(h)) * xq.scale4[b * 8] * static_cast<double>(dot);
          mag += std::fabs(half_to_float(h)) * xq.scale4[b * 8] * 32 * 127 * 128;
        }
        ASSERT_NEAR(out[n], ref, 1e-6 * mag) << "N=" << N << " K=" << K << " row " << n;
      }
    }
}

// Through host::matmul: the AVX-512 GEMV (the Q4_0, Q6_K and Q8_0 row kernels) and the
// AVX2 one-row dots agree to f32 rounding, both from the same quantized x.
TEST(GemmGgmlRows, MatmulAgreesWithAvx2Path) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  const Isa best = active_isa();
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q6_K}) {
    std::mt19937 rng(7);
    const int64_t N = 37, K = t == DType::Q6_K ? 768 : 320;
    Tensor w = Tensor::empty({N, K}, t);
    auto* bytes = reinterpret_cast<uint8_t*>(w.raw());
    for (int64_t i = 0; i < w.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
    if (t == DType::Q6_K) {
      const std::vector<uint8_t> q6 = random_q6_k(N, K, rng);
      std::memcpy(bytes, q6.data(), q6.size());
    } else {
      const int64_t block_bytes = t == DType::Q8_0 ? 34 : 18;
      for (int64_t b = 0; b < N * K / 32; ++b) {
        const uint16_t d = 0x2000 | (rng() & 1023);
        std::memcpy(bytes + b * block_bytes, &d, 2);
      }
    }
    std::vector<float> xv(2 * K);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto& v : xv) v = uni(rng);
    const Tensor x = Tensor::from_vector({2, K}, xv);
    const std::vector<float> fast = host::matmul(x, w).to_vector();
    force_isa(Isa::Avx2);
    const std::vector<float> avx2 = host::matmul(x, w).to_vector();
    force_isa(best);
    for (int64_t i = 0; i < 2 * N; ++i)
      ASSERT_NEAR(fast[i], avx2[i], 1e-4 * (1 + std::fabs(avx2[i]))) << dtype_name(t) << " y[" << i << "]";
  }
}

}  // namespace

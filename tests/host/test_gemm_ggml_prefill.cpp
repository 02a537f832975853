// The int8 VNNI GEMM for GGML Q8_0 / Q4_0 weights (gemm_i8_avx512.cpp, the prefill path of
// matmul for more than four x rows) against a double reference on the same int8-quantized x:
// per block of 32, s = max|x|/127 and q = nearest-even(x/s) (the GEMV's quantizer), so the block
// sums are exact and the result may differ from the reference only by f32 rounding. The looser
// bound against f32 x (each x moves by at most s/2): test_matmul.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/gemm.h"
#include "host/matmul.h"

using namespace xdna;
using namespace xdna::host;

namespace {

bool have_vnni() { return active_isa() == Isa::Avx512 && has_avx512_vnni(); }

// Random GGML rows with finite scales of about 2^-8 .. 2^-5 (either sign).
std::vector<uint8_t> random_blocks(DType t, int64_t N, int64_t K, std::mt19937& rng) {
  const int64_t bb = t == DType::Q4_0 ? 18 : 34;
  std::vector<uint8_t> bytes(N * K / 32 * bb);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < N * K / 32; ++b) {
    const uint16_t d = static_cast<uint16_t>(((rng() & 1) << 15) | ((7 + rng() % 4) << 10) | (rng() & 1023));
    std::memcpy(bytes.data() + b * bb, &d, 2);
  }
  return bytes;
}

int weight_q(DType t, const uint8_t* block, int j) {
  if (t == DType::Q8_0) return static_cast<int8_t>(block[2 + j]);
  return (j < 16 ? (block[2 + j] & 15) : (block[2 + j - 16] >> 4)) - 8;
}

void check(DType t, int64_t M, int64_t N, int64_t K, bool with_bias, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
               " K=" + std::to_string(K));
  std::mt19937 rng(seed);
  const int64_t bb = t == DType::Q4_0 ? 18 : 34;
  std::vector<uint8_t> bytes = random_blocks(t, N, K, rng);
  std::uniform_real_distribution<float> uni(-2.f, 2.f);
  std::vector<float> x(M * K), bias(N);
  for (auto& v : x) v = uni(rng);
  for (auto& v : bias) v = uni(rng);
  for (int64_t i = 0; i < M; ++i) x[i * K + (i * 37) % K] = 50.f;  // an outlier: only its block coarsens
  Tensor w = Tensor::empty({N, K}, t);
  std::memcpy(w.raw(), bytes.data(), bytes.size());
  Tensor bt = Tensor::from_vector({N}, bias);
  const std::vector<float> y = host::matmul(Tensor::from_vector({M, K}, x), w, with_bias ? &bt : nullptr).to_vector();
  double max_err = 0;
  for (int64_t i = 0; i < M; ++i) {
    std::vector<int> q(K);
    std::vector<float> s(K / 32);
    for (int64_t b = 0; b < K / 32; ++b) {
      float amax = 0;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) amax = std::max(amax, std::fabs(x[i * K + k]));
      s[b] = amax / 127;
      const float inv = amax > 0 ? 127 / amax : 0;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) q[k] = static_cast<int>(std::nearbyint(x[i * K + k] * inv));
    }
    for (int64_t n = 0; n < N; ++n) {
      double ref = with_bias ? bias[n] : 0.0, mag = std::fabs(ref), f32ref = ref;
      for (int64_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = bytes.data() + (n * K / 32 + b) * bb;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const double d = half_to_float(h);
        int64_t dot = 0;
        for (int j = 0; j < 32; ++j) {
          dot += static_cast<int64_t>(weight_q(t, blk, j)) * q[b * 32 + j];
          f32ref += d * weight_q(t, blk, j) * x[i * K + b * 32 + j];
        }
        ref += d * s[b] * static_cast<double>(dot);
        mag += std::fabs(d) * s[b] * 32 * 127 * 128;
      }
      const double got = y[i * N + n];
      ASSERT_NEAR(got, ref, 1e-6 * mag) << "y[" << i << ", " << n << "]";
      max_err = std::max(max_err, std::fabs(got - f32ref));
    }
  }
  EXPECT_GT(max_err, 1e-5) << "x was not quantized: the int8 GEMM did not run";
}

// M = 5 (one partial 6-row tile), 37 and 70; N = 45 and 70 (partial 32-column panels); K = 288
// (9 blocks) and 1024. Large enough shapes run threaded.
TEST(GgmlPrefillGemm, MatchesQuantizedXReference) {
  if (!have_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  uint32_t seed = 1;
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (int64_t K : {288, 1024})
      for (int64_t M : {5, 37, 70})
        for (int64_t N : {45, 70}) {
          check(t, M, N, K, (M + N) % 2 == 1, seed++);
          if (::testing::Test::HasFatalFailure()) return;
        }
}

// Threads split whole 32-column panels, so every output sees the same arithmetic.
TEST(GgmlPrefillGemm, SingleThreadMatchesThreaded) {
  if (!have_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(5);
  const int64_t M = 64, N = 200, K = 512;
  ASSERT_GE(2 * M * N * K, 4 * kGemmSerialFlops);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    std::vector<uint8_t> bytes = random_blocks(t, N, K, rng);
    Tensor w = Tensor::empty({N, K}, t);
    std::memcpy(w.raw(), bytes.data(), bytes.size());
    std::vector<float> xv(M * K);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto& v : xv) v = uni(rng);
    const Tensor x = Tensor::from_vector({M, K}, xv);
    const int before = num_threads();
    set_num_threads(1);
    const std::vector<float> one = host::matmul(x, w).to_vector();
    set_num_threads(before > 1 ? before : 2);
    const std::vector<float> many = host::matmul(x, w).to_vector();
    set_num_threads(before);
    EXPECT_EQ(one, many) << dtype_name(t);
  }
}

}  // namespace

// The four-rows-at-a-time GEMV kernel for GGML Q4_0 (gemm_ggml_avx512.cpp) against a scalar
// reference on the same int8-quantized x: the integer block sums must be exact, so the result may
// differ only by f32 rounding. Odd row counts (groups of four plus a remainder) and odd block
// counts (the 256-bit tail). The AVX2 and scalar paths of the same matmuls: test_matmul.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/numeric.h"
#include "host/gemm.h"
#include "host/matmul.h"

using namespace xdna;
using namespace xdna::host;

namespace {

struct Quantized {  // x as the GEMV prepares it for the GGML kernels
  std::vector<int8_t> q;
  std::vector<float> scale4, xsum16;
  std::vector<int32_t> neg8sum4;
};

Quantized quantize(const std::vector<float>& x) {
  const int64_t K = static_cast<int64_t>(x.size());
  Quantized r;
  r.q.resize(K);
  r.scale4.resize(K / 4);
  r.xsum16.resize(K / 16);
  r.neg8sum4.resize(K / 4);
  for (int64_t b = 0; b < K; b += 32) {
    float amax = 0;
    for (int64_t k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float inv = amax > 0 ? 127 / amax : 0;
    for (int64_t k = b; k < b + 32; ++k) r.q[k] = static_cast<int8_t>(std::nearbyint(x[k] * inv));
    for (int64_t j = b / 4; j < b / 4 + 8; ++j) r.scale4[j] = amax / 127;
  }
  for (int64_t j = 0; j < K / 4; ++j) r.neg8sum4[j] = -8 * (r.q[4 * j] + r.q[4 * j + 1] + r.q[4 * j + 2] + r.q[4 * j + 3]);
  return r;
}

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
  std::uniform_real_distribution<float> uni(-2.f, 2.f);
  std::vector<float> x(K);
  for (auto& v : x) v = uni(rng);
  const Quantized xq = quantize(x);
  XRow xr{x.data(), nullptr, nullptr, K};
  xr.q_s8 = xq.q.data();
  xr.q_scale4 = xq.scale4.data();
  xr.q_neg8sum4 = xq.neg8sum4.data();
  WeightRows w;
  w.dtype = DType::Q4_0;
  w.data = bytes.data();
  w.row_bytes = K / 32 * block_bytes;
  w.rows = N;
  w.cols = K;
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

bool has_kernels() { return active_isa() == Isa::Avx512 && has_avx512_vnni(); }

TEST(GemmGgmlRows, Q4_0MatchesScalarReference) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  uint32_t seed = 100;
  for (int64_t N : {1, 3, 4, 5, 16, 23})
    for (int64_t K : {32, 288, 1056}) check(N, K, seed++);
}

// Through host::matmul: the AVX-512 GEMV (the Q4_0 row kernel, the Q8_0 dot) and the AVX2
// one-row dots agree to f32 rounding, both from the same quantized x.
TEST(GemmGgmlRows, MatmulAgreesWithAvx2Path) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  const Isa best = active_isa();
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    std::mt19937 rng(7);
    const int64_t N = 37, K = 320;
    Tensor w = Tensor::empty({N, K}, t);
    auto* bytes = reinterpret_cast<uint8_t*>(w.raw());
    const int64_t block_bytes = t == DType::Q8_0 ? 34 : 18;
    for (int64_t i = 0; i < w.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
    for (int64_t b = 0; b < N * K / 32; ++b) {
      const uint16_t d = 0x2000 | (rng() & 1023);
      std::memcpy(bytes + b * block_bytes, &d, 2);
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

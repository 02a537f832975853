// GGML Q5_0 weights (f16 d; u32 qh, bit i the fifth bit of value i; 16 bytes holding the low 4
// bits of values i (low nibble) and i + 16 (high); stored plus 16). Every value is d times an
// integer in [-16, 15], so a Q5_0 matrix equals its q8_0 form (the same d, q - 16 as int8), and
// the Q8_0 kernels are the reference: the decode (dequantize_row, the AVX-512 row kernel and
// one-row dot, the AVX2 dot, the scalar path) and the prefill GEMM (the int8 VNNI tile, or the
// dequantizing f32 GEMM without VNNI) must give the same bits on both. Random blocks include
// d = 0, negative and subnormal d, all-low (-16) and all-high (15) blocks; row counts that leave
// a one-row remainder and do not split evenly over threads; block counts with a tail.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "host/gemm.h"
#include "host/matmul.h"
#include "ggml_test_reference.h"

using namespace xdna;
using namespace xdna::host;

namespace {

constexpr int64_t kQ5 = 22, kQ8 = 34;

// Value j (0..31) of a Q5_0 block, read straight from the layout.
int q5_value(const uint8_t* p, int j) {
  const uint32_t qh = uint32_t(p[2]) | uint32_t(p[3]) << 8 | uint32_t(p[4]) << 16 | uint32_t(p[5]) << 24;
  const int nibble = j < 16 ? (p[6 + j] & 15) : (p[6 + j - 16] >> 4);
  return (nibble | int((qh >> j) & 1) << 4) - 16;
}

// The q8_0 form of Q5_0 blocks: the same d, each value as int8.
std::vector<uint8_t> as_q8_0(const std::vector<uint8_t>& q5) {
  const size_t blocks = q5.size() / kQ5;
  std::vector<uint8_t> q8(blocks * kQ8);
  for (size_t b = 0; b < blocks; ++b) {
    std::memcpy(&q8[b * kQ8], &q5[b * kQ5], 2);
    for (int j = 0; j < 32; ++j) q8[b * kQ8 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q5_value(&q5[b * kQ5], j)));
  }
  return q8;
}

std::vector<uint8_t> random_q5_0(int64_t N, int64_t K, std::mt19937& rng) {
  std::vector<uint8_t> bytes(N * K / 32 * kQ5);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < N * K / 32; ++b) {
    uint8_t* p = bytes.data() + b * kQ5;
    // Finite d of about 2^-8 .. 2^-5, either sign; every 7th zero, every 11th subnormal.
    uint16_t d = static_cast<uint16_t>(((rng() & 1) << 15) | ((7 + rng() % 4) << 10) | (rng() & 1023));
    if (b % 7 == 3) d = 0;
    if (b % 11 == 5) d = static_cast<uint16_t>(1 + rng() % 1023);
    std::memcpy(p, &d, 2);
    if (b % 5 == 1) std::memset(p + 2, 0, 20);     // every value -16
    if (b % 5 == 2) std::memset(p + 2, 0xFF, 20);  // every value 15
  }
  return bytes;
}

Tensor matrix(DType t, int64_t N, int64_t K, const std::vector<uint8_t>& bytes) {
  Tensor w = Tensor::empty({N, K}, t);
  EXPECT_EQ(w.nbytes(), static_cast<int64_t>(bytes.size()));
  std::memcpy(w.raw(), bytes.data(), bytes.size());
  return w;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

bool have_vnni() { return active_isa() == Isa::Avx512 && has_avx512_vnni(); }

TEST(Q5_0, DequantizesTheBlockLayout) {
  // d = 1; qh bits 0 and 31 set; qs[0] = 0x21 (value 0: nibble 1, value 16: nibble 2), qs[15] =
  // 0xF0 (value 15: nibble 0, value 31: nibble 15), every other nibble 0.
  uint8_t blk[kQ5] = {0x00, 0x3C, 0x01, 0x00, 0x00, 0x80, 0x21};
  blk[6 + 15] = 0xF0;
  float y[32];
  dequantize_row(DType::Q5_0, blk, y, 32);
  for (int j = 0; j < 32; ++j) {
    const float want = j == 0 ? 1.f : j == 16 ? -14.f : j == 31 ? 15.f : -16.f;
    EXPECT_EQ(y[j], want) << "value " << j;
  }
  // d = -0.5: the values scale and flip sign.
  blk[0] = 0x00, blk[1] = 0xB8;
  dequantize_row(DType::Q5_0, blk, y, 32);
  EXPECT_EQ(y[0], -0.5f);
  EXPECT_EQ(y[31], -7.5f);
  EXPECT_EQ(y[1], 8.f);
  EXPECT_EQ(traits(DType::Q5_0).block_bytes, kQ5);
  EXPECT_EQ(dtype_from_name("q5_0"), DType::Q5_0);
  EXPECT_THROW(dtype_bytes(DType::Q5_0, 48), std::invalid_argument);
}

TEST(Q5_0, DequantizeEqualsQ8_0Form) {
  std::mt19937 rng(11);
  const int64_t N = 3, K = 640;
  const std::vector<uint8_t> q5 = random_q5_0(N, K, rng), q8 = as_q8_0(q5);
  std::vector<float> a(N * K), b(N * K);
  dequantize_row(DType::Q5_0, q5.data(), a.data(), N * K);
  dequantize_row(DType::Q8_0, q8.data(), b.data(), N * K);
  for (int64_t i = 0; i < N * K; ++i) ASSERT_TRUE(same_bits(a[i], b[i])) << i << ": " << a[i] << " vs " << b[i];
}

// The row kernel, the one-row AVX-512 dot and the AVX2 dot against the Q8_0 row kernel on the
// q8_0 form, on the same quantized x: bit for bit.
TEST(Q5_0, RowKernelsBitIdenticalToQ8_0) {
  if (!have_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  using namespace ggml_ref;
  uint32_t seed = 700;
  for (int64_t N : {1, 3, 4, 5, 16, 23, 37})
    for (int64_t K : {32, 64, 96, 640, 1056}) {
      std::mt19937 rng(seed++);
      const std::vector<uint8_t> q5 = random_q5_0(N, K, rng), q8 = as_q8_0(q5);
      const std::vector<float> x = random_x(K, rng);
      const Quantized xq = quantize(x);
      const XRow xr = ggml_x(x, xq);
      const WeightRows w5{DType::Q5_0, q5.data(), K / 32 * kQ5, N, K}, w8{DType::Q8_0, q8.data(), K / 32 * kQ8, N, K};
      std::vector<float> o5(N), o8(N);
      for (int64_t n = 0; n < N; n += kGemvRows) {
        const int count = static_cast<int>(std::min<int64_t>(kGemvRows, N - n));
        rows_q5_0_avx512(w5, n, count, xr, o5.data() + n);
        rows_q8_0_avx512(w8, n, count, xr, o8.data() + n);
      }
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_TRUE(same_bits(o5[n], o8[n])) << "N=" << N << " K=" << K << " row " << n << ": " << o5[n] << " vs " << o8[n];
        const float one = avx512_kernels().dot_q5_0(w5.row(n), xr), avx2 = avx2_kernels().dot_q5_0(w5.row(n), xr);
        ASSERT_TRUE(same_bits(one, o8[n])) << "one-row dot, N=" << N << " K=" << K << " row " << n;
        ASSERT_TRUE(same_bits(avx2, o8[n])) << "AVX2 dot, N=" << N << " K=" << K << " row " << n;
      }
    }
}

// Through host::matmul at every ISA level: decode (M <= 4, the GEMV) and prefill (M > 4, the int8
// VNNI GEMM on AVX-512, the dequantizing f32 GEMM elsewhere), threaded, with a bias.
TEST(Q5_0, MatmulBitIdenticalToQ8_0AtEveryIsa) {
  const Isa best = active_isa();
  const int before = num_threads();
  set_num_threads(2);
  std::mt19937 rng(21);
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Scalar}) {
    if (isa > best) continue;
    force_isa(isa);
    for (int64_t M : {1, 3, 5, 37})
      for (auto [N, K] : {std::pair<int64_t, int64_t>{37, 96}, {45, 640}, {301, 1056}}) {
        const std::vector<uint8_t> q5 = random_q5_0(N, K, rng);
        const Tensor w5 = matrix(DType::Q5_0, N, K, q5), w8 = matrix(DType::Q8_0, N, K, as_q8_0(q5));
        std::vector<float> xv(M * K), bv(N);
        std::uniform_real_distribution<float> uni(-2.f, 2.f);
        for (auto& v : xv) v = uni(rng);
        for (auto& v : bv) v = uni(rng);
        const Tensor x = Tensor::from_vector({M, K}, xv), bias = Tensor::from_vector({N}, bv);
        const std::vector<float> y5 = host::matmul(x, w5, &bias).to_vector(), y8 = host::matmul(x, w8, &bias).to_vector();
        for (int64_t i = 0; i < M * N; ++i)
          ASSERT_TRUE(same_bits(y5[i], y8[i])) << "isa " << int(isa) << " M=" << M << " N=" << N << " K=" << K
                                               << " y[" << i << "]: " << y5[i] << " vs " << y8[i];
      }
  }
  force_isa(best);
  set_num_threads(before);
}

TEST(Q5_0, PrefillTakesTheInt8Gemm) {
  if (!have_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::vector<uint8_t> bytes(2 * 64 / 32 * kQ5);
  EXPECT_TRUE(use_ggml_vnni_gemm(WeightRows{DType::Q5_0, bytes.data(), 64 / 32 * kQ5, 2, 64}));
}

}  // namespace

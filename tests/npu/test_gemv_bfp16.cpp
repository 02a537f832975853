// aie_kernels/gemv_bfp16.cc against the host bfp16ebs8 numerics npu-sim's bfp16 matmul runs
// (aie::gemm_bfp16 over aie_numerics.h's mmul_bfp16_888, x packed as row 0 of an 8-row A):
// bit for bit, for row counts that are and are not multiples of 8, and for blocks of very
// different scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "aie_kernels/kernels.h"
#include "core/numeric.h"
#include "npu/aie_kernels.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/design_families.h"

namespace xdna::aie {
namespace {

// What npu-sim's MatmulBfp16 path computes for one row of activations (M = 1): x encoded by
// pack_bfp16_a as row 0 of 8, W's row-major blocks copied into B's [N/8][K/8] sub-blocks.
std::vector<uint16_t> sim_reference(const std::vector<float>& W, const std::vector<float>& x, int64_t rows, int64_t K) {
  const int64_t Np = (rows + 7) / 8 * 8, kb = K / 8;
  std::vector<float> xa(static_cast<size_t>(8 * K), 0.0f);
  std::copy(x.begin(), x.end(), xa.begin());
  std::vector<uint8_t> a(static_cast<size_t>(kb * 72));
  pack_bfp16_a(xa.data(), 8, K, a.data());
  std::vector<uint8_t> wrow(static_cast<size_t>(rows * kb * 9)), b(static_cast<size_t>(Np * kb * 9), 0);
  bfp16_encode(W.data(), rows * K, wrow.data());
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t blk = 0; blk < kb; ++blk)
      std::memcpy(&b[size_t((((j / 8) * kb + blk) * 8 + j % 8) * 9)], &wrow[size_t((j * kb + blk) * 9)], 9);
  std::vector<float> c(static_cast<size_t>(8 * Np), 0.0f);
  gemm_bfp16(a.data(), b.data(), c.data(), 8, K, Np);
  std::vector<uint16_t> y(static_cast<size_t>(rows));
  for (int64_t j = 0; j < rows; ++j) y[size_t(j)] = to_bf16(c[size_t(j)], Rounding::NearestEven).bits;
  return y;
}

void check_bit_exact(int64_t rows, int64_t K, uint32_t seed, bool wild_scales) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> W(static_cast<size_t>(rows * K)), x(static_cast<size_t>(K));
  for (size_t i = 0; i < W.size(); ++i) W[i] = nd(rng) * (wild_scales ? std::ldexp(1.0f, int(i / 8 % 40) - 20) : 1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (wild_scales ? std::ldexp(1.0f, 15 - int(i / 8 % 30)) : 1.0f);
  if (rows > 1)
    for (int64_t k = 0; k < K; ++k) W[size_t(K + k)] = 0.0f;  // an all-zero row
  std::vector<uint8_t> wq(static_cast<size_t>(rows * K / 8 * 9)), xq(static_cast<size_t>(K / 8 * 9));
  bfp16_encode(W.data(), rows * K, wq.data());
  bfp16_encode(x.data(), K, xq.data());

  std::vector<bf16> y(static_cast<size_t>(rows));
  gemv_bfp16(wq.data(), xq.data(), y.data(), rows, K, Rounding::NearestEven);
  std::vector<xk::bf16> y_entry(static_cast<size_t>(rows));  // the entry point design.py calls
  ::gemv_bfp16(wq.data(), xq.data(), y_entry.data(), int32_t(K), int32_t(rows));
  const std::vector<uint16_t> want = sim_reference(W, x, rows, K);
  int nonzero = 0;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(y[size_t(r)].bits, want[size_t(r)]) << "row " << r << " of " << rows << ", K " << K;
    EXPECT_EQ(y_entry[size_t(r)].bits, want[size_t(r)]) << "row " << r;
    nonzero += y[size_t(r)].bits != 0;
  }
  EXPECT_GE(nonzero, rows - 1);  // every row but the zero one
  // And close to the f32 dot product of the decoded operands (the mantissas truncate: ~2^-6).
  std::vector<float> wd(W.size()), xd(x.size());
  bfp16_decode(wq.data(), int64_t(W.size()), wd.data());
  bfp16_decode(xq.data(), K, xd.data());
  if (!wild_scales)
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) dot += double(wd[size_t(r * K + k)]) * xd[size_t(k)], mag += std::fabs(double(wd[size_t(r * K + k)]) * xd[size_t(k)]);
      EXPECT_NEAR(to_float(y[size_t(r)]), dot, 1e-2 * mag + 1e-6) << "row " << r;
    }
}

TEST(GemvBfp16, MatchesTheSimulatorsBfp16MatmulBitForBit) {
  check_bit_exact(32, 256, 1, false);
  check_bit_exact(20, 512, 2, false);  // a partial group of 8 rows
  check_bit_exact(4, 64, 3, false);    // the smallest gemv chunk
  check_bit_exact(24, 320, 4, true);   // blocks 2^-20 .. 2^20 apart: rounding order matters
}

TEST(GemvBfp16, NanBlockGivesNanAndBadKIsRefused) {
  std::vector<float> W(16 * 8, 1.0f), x(16, 1.0f);
  W[3] = std::nanf("");
  std::vector<uint8_t> wq(8 * 2 * 9), xq(2 * 9);
  bfp16_encode(W.data(), 128, wq.data());
  bfp16_encode(x.data(), 16, xq.data());
  std::vector<bf16> y(8);
  gemv_bfp16(wq.data(), xq.data(), y.data(), 8, 16, Rounding::NearestEven);
  EXPECT_TRUE(std::isnan(to_float(y[0])));
  EXPECT_EQ(to_float(y[1]), 16.0f);
  EXPECT_THROW(gemv_bfp16(wq.data(), xq.data(), y.data(), 8, 12, Rounding::NearestEven), std::invalid_argument);
}

TEST(GemvBfp16, GemvDesignUsesTheWrittenSource) {
  const npu::Design d = npu::gemv_design(DType::BFP16, 1024, 512, 2);
  EXPECT_TRUE(npu::missing_kernels(d).empty());
  EXPECT_EQ(npu::kernel_sources(d), std::vector<std::string>{"aie_kernels/gemv_bfp16.cc"});
  EXPECT_NE(npu::emit_iron(d).find("Kernel(\"gemv_bfp16\", \"gemv_bfp16.o\""), std::string::npos);
}

}  // namespace
}  // namespace xdna::aie

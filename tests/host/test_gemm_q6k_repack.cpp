// The repacked Q6_K GEMV (gemm_q6k_avx512.cpp): the repacked layout decoded by a scalar reader
// written from its description gives back every value and scale of the GGML block; the kernel on
// repacked rows matches a double reference on the GGML rows (the same int8-quantized x) within
// 1e-6 of Σ|terms| (its integer sub-block sums are exact; only f32 rounding differs), and the
// GGML-layout row kernel to the same bound; through host::matmul, mapped weights are repacked
// once (and still agree) while heap weights are left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "core/cpu.h"
#include "core/numeric.h"
#include "host/gemm.h"
#include "host/matmul.h"
#include "ggml_test_reference.h"

using namespace xdna;
using namespace xdna::host;

namespace {

using namespace ggml_ref;

// The repacked super-block read as the layout comment in gemm_q6k_avx512.cpp states it: byte p
// of group g holds value 16·s + 4g + p % 4, s = 4·(j % 4) + j / 4 with j = p / 4.
void repacked_values(const uint8_t* p, int* v, int* scale) {
  for (int g = 0; g < 4; ++g)
    for (int b = 0; b < 64; ++b) {
      const int j = b / 4, s = 4 * (j % 4) + j / 4, next = (b & ~7) | ((b + 1) & 7);
      const uint8_t l = p[64 * (g / 2) + b];
      const int low = g % 2 ? l >> 4 : l & 15;
      const int shift[4] = {6, 2, 4, 0};
      const uint8_t h = p[128 + (g % 2 ? next : b)];
      v[16 * s + 4 * g + b % 4] = low | ((h >> shift[g]) & 3) << 4;
    }
  for (int j = 0; j < 16; ++j) scale[4 * (j % 4) + j / 4] = static_cast<int8_t>(p[192 + j]);
}

std::vector<uint8_t> repacked(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> out(bytes.size());
  repack_q6_k_blocks(bytes.data(), out.data(), static_cast<int64_t>(bytes.size() / 210));
  return out;
}

bool has_kernels() { return active_isa() == Isa::Avx512 && has_avx512_vnni(); }

TEST(GemmQ6kRepack, LayoutKeepsEveryValueAndScale) {
  // The repack is compiled with the AVX-512 kernels (and runs only where they do).
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(1);
  const std::vector<uint8_t> bytes = random_q6_k(3, 512, rng);
  const std::vector<uint8_t> rp = repacked(bytes);
  ASSERT_EQ(rp.size(), bytes.size());  // the same bytes per super-block
  for (size_t blk = 0; blk < bytes.size() / 210; ++blk) {
    const uint8_t* g = bytes.data() + blk * 210;
    int v[256], sc[16];
    repacked_values(rp.data() + blk * 210, v, sc);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(v[i], q6_k_quant(g, i)) << "block " << blk << " value " << i;
    for (int s = 0; s < 16; ++s) ASSERT_EQ(sc[s], static_cast<int8_t>(g[192 + s])) << "block " << blk << " scale " << s;
    ASSERT_EQ(std::memcmp(rp.data() + blk * 210 + 208, g + 208, 2), 0);  // d
  }
}

void check(const std::vector<uint8_t>& bytes, int64_t N, int64_t K, const std::vector<float>& x) {
  const std::vector<uint8_t> rp = repacked(bytes);
  const Quantized xq = quantize(x);
  const XRow xr = ggml_x(x, xq);
  const WeightRows g{DType::Q6_K, bytes.data(), K / 256 * 210, N, K};
  WeightRows w = g;
  w.data = rp.data();
  w.q6_k_repacked = true;
  std::vector<float> out(N), ggml(N);
  for (int64_t n = 0; n < N; n += kGemvRows) {
    const int count = static_cast<int>(std::min<int64_t>(kGemvRows, N - n));
    rows_q6_k_repacked_avx512(w, n, count, xr, out.data() + n);
    rows_q6_k_avx512(g, n, count, xr, ggml.data() + n);
  }
  for (int64_t n = 0; n < N; ++n) {
    double mag;
    const double ref = reference_q6_k(g.row(n), xq, K, &mag);
    ASSERT_NEAR(out[n], ref, 1e-6 * mag) << "N=" << N << " K=" << K << " row " << n;
    ASSERT_NEAR(out[n], ggml[n], 1e-6 * mag) << "GGML-layout kernel, N=" << N << " K=" << K << " row " << n;
    ASSERT_NEAR(ggml[n], ref, 1e-6 * mag) << "GGML-layout kernel vs reference, N=" << N << " K=" << K << " row " << n;
  }
}

TEST(GemmQ6kRepack, MatchesDoubleReference) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  uint32_t seed = 300;
  for (int64_t N : {1, 2, 4, 7, 16, 21, 37})  // groups of four and a remainder
    for (int64_t K : {256, 768, 1024, 1280}) {
      std::mt19937 rng(seed++);
      const std::vector<uint8_t> bytes = random_q6_k(N, K, rng);
      std::uniform_real_distribution<float> uni(-2.f, 2.f);
      std::vector<float> x(K);
      for (auto& v : x) v = uni(rng);
      check(bytes, N, K, x);
    }
}

// All-extreme quants (0 and 63), scales -128 / 127 and x at ±127, for both layouts' kernels: the
// int32 sub-block sums (no overflow in vpdpbusd, nothing lost in the bit decode) and their
// products with the scales stay exact (|Σ(q-32)·x̂·scale| <= 16·32·127·128 < 2^24).
TEST(GemmQ6kRepack, ExtremeValues) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  const int64_t N = 5, K = 512;
  for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0xa5}}) {
    std::vector<uint8_t> bytes = extreme_q6_k(N, K, fill);
    std::vector<float> x(K);
    for (int64_t k = 0; k < K; ++k) x[k] = k % 3 ? 1.f : -1.f;
    check(bytes, N, K, x);
  }
}

// Through host::matmul (the decode GEMV): mapped Q6_K weights are repacked once and agree with
// the same weights on the heap (not repacked: the GGML-layout kernel) to f32 rounding.
TEST(GemmQ6kRepack, MatmulRepacksMappedWeights) {
  if (!has_kernels()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(9);
  const int64_t N = 45, K = 1024;
  Tensor w = Tensor::empty({N, K}, DType::Q6_K);
  const std::vector<uint8_t> q6 = random_q6_k(N, K, rng);
  std::memcpy(w.raw(), q6.data(), q6.size());
  const std::string path = ::testing::TempDir() + "xdna_q6k_repack";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(q6.data(), 1, q6.size(), f);
  std::fclose(f);
  auto file = std::make_shared<MappedFile>(path);
  std::remove(path.c_str());  // the mapping stays valid
  const Tensor mw = Tensor::view(file, 0, {N, K}, DType::Q6_K);

  std::vector<float> xv(K);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto& v : xv) v = uni(rng);
  const Tensor x = Tensor::from_vector({1, K}, xv);
  const std::vector<float> heap = host::matmul(x, w).to_vector();
  std::shared_ptr<const PackedWeights> hold;
  const WeightRows wr{DType::Q6_K, reinterpret_cast<const uint8_t*>(w.raw()), K / 256 * 210, N, K};
  EXPECT_FALSE(q6_k_repacked_rows(w, wr, hold).q6_k_repacked);  // writable: left alone
  EXPECT_EQ(hold, nullptr);
  for (int pass = 0; pass < 2; ++pass) {  // repacks, then from the cache
    const std::vector<float> mapped = host::matmul(x, mw).to_vector();
    for (int64_t n = 0; n < N; ++n) ASSERT_NEAR(mapped[n], heap[n], 1e-4 * (1 + std::fabs(heap[n]))) << "row " << n;
  }
  const WeightRows mr{DType::Q6_K, reinterpret_cast<const uint8_t*>(mw.raw()), K / 256 * 210, N, K};
  const WeightRows view = q6_k_repacked_rows(mw, mr, hold);
  EXPECT_TRUE(view.q6_k_repacked);
  EXPECT_NE(view.data, mr.data);
  std::shared_ptr<const PackedWeights> again;
  q6_k_repacked_rows(mw, mr, again);
  EXPECT_EQ(again, hold);  // one copy, cached
  // The mapping's pages were released, not the data: the original bytes still read back.
  EXPECT_EQ(std::memcmp(mw.raw(), q6.data(), q6.size()), 0);
  clear_packed_weight_cache();
}

}  // namespace

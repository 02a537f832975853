// aie_kernels/matmul_bfp16.cc (the bfp16 GEMM core kernel npu-sim runs) against the host loop
// npu-sim ran before the kernel was written (kept below as the reference): bit for bit, through
// the simulator's adapter (aie::gemm_bfp16) and through the extern "C" entry point called as the
// emitted design.py calls it (one k-slice of 64 per call, the tile's accumulator in L1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <random>
#include <stdexcept>
#include <vector>

#include "aie_kernels/kernels.h"
#include "core/numeric.h"
#include "npu/aie_kernels.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/design_families.h"

namespace xdna::aie {
namespace {

namespace fs = std::filesystem;

// The host-written bfp16 GEMM npu-sim ran before matmul_bfp16.cc: C (row-major f32) += A B,
// per 8 x 8 tile of C its lanes loaded into the mmul, the k sub-blocks in increasing k.
void reference_gemm(const uint8_t* A, const uint8_t* B, float* C, int64_t m, int64_t k, int64_t n) {
  const int64_t kb = k / 8, tile = 72;
  for (int64_t i = 0; i < m / 8; ++i)
    for (int64_t j = 0; j < n / 8; ++j) {
      mmul_bfp16_888 mm;
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) mm.c.lane[size_t(r * 8 + c)] = C[(i * 8 + r) * n + j * 8 + c];
      for (int64_t b = 0; b < kb; ++b) mm.mac(A + (i * kb + b) * tile, B + (j * kb + b) * tile);
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) C[(i * 8 + r) * n + j * 8 + c] = mm.c.lane[size_t(r * 8 + c)];
    }
}

struct Operands {
  int64_t m, k, n;
  std::vector<uint8_t> A, B;  // pack_bfp16_a / pack_bfp16_b layouts
  std::vector<float> C0;      // C before the call
};

// Normal values; `wild` spreads the blocks' scales over 2^-20 .. 2^20 (rounding order matters),
// and puts a zero block, a NaN and an infinity in.
Operands make(int64_t m, int64_t k, int64_t n, uint32_t seed, bool wild) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(size_t(m * k)), b(size_t(k * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = nd(rng) * (wild ? std::ldexp(1.0f, int(i / 8 % 41) - 20) : 1.0f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = nd(rng) * (wild ? std::ldexp(1.0f, 20 - int(i % 37)) : 1.0f);
  if (wild) {
    for (int t = 0; t < 8; ++t) a[size_t(t)] = 0.0f;
    if (m > 8) a[size_t(8 * k + 3)] = std::nanf("");
    if (n > 8) b[size_t(9)] = INFINITY;
  }
  Operands o{m, k, n, std::vector<uint8_t>(size_t(m * k / 8 * 9)), std::vector<uint8_t>(size_t(k * n / 8 * 9)),
             std::vector<float>(size_t(m * n))};
  pack_bfp16_a(a.data(), m, k, o.A.data());
  pack_bfp16_b(b.data(), k, n, o.B.data());
  for (float& c : o.C0) c = wild ? nd(rng) * 1e3f : 0.0f;
  return o;
}

bool same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4), std::memcpy(&y, &b, 4);
  return x == y;
}

TEST(AieMatmulBfp16, AdapterEqualsTheHostLoopBitForBit) {
  int shapes = 0;
  for (int64_t m : {8, 16, 40})
    for (int64_t k : {8, 24, 64, 200})
      for (int64_t n : {8, 32, 56})
        for (bool wild : {false, true}) {
          const Operands o = make(m, k, n, uint32_t(m * 1000 + k * 10 + n), wild);
          std::vector<float> want = o.C0, got = o.C0;
          reference_gemm(o.A.data(), o.B.data(), want.data(), m, k, n);
          gemm_bfp16(o.A.data(), o.B.data(), got.data(), m, k, n);
          int differ = 0;
          for (size_t i = 0; i < want.size(); ++i) differ += !same_bits(want[i], got[i]);
          EXPECT_EQ(differ, 0) << m << "x" << k << "x" << n << (wild ? " wild" : "");
          ++shapes;
        }
  EXPECT_EQ(shapes, 72);
}

// The k-slice [s*64, s*64 + 64) of a packed operand ([rows/8][k/8] sub-blocks of 72 bytes).
std::vector<uint8_t> k_slice(const std::vector<uint8_t>& p, int64_t rows, int64_t k, int64_t s) {
  const int64_t kb = k / 8;
  std::vector<uint8_t> out(size_t(rows / 8 * 8 * 72));
  for (int64_t g = 0; g < rows / 8; ++g)
    std::memcpy(&out[size_t(g * 8 * 72)], &p[size_t((g * kb + s * 8) * 72)], 8 * 72);
  return out;
}

// One tile through the entry point as design.py calls it (k_blocks calls of a 64-wide k-slice)
// against the host loop from zero, stored to bf16 rounding to nearest even.
void check_entry_point(int64_t m, int64_t K, int64_t n, uint32_t seed, bool wild) {
  Operands o = make(m, K, n, seed, wild);
  std::vector<float> want(size_t(m * n), 0.0f);
  reference_gemm(o.A.data(), o.B.data(), want.data(), m, K, n);
  const int64_t kb = K / 64;
  std::vector<xk::bf16> C(size_t(m * n), xk::bf16{0x7fc1});  // untouched until the last slice
  for (int64_t s = 0; s < kb; ++s) {
    const std::vector<uint8_t> a = k_slice(o.A, m, K, s), b = k_slice(o.B, n, K, s);
    ::matmul_bfp16(a.data(), b.data(), C.data(), 64, int32_t(kb), int32_t(m), int32_t(n));
    if (s + 1 < kb) {
      ASSERT_EQ(C[0].bits, 0x7fc1) << "C written before the last k-slice";
    }
  }
  int differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += C[i].bits != to_bf16(want[i], Rounding::NearestEven).bits;
  EXPECT_EQ(differ, 0) << m << "x" << K << "x" << n << (wild ? " wild" : "");
}

TEST(AieMatmulBfp16, EntryPointAccumulatesTheKSlicesOfATileBitForBit) {
  check_entry_point(8, 64, 8, 1, false);
  check_entry_point(16, 256, 24, 2, false);
  check_entry_point(104, 192, 64, 3, true);  // the largest bfp16 tile the gemm design picks
  check_entry_point(80, 128, 80, 6, false);
  check_entry_point(40, 512, 16, 4, true);
  check_entry_point(24, 128, 72, 5, false);  // the state restarts for the next tile
}

TEST(AieMatmulBfp16, GemmDesignTilesFitTheKernelsAccumulator) {
  int64_t largest = 0;
  for (int64_t M : {8, 64, 512, 4096})
    for (int64_t N : {64, 1024, 151936})
      for (int cols : {1, 4}) {
        const npu::Design d = npu::gemm_design(DType::BFP16, M, 1024, N, cols, 1);
        const int64_t m = d.params.at("m"), n = d.params.at("n");
        EXPECT_EQ(m % 8, 0);
        EXPECT_EQ(n % 8, 0);
        EXPECT_LE(m * n, xk_impl::MatmulBfp16State::kMaxAcc) << d.name;
        largest = std::max(largest, m * n);
      }
  EXPECT_EQ(largest, xk_impl::MatmulBfp16State::kMaxAcc);  // the bound is a tile the design picks
}

TEST(AieMatmulBfp16, GemmDesignCallsTheWrittenEntryPointWithItsArity) {
  const npu::Design d = npu::gemm_design(DType::BFP16, 64, 256, 64, 2, 2);
  EXPECT_TRUE(npu::missing_kernels(d).empty());
  EXPECT_EQ(npu::kernel_sources(d), std::vector<std::string>{"aie_kernels/matmul_bfp16.cc"});
  const std::string py = npu::emit_iron(d);
  const size_t at = py.find("Kernel(\"matmul_bfp16\", \"matmul_bfp16.o\", [");
  ASSERT_NE(at, std::string::npos) << py;
  const std::string decl = py.substr(at, py.find('\n', at) - at);
  auto count = [&](const std::string& what) {
    int n = 0;
    for (size_t p = decl.find(what); p != std::string::npos; p = decl.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("np.ndarray"), 3) << decl;  // A, B, C
  EXPECT_EQ(count("np.int32"), 4) << decl;    // k, k_blocks, m, n
  // The scalars in name order: k = 64, k_blocks = 256 / 64, then m and n.
  const std::string tail = ", 64, 4, " + std::to_string(d.params.at("m")) + ", " + std::to_string(d.params.at("n")) + ")";
  EXPECT_NE(py.find(tail), std::string::npos) << py;
}

// Built for the cores the accumulator is the design's tile: the Makefile passes -DDIM_M/K/N.
TEST(AieMatmulBfp16, MakefileBuildsTheKernelForTheDesignsTile) {
  const npu::Design d = npu::gemm_design(DType::BFP16, 4096, 512, 8, 1, 1);  // a skinny tile
  const fs::path dir = fs::temp_directory_path() / ("xdna_matmul_bfp16_" + std::to_string(::getpid()));
  npu::emit_design_dir(d, dir.string());
  std::stringstream mk;
  mk << std::ifstream(dir / "Makefile").rdbuf();
  fs::remove_all(dir);
  const std::string text = mk.str(), rule = "matmul_bfp16.o: $(XDNA_KERNELS)/matmul_bfp16.cc\n";
  const size_t at = text.find(rule);
  ASSERT_NE(at, std::string::npos) << text;
  const std::string cmd = text.substr(at + rule.size(), text.find('\n', at + rule.size()) - at - rule.size());
  EXPECT_NE(cmd.find(" -DDIM_M=" + std::to_string(d.params.at("m")) + " -DDIM_K=64 -DDIM_N=" +
                     std::to_string(d.params.at("n")) + " "),
            std::string::npos)
      << cmd;
}

TEST(AieMatmulBfp16, BadShapesAreRefused) {
  std::vector<uint8_t> A(2 * 72), B(2 * 72);
  std::vector<float> C(64);
  EXPECT_THROW(gemm_bfp16(A.data(), B.data(), C.data(), 8, 12, 8), std::invalid_argument);
  EXPECT_THROW(gemm_bfp16(A.data(), B.data(), C.data(), 0, 8, 8), std::invalid_argument);
  EXPECT_THROW(gemm_bfp16(A.data(), B.data(), C.data(), 8, 8, 6), std::invalid_argument);
}

}  // namespace
}  // namespace xdna::aie

// The AIE core kernel sources in aie_kernels/ (npu: needs hardware and the toolchain, unverified
// here). Three checks that need neither:
//  1. parse level: every kernel symbol the emitted design.py files declare (Kernel("sym", ...))
//     is an mlir-aie library kernel, or has a source aie_kernels/<kernel>.cc defining
//     extern "C" <sym>(, or is on the emitter's "missing kernels" list; the emitter's list of
//     written kernels is exactly the directory's sources, and the README lists each;
//  2. host build: the shared header and the sources compile with g++ (they are built into xdna_npu);
//  3. numerics: built on the host, each source computes bit for bit what the simulator's kernel
//     (src/npu/aie_kernels.cpp) computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "npu/aie_kernels.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/design_families.h"

// The sources as the cores would get them, built into xdna_npu against the host mapping.
#include "aie_kernels/kernels.h"

namespace fs = std::filesystem;
using namespace xdna;
using namespace xdna::npu;

namespace {

const fs::path kDir = fs::path(XDNA_FIXTURE_DIR) / ".." / ".." / "aie_kernels";

std::string read(const fs::path& p) {
  std::stringstream s;
  s << std::ifstream(p).rdbuf();
  return s.str();
}

// Designs of every family the emitter handles, at small shapes.
std::vector<Design> designs() {
  DecodeLayerShape s;
  s.hidden = 256, s.heads = 4, s.kv_heads = 2, s.head_dim = 64, s.intermediate = 512, s.context = 16;
  s.qk_norm = true;
  std::vector<Design> ds;
  for (DType t : {DType::BF16, DType::BFP16, DType::I8}) {
    ds.push_back(gemv_design(t, 256, 256, 1));
    ds.push_back(gemm_design(t, 64, 256, 64, 2, 2));
    ds.push_back(decode_layer_design(t, s, 2));
    ds.push_back(lm_head_design(t, 4096, 256, 2));
  }
  for (const char* op : {"silu", "gelu", "exp", "scale", "add", "mul"}) ds.push_back(elementwise_design(op, 4096, 1));
  ds.push_back(norm_design(NormKind::RMS, 4, 256, 1));
  ds.push_back(norm_design(NormKind::Layer, 4, 256, 1));
  ds.push_back(softmax_design(4, 256, 1));
  return ds;
}

std::vector<aie::bf16> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<aie::bf16> v(n);
  for (auto& x : v) x = aie::to_bf16(d(g), aie::Rounding::NearestEven);
  return v;
}

bool same_bits(const std::vector<aie::bf16>& a, const std::vector<aie::bf16>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bits != b[i].bits) return false;
  return true;
}

}  // namespace

TEST(AieKernelSources, EveryEmittedKernelHasASourceWithItsSymbol) {
  const std::regex decl("Kernel\\(\"([^\"]+)\", \"([^\"]+)\\.o\"");
  std::set<std::string> checked;
  for (const Design& d : designs()) {
    const std::string py = emit_iron(d);
    const std::vector<std::string> missing = missing_kernels(d);
    size_t n = 0;
    for (std::sregex_iterator it(py.begin(), py.end(), decl), end; it != end; ++it, ++n) {
      const std::string sym = (*it)[1], kernel = (*it)[2];
      // Library kernels: the comment above the declaration names mlir-aie's source.
      const size_t line = py.rfind("# kernel source:", size_t(it->position()));
      ASSERT_NE(line, std::string::npos) << d.name << " " << sym;
      const std::string comment = py.substr(line, py.find('\n', line) - line);
      if (comment.find("# kernel source: mlir-aie ") == 0) continue;
      const std::string src = "aie_kernels/" + kernel + ".cc";
      if (std::find(missing.begin(), missing.end(), src) != missing.end()) {
        EXPECT_NE(comment.find("not yet written"), std::string::npos) << comment;
        EXPECT_FALSE(fs::exists(kDir / (kernel + ".cc"))) << kernel << " exists but the emitter says missing";
        continue;
      }
      ASSERT_TRUE(fs::exists(kDir / (kernel + ".cc"))) << d.name << ": " << src << " (symbol " << sym << ")";
      const std::string text = read(kDir / (kernel + ".cc"));
      EXPECT_TRUE(std::regex_search(text, std::regex("extern \"C\" void " + sym + "\\(")))
          << src << " does not define extern \"C\" void " << sym << "(";
      checked.insert(sym);
    }
    EXPECT_GT(n, 0u) << d.name;
  }
  // The written sources the designs above reach (the decode layer / LM head / softmax / norm
  // kernels of the fused designs are not written yet: their names are on the missing list).
  for (const char* s : {"gemv_bf16", "gemv_int8", "rmsnorm_bf16", "eltwise_add_bf16", "eltwise_mul_bf16",
                        "eltwise_gelu_bf16", "eltwise_exp_bf16", "eltwise_scale_bf16"})
    EXPECT_TRUE(checked.count(s)) << s;
}

TEST(AieKernelSources, WrittenListMatchesTheDirectoryAndReadme) {
  std::set<std::string> on_disk;
  for (const auto& e : fs::directory_iterator(kDir))
    if (e.path().extension() == ".cc") on_disk.insert(e.path().stem().string());
  EXPECT_EQ(on_disk, written_kernels());
  const std::string readme = read(kDir / "README.md");
  for (const std::string& k : on_disk) {
    EXPECT_NE(readme.find("`" + k + ".cc`"), std::string::npos) << "README does not list " << k;
    // Each source carries the label and names its numerical reference.
    const std::string text = read(kDir / (k + ".cc"));
    EXPECT_NE(text.find("npu (needs hardware and the toolchain, unverified here)"), std::string::npos) << k;
    EXPECT_NE(text.find("Numerical reference"), std::string::npos) << k;
  }
  EXPECT_NE(readme.find("npu (needs hardware and the toolchain, unverified here)"), std::string::npos);
}

TEST(AieKernelSources, GemvSourcesMatchTheSimulatorBitForBit) {
  const int32_t K = 256, rows = 8;
  const auto W = random_bf16(size_t(K) * rows, 1), x = random_bf16(size_t(K), 2);
  std::vector<aie::bf16> y_src(rows), y_sim(rows);
  gemv_bf16(W.data(), x.data(), y_src.data(), K, rows);
  aie::gemv_bf16(W.data(), x.data(), y_sim.data(), rows, K, aie::Rounding::NearestEven);
  EXPECT_TRUE(same_bits(y_src, y_sim));

  std::mt19937 g(3);
  std::vector<int8_t> Wi(static_cast<size_t>(K) * rows), xi(static_cast<size_t>(K)), yi_src(rows), yi_sim(rows);
  for (auto& v : Wi) v = int8_t(int(g() % 256) - 128);
  for (auto& v : xi) v = int8_t(int(g() % 256) - 128);
  for (int shift : {0, 7, 12}) {
    gemv_int8(Wi.data(), xi.data(), yi_src.data(), K, rows, shift);
    aie::gemv_int8(Wi.data(), xi.data(), yi_sim.data(), rows, K, shift, aie::Rounding::NearestEven);
    EXPECT_EQ(yi_src, yi_sim) << "shift " << shift;
  }
}

TEST(AieKernelSources, ElementwiseAndNormSourcesMatchTheSimulator) {
  const int32_t n = 200;  // not a multiple of 16: the RMSNorm tail
  const auto a = random_bf16(size_t(n), 4, 2.0f), b = random_bf16(size_t(n), 5, 2.0f);
  std::vector<aie::bf16> src(n), sim(n);
  const auto rne = aie::Rounding::NearestEven;
  eltwise_add_bf16(a.data(), b.data(), src.data(), n);
  aie::add_bf16(a.data(), b.data(), sim.data(), n, rne);
  EXPECT_TRUE(same_bits(src, sim)) << "add";
  eltwise_mul_bf16(a.data(), b.data(), src.data(), n);
  aie::mul_bf16(a.data(), b.data(), sim.data(), n, rne);
  EXPECT_TRUE(same_bits(src, sim)) << "mul";
  eltwise_gelu_bf16(a.data(), src.data(), n);
  aie::gelu_tanh_bf16(a.data(), sim.data(), n, rne);
  EXPECT_TRUE(same_bits(src, sim)) << "gelu";
  eltwise_exp_bf16(a.data(), src.data(), n);
  for (int32_t i = 0; i < n; ++i) sim[size_t(i)] = aie::to_bf16(aie::exp_lut(aie::to_float(a[size_t(i)])), rne);
  EXPECT_TRUE(same_bits(src, sim)) << "exp";
  const float s = 0.125f;
  uint8_t s_bytes[4];
  std::memcpy(s_bytes, &s, 4);
  eltwise_scale_bf16(a.data(), s_bytes, src.data(), n);
  for (int32_t i = 0; i < n; ++i) EXPECT_EQ(aie::to_float(src[size_t(i)]), aie::to_float(a[size_t(i)]) * 0.125f);
  rmsnorm_bf16(a.data(), b.data(), src.data(), n);
  aie::rmsnorm_bf16(a.data(), b.data(), 0.0f, 1e-6f, sim.data(), n, rne);
  EXPECT_TRUE(same_bits(src, sim)) << "rmsnorm";
}

// The artifacts manifest: round trip and every rejection the runtime relies on.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "npu/artifacts/manifest.h"

namespace xdna::npu::artifacts {
namespace {

namespace fs = std::filesystem;

struct ManifestDir : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() / ("xdna_manifest_" + std::to_string(::getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir / "gemv_a");
    // Placeholder bytes standing in for a toolchain-built xclbin (not a real AXLF file).
    std::ofstream(dir / "gemv_a" / "gemv_a.xclbin") << "PLACEHOLDER xclbin for tests";
    std::ofstream(dir / "gemv_a" / "insts.bin") << std::string("\x01\x02\x03\x04", 4);
  }
  void TearDown() override { fs::remove_all(dir); }
  Manifest one() const {
    Manifest m;
    m.toolchain = "mlir-aie 1.4.1 + llvm-aie 21.0.0.2026080301+c9c5ecb7";
    Entry e{"gemv_a", "gemv", {{"N", 1024}, {"K", 1024}}, "MLIR_AIE", "gemv_a/gemv_a.xclbin", "gemv_a/insts.bin", "", ""};
    m.designs.push_back(e);
    return m;
  }
  nlohmann::json read() const { return nlohmann::json::parse(std::ifstream(dir / "manifest.json")); }
  void write(const nlohmann::json& j) const { std::ofstream(dir / "manifest.json") << j.dump(); }
  void expect_rejected(const std::string& needle) const {
    try {
      load_manifest(dir.string());
      FAIL() << "expected rejection containing '" << needle << "'";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("manifest.json"), std::string::npos) << e.what();
    }
  }
};

TEST_F(ManifestDir, RoundTrip) {
  save_manifest(one(), dir.string());
  const Manifest m = load_manifest(dir.string());
  EXPECT_EQ(m.version, 1);
  EXPECT_EQ(m.toolchain, one().toolchain);
  EXPECT_EQ(fs::path(m.dir), fs::absolute(dir).lexically_normal());
  ASSERT_EQ(m.designs.size(), 1u);
  const Entry* e = m.find("gemv_a");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->family, "gemv");
  EXPECT_EQ(e->params.at("N"), 1024);
  EXPECT_EQ(e->kernel, "MLIR_AIE");
  EXPECT_EQ(e->xclbin_sha256.size(), 64u);
  EXPECT_EQ(m.find("nope"), nullptr);
}

TEST_F(ManifestDir, BadVersion) {
  save_manifest(one(), dir.string());
  auto j = read();
  j["version"] = 2;
  write(j);
  expect_rejected("version");
}

TEST_F(ManifestDir, MissingKey) {
  save_manifest(one(), dir.string());
  auto j = read();
  j["designs"][0].erase("insts_sha256");
  write(j);
  expect_rejected("missing key 'insts_sha256'");
}

TEST_F(ManifestDir, PathEscapes) {
  save_manifest(one(), dir.string());
  auto j = read();
  j["designs"][0]["xclbin"] = "../x.xclbin";
  write(j);
  expect_rejected("'..'");
  j["designs"][0]["xclbin"] = "/etc/passwd";
  write(j);
  expect_rejected("not relative");
  // A symlink inside the directory that points outside it.
  fs::create_symlink("/etc/hostname", dir / "gemv_a" / "link.xclbin");
  j["designs"][0]["xclbin"] = "gemv_a/link.xclbin";
  write(j);
  expect_rejected("outside the directory");
}

TEST_F(ManifestDir, ShaMismatch) {
  save_manifest(one(), dir.string());
  std::ofstream(dir / "gemv_a" / "insts.bin") << "changed";
  expect_rejected("insts_sha256");
}

TEST_F(ManifestDir, MissingFile) {
  save_manifest(one(), dir.string());
  fs::remove(dir / "gemv_a" / "gemv_a.xclbin");
  expect_rejected("is missing");
}

TEST_F(ManifestDir, DuplicateDesign) {
  Manifest m = one();
  m.designs.push_back(m.designs[0]);
  EXPECT_THROW(save_manifest(m, dir.string()), std::runtime_error);
  save_manifest(one(), dir.string());
  auto j = read();
  j["designs"].push_back(j["designs"][0]);
  write(j);
  expect_rejected("appears twice");
}

TEST_F(ManifestDir, NotJsonAndMissingManifest) {
  expect_rejected("cannot open");
  std::ofstream(dir / "manifest.json") << "{not json";
  expect_rejected("not JSON");
}

TEST(Manifest, DefaultDirFollowsXdg) {
  const char* old = std::getenv("XDG_DATA_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_DATA_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(default_artifacts_dir(), "/tmp/xdg-test/xdna-engine/npu-artifacts");
  ::unsetenv("XDG_DATA_HOME");
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  if (!home.empty()) {
    EXPECT_EQ(default_artifacts_dir(), home + "/.local/share/xdna-engine/npu-artifacts");
  }
  if (old) ::setenv("XDG_DATA_HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace xdna::npu::artifacts

// `npu design emit` and `npu design package` end to end on a fake build directory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_test_util.h"
#include "npu/artifacts/manifest.h"
#include "npu/design.h"

namespace {

namespace fs = std::filesystem;
using xdna::test::run_shell;

TEST(CliDesignEmit, EmitThenPackageGivesALoadableManifest) {
  const fs::path root = fs::temp_directory_path() / ("xdna_cli_emit_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::string npu = XDNA_NPU_BINARY;
  auto r = run_shell(npu + " design emit --family gemv --dtype bf16 --n 1024 --k 1024 --columns 2 --out " +
                     (root / "build").string() + " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("kernel sources: aie_kernels/gemv_bf16.cc"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("missing kernels: none"), std::string::npos) << r.out;
  const fs::path d = root / "build" / "gemv_bf16_1024x1024_c2";
  ASSERT_TRUE(fs::exists(d / "design.py"));
  ASSERT_TRUE(fs::exists(d / "Makefile"));

  // Re-emit from the design JSON just written.
  r = run_shell(npu + " design emit " + (d / "design.json").string() + " --out " + (root / "again").string() + " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(root / "again" / "gemv_bf16_1024x1024_c2" / "design.py"));

  // Packaging before the toolchain ran names what is missing.
  r = run_shell(npu + " design package --from " + (root / "build").string() + " --to " + (root / "art").string() + " 2>&1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("gemv_bf16_1024x1024_c2.xclbin"), std::string::npos) << r.out;

  // Stand-ins for the toolchain's outputs: placeholder bytes, not a real xclbin or instruction stream.
  std::ofstream(d / "gemv_bf16_1024x1024_c2.xclbin") << "PLACEHOLDER xclbin written by the test";
  std::ofstream(d / "insts.bin") << std::string("\x00\x01\x02\x03", 4);
  r = run_shell(npu + " design package --from " + (root / "build").string() + " --to " + (root / "art").string() + " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemv_bf16_1024x1024_c2: kernel sources: aie_kernels/gemv_bf16.cc"), std::string::npos) << r.out;
  const auto m = xdna::npu::artifacts::load_manifest((root / "art").string());
  ASSERT_EQ(m.designs.size(), 1u);
  EXPECT_EQ(m.designs[0].design, "gemv_bf16_1024x1024_c2");
  EXPECT_EQ(m.designs[0].family, "gemv");
  EXPECT_EQ(m.designs[0].params.at("K"), 1024);
  EXPECT_EQ(xdna::npu::load_design((root / "art" / "gemv_bf16_1024x1024_c2" / "design.json").string()).name,
            "gemv_bf16_1024x1024_c2");
  fs::remove_all(root);
}

TEST(CliDesignEmit, UnknownFamilyIsAnError) {
  auto r = run_shell(std::string(XDNA_NPU_BINARY) + " design emit --family warp --out /tmp/xdna_never 2>&1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("warp"), std::string::npos) << r.out;
}

}  // namespace

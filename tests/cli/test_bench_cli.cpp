// `npu bench kernels --quick --json` end to end: one run reports bandwidth, GEMV per weight dtype
// as a fraction of it, and GEMM against the OpenBLAS peer (installed by scripts/install-deps.sh).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

TEST(BenchCli, QuickKernelReportHasEveryFigureAndRatio) {
  const auto [rc, out] =
      xdna::test::run_shell("'" XDNA_NPU_BINARY "' --threads 2 bench kernels --quick --json 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << out;

  EXPECT_NE(j.at("label").get<std::string>().find("host"), std::string::npos);
  EXPECT_GT(j.at("triad_gb_s").get<double>(), 0.1);
  std::set<std::string> dtypes;
  for (const auto& row : j.at("gemv")) {
    dtypes.insert(row.at("dtype").get<std::string>());
    EXPECT_GT(row.at("gb_s").get<double>(), 0.0) << row.dump();
    EXPECT_GT(row.at("fraction_of_triad").get<double>(), 0.0) << row.dump();
  }
  for (const char* d : {"f32", "bf16", "int8", "int4", "bfp16"}) EXPECT_TRUE(dtypes.count(d)) << d;
  ASSERT_EQ(j.at("gemm").size(), 3u);
  for (const auto& row : j.at("gemm")) {
    EXPECT_GT(row.at("f32_gflops").get<double>(), 0.0) << row.dump();
    EXPECT_GT(row.at("bf16_over_f32").get<double>(), 0.0) << row.dump();
    ASSERT_TRUE(row.contains("f32_over_openblas")) << "OpenBLAS peer missing: " << row.dump();
    EXPECT_GT(row.at("f32_over_openblas").get<double>(), 0.0);
  }
}

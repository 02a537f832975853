// `npu bench upscale` end to end with the hand-written TF.js fixture model: the warm in-process
// timing reports its figures, its output is byte for byte what `npu upscale` writes for the same
// image, and bad options exit non-zero with a reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "pipeline/image.h"
#include "pipeline/upscale.h"
#include "upscale_test_util.h"

namespace fs = std::filesystem;

namespace {

const std::string kTiny = std::string(XDNA_FIXTURE_DIR) + "/tfjs/tiny/model.json";

std::string npu(const std::string& args) { return "'" XDNA_NPU_BINARY "' --threads 2 " + args; }

using xdna::test::gradient;

}  // namespace

TEST(BenchUpscaleCli, ReportsWarmAndColdFiguresAsJson) {
  const auto [rc, out] =
      xdna::test::run_shell(npu("bench upscale --model " + kTiny + " --size 20 --range 1 --runs 3 --json 2>/dev/null"));
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << out;
  EXPECT_EQ(j.at("width").get<int>(), 20);
  EXPECT_EQ(j.at("height").get<int>(), 20);
  EXPECT_EQ(j.at("scale").get<int>(), 2);
  EXPECT_EQ(j.at("runs").get<int>(), 3);
  ASSERT_EQ(j.at("run_s").size(), 3u);
  const double median = j.at("median_s").get<double>();
  EXPECT_GT(median, 0.0);
  EXPECT_LE(j.at("min_s").get<double>(), median);
  EXPECT_GE(j.at("max_s").get<double>(), median);
  EXPECT_GT(j.at("first_s").get<double>(), 0.0);
}

TEST(BenchUpscaleCli, OutputEqualsNpuUpscale) {
  xdna::test::TempDir t("xdna_bench_upscale_");
  xdna::encode_png(gradient(23, 11), t / "in.png");
  const auto bench = xdna::test::run_shell(npu("bench upscale --model " + kTiny + " --image " + t / "in.png" +
                                               " --range 1 --tile 8 --runs 1 --out " + t / "bench.png 2>&1"));
  ASSERT_EQ(bench.rc, 0) << bench.out;
  EXPECT_NE(bench.out.find("warm: median"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("cold: first upscale"), std::string::npos) << bench.out;
  const auto one = xdna::test::run_shell(npu("upscale " + t / "in.png" + " " + t / "one.png --model " + kTiny +
                                             " --scale 2 --range 1 --tile 8 2>&1"));
  ASSERT_EQ(one.rc, 0) << one.out;
  const xdna::Image a = xdna::load_image(t / "bench.png"), b = xdna::load_image(t / "one.png");
  EXPECT_EQ(a.width, 46);
  EXPECT_EQ(a.height, 22);
  EXPECT_EQ(a.rgb, b.rgb);
}

TEST(BenchUpscaleCli, BadOptionsExitWithAReason) {
  const auto zero = xdna::test::run_shell(npu("bench upscale --model " + kTiny + " --range 1 --runs 0 2>&1"));
  EXPECT_NE(zero.rc, 0);
  EXPECT_NE(zero.out.find("--runs"), std::string::npos) << zero.out;
  // --warmup counts the cold first upscale (timed apart from the runs), so 0 is refused.
  const auto no_warmup = xdna::test::run_shell(npu("bench upscale --model " + kTiny + " --range 1 --warmup 0 2>&1"));
  EXPECT_NE(no_warmup.rc, 0);
  EXPECT_NE(no_warmup.out.find("--warmup"), std::string::npos) << no_warmup.out;
  EXPECT_NE(no_warmup.out.find("must be >= 1"), std::string::npos) << no_warmup.out;
  const auto missing = xdna::test::run_shell(npu("bench upscale --model /nonexistent/m.json 2>&1"));
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.out.find("/nonexistent/m.json"), std::string::npos) << missing.out;
  const auto scale = xdna::test::run_shell(npu("bench upscale --model " + kTiny + " --range 1 --scale 3 2>&1"));
  EXPECT_NE(scale.rc, 0);
  EXPECT_NE(scale.out.find("not 3x"), std::string::npos) << scale.out;
}

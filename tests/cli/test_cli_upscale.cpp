// `npu upscale` end to end with the hand-written TF.js fixture model, and its error exits.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "pipeline/image.h"
#include "pipeline/upscale.h"
#include "upscale_test_util.h"

namespace fs = std::filesystem;

namespace {

const std::string kTiny = std::string(XDNA_FIXTURE_DIR) + "/tfjs/tiny";

struct NpuRun {
  int status = -1;
  std::string output;  // stdout and stderr
};

NpuRun npu(const std::string& args) {
  NpuRun r;
  FILE* p = ::popen((std::string(XDNA_NPU_BINARY) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

using xdna::test::gradient;

}  // namespace

TEST(CliUpscale, WritesPngOfTheScaledSize) {
  xdna::test::TempDir t("xdna_cli_upscale_");
  xdna::encode_png(gradient(23, 11), t / "in.png");
  const NpuRun r = npu("upscale " + t / "in.png" + " " + t / "out.png" + " --model " + kTiny +
                    "/model.json --scale 2 --range 1 --tile 8");
  ASSERT_EQ(r.status, 0) << r.output;
  const xdna::Image out = xdna::load_image(t / "out.png");
  EXPECT_EQ(out.width, 46);
  EXPECT_EQ(out.height, 22);
  EXPECT_NE(r.output.find("23x11 -> 46x22"), std::string::npos) << r.output;
}

TEST(CliUpscale, BadInputsExitOneWithAReason) {
  xdna::test::TempDir t("xdna_cli_upscale_");
  xdna::encode_png(gradient(8, 8), t / "in.png");
  const std::string io = t / "in.png" + " " + t / "out.png";
  const std::string store = " --store " + t / "store";

  NpuRun r = npu("upscale " + io + " --model no-such-model" + store);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("unknown model 'no-such-model'"), std::string::npos) << r.output;

  r = npu("upscale " + io + " --model esrgan-slim" + store);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("npu model pull esrgan-slim"), std::string::npos) << r.output;

  r = npu("upscale " + t / "missing.png" + " " + t / "out.png" + " --model " + kTiny + "/model.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("missing.png"), std::string::npos) << r.output;

  r = npu("upscale " + io + " --model " + kTiny + "/model.json --scale 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("upscales 2x, not 3x"), std::string::npos) << r.output;

  // A model directory with only x2/: --scale 4 names the scales it has.
  fs::create_directories(t.path / "m" / "x2");
  for (const char* f : {"model.json", "group1-shard1of1.bin"}) fs::copy_file(kTiny + "/" + f, t.path / "m" / "x2" / f);
  r = npu("upscale " + io + " --model " + t / "m" + " --scale 4");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("has no x4 network (scales it has: 2)"), std::string::npos) << r.output;

  r = npu("upscale " + t / "in.png" + " " + t / "out.jpg" + " --model " + kTiny + "/model.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("must be a .png"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path / "out.png"));
}

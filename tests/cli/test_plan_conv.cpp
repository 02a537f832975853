// `npu plan` on conv models: the tiny ESPCN / EDSR fixtures always, EfficientNet-Lite0 and
// esrgan-slim when they are in the store.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "models/model_store.h"

namespace fs = std::filesystem;
using xdna::test::run_shell;

namespace {

const std::string kNpu = XDNA_NPU_BINARY;
const std::string kFixtures = XDNA_FIXTURE_DIR;

nlohmann::json plan_json(const std::string& args) {
  const auto r = run_shell(kNpu + " plan " + args + " --json 2>&1");
  EXPECT_EQ(r.rc, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

bool in_store(const std::string& name) {
  return fs::is_directory(xdna::ModelStore(xdna::default_store_dir()).model_dir(name));
}

}  // namespace

TEST(PlanConvCli, EspcnFixturePlacesEveryConvAndNamesHostOps) {
  const nlohmann::json j = plan_json(kFixtures + "/sr/espcn_x2.pt --image-size 40x24");
  EXPECT_EQ(j["image"]["height"], 40);
  EXPECT_EQ(j["image"]["width"], 24);
  EXPECT_EQ(j["label"], "npu-sim (modelled)");
  int convs = 0, shuffles = 0;
  for (const auto& op : j["ops"]) {
    if (op["kind"] == "conv") {
      ++convs;
      EXPECT_TRUE(op["on_npu"].get<bool>()) << op.dump();
      EXPECT_GE(op["invocations"].get<int>(), 1);
    }
    if (op["kind"] == "pixel_shuffle") {
      ++shuffles;
      EXPECT_FALSE(op["on_npu"].get<bool>());
      EXPECT_FALSE(op["reason"].get<std::string>().empty());
    }
  }
  EXPECT_EQ(convs, 3);
  EXPECT_EQ(shuffles, 1);
  const auto& c = j["per_image"];
  EXPECT_GE(c["dispatches"].get<int>(), 1);
  EXPECT_GT(c["ddr_bytes"].get<int64_t>(), 0);
  EXPECT_NEAR(c["total_ms"].get<double>(), c["compute_ms"].get<double>() + c["dma_ms"].get<double>() +
                                               c["dispatch_ms"].get<double>() + c["reconfigure_ms"].get<double>(),
              1e-6);
}

TEST(PlanConvCli, TextMeasureHostAndBadImageSize) {
  const auto r = run_shell(kNpu + " plan " + kFixtures + "/sr/edsr_x2.pt --image-size 16x16 --measure-host 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("npu-sim (modelled)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("host backend (measured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("host add:"), std::string::npos) << r.out;  // EDSR's residual adds, with the reason
  const auto bad = run_shell(kNpu + " plan " + kFixtures + "/sr/edsr_x2.pt --image-size 16by16 2>&1");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("--image-size"), std::string::npos) << bad.out;
}

// The upscale flags this stop added refuse values they do not know, naming the flag.
TEST(PlanConvCli, UpscaleRefusesUnknownPrecisionAndDevice) {
  const std::string base = kNpu + " upscale " + kFixtures + "/sr/nope.png /tmp/xdna-never-written.png --model " +
                           kFixtures + "/sr/edsr_x2.pt ";
  const auto precision = run_shell(base + "--precision int3 2>&1");
  EXPECT_NE(precision.rc, 0);
  EXPECT_NE(precision.out.find("--precision"), std::string::npos) << precision.out;
  const auto device = run_shell(base + "--device gpu 2>&1");
  EXPECT_NE(device.rc, 0);
  EXPECT_NE(device.out.find("--device"), std::string::npos) << device.out;
}

TEST(PlanConvCli, StoreModels) {
  if (!in_store("efficientnet-lite0") && !in_store("esrgan-slim"))
    GTEST_SKIP() << "neither efficientnet-lite0 nor esrgan-slim is in the store";
  if (in_store("efficientnet-lite0")) {
    const nlohmann::json j = plan_json("efficientnet-lite0");
    EXPECT_EQ(j["family"], "efficientnet-lite0");
    EXPECT_EQ(j["image"]["height"], 224);
    int dw = 0;
    for (const auto& op : j["ops"])
      if (op["kind"] == "conv" && op["conv"]["depthwise"].get<bool>()) {
        ++dw;
        EXPECT_TRUE(op["on_npu"].get<bool>()) << op.dump();
      }
    EXPECT_EQ(dw, 16);  // one depthwise conv per MBConv block
  }
  if (in_store("esrgan-slim")) {
    const nlohmann::json j = plan_json("esrgan-slim --image-size 64x64");
    EXPECT_GT(j["npu_ops"].get<int>(), 10);
    EXPECT_GT(j["per_image"]["total_ms"].get<double>(), 0);
  }
}

// `npu doctor` and `--device npu` on a machine without the NPU: the clear "no NPU" report, the
// artifacts count, the error naming the missing device and the --fallback flag, and fallbacks
// that are said on stderr and recorded in the --json placement report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "npu/design_families.h"
#include "npu/runtime/decode_dry_run.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kBert = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";

class NpuDeviceCli : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("xdna_cli_npu_" + std::to_string(::getpid()));
  void SetUp() override {
    if (fs::exists("/dev/accel")) GTEST_SKIP() << "this machine has /dev/accel: these tests are for its absence";
    fs::remove_all(dir);
    fs::create_directories(dir / "config" / "xdna-engine");
  }
  void TearDown() override { fs::remove_all(dir); }
  void write_config(const std::string& text) { std::ofstream(dir / "config" / "xdna-engine" / "config.json") << text; }
  // stdout only, or stdout then stderr (2>&1) when `with_stderr`.
  xdna::test::ShellResult npu(const std::string& args, bool with_stderr = false) {
    const std::string env = "XDG_CONFIG_HOME='" + (dir / "config").string() + "' XDG_DATA_HOME='" +
                            (dir / "data").string() + "' ";
    return xdna::test::run_shell(env + XDNA_NPU_BINARY + " " + args +
                                 (with_stderr ? " 2>&1" : " 2>'" + (dir / "stderr").string() + "'"));
  }
  std::string err() const {
    std::ifstream in(dir / "stderr");
    return {std::istreambuf_iterator<char>(in), {}};
  }
  std::string embed(const std::string& flags) { return "embed --model '" + kBert.string() + "' " + flags + " hello"; }
};

}  // namespace

TEST_F(NpuDeviceCli, DoctorSaysNoNpuAndCountsArtifacts) {
  auto r = npu("doctor --json");
  ASSERT_EQ(r.rc, 0) << r.out << err();
  json j = json::parse(r.out);
  EXPECT_TRUE(j["npu"]["device"].is_null());
  EXPECT_EQ(j["backend"]["devices"], json({"host", "npu-sim"}));
  EXPECT_EQ(j["backend"]["npu_runtime"], true);
  EXPECT_EQ(j["backend"]["artifacts"]["dir"], (dir / "data" / "xdna-engine" / "npu-artifacts").string());
  EXPECT_EQ(j["backend"]["artifacts"]["designs"], 0);

  // One compiled design in the directory config `npu_artifacts` names.
  const fs::path art = dir / "artifacts";
  xdna::npu::write_placeholder_artifacts({xdna::npu::elementwise_design("add", 64)}, art.string(), "test");
  write_config("{\"npu_artifacts\": \"" + art.string() + "\"}");
  j = json::parse(npu("doctor --json").out);
  EXPECT_EQ(j["backend"]["artifacts"]["dir"], art.string());
  EXPECT_EQ(j["backend"]["artifacts"]["designs"], 1);
  EXPECT_TRUE(j["backend"]["artifacts"]["error"].is_null());

  r = npu("doctor");
  EXPECT_NE(r.out.find("no NPU found, running on host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 found in " + art.string()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not built yet"), std::string::npos) << r.out;
}

TEST_F(NpuDeviceCli, DeviceNpuWithoutHardwareFailsNamingDeviceAndFallbackFlag) {
  const auto r = npu(embed("--device npu"), true);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("no NPU device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/dev/accel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--fallback host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("npu_fallback"), std::string::npos) << r.out;
}

TEST_F(NpuDeviceCli, FallbackToNpuSimIsSaidAndRecordedPerOp) {
  const auto r = npu(embed("--device npu --fallback npu-sim --json"));
  ASSERT_EQ(r.rc, 0) << r.out << err();
  const json j = json::parse(r.out);
  const json& p = j["placement"];
  EXPECT_EQ(p["requested"], "npu");
  EXPECT_EQ(p["used"], "npu-sim");
  EXPECT_EQ(p["fallback"], true);
  EXPECT_NE(p["fallback_reason"].get<std::string>().find("no NPU device"), std::string::npos) << p.dump();
  EXPECT_TRUE(p["op_fallback_reasons"].is_object());
  // Every op is a fallback: those npu-sim ran and those it left to the host.
  int ops = 0;
  for (const auto& [name, b] : j["run"]["backends"].items()) ops += b["ops"].get<int>();
  EXPECT_GT(j["run"]["backends"]["npu-sim (modelled)"]["ops"].get<int>(), 0) << j["run"].dump();
  EXPECT_EQ(j["run"]["fallbacks"].get<int>(), ops);
  EXPECT_TRUE(j.contains("npu_sim"));
  const std::string e = err();
  EXPECT_NE(e.find("falling back to npu-sim (--fallback npu-sim)"), std::string::npos) << e;
  EXPECT_NE(e.find("no NPU device"), std::string::npos) << e;
}

TEST_F(NpuDeviceCli, AllowHostFallbackIsFallbackHost) {
  const auto r = npu(embed("--device npu --allow-host-fallback --json"));
  ASSERT_EQ(r.rc, 0) << r.out << err();
  const json j = json::parse(r.out);
  EXPECT_EQ(j["placement"]["used"], "host");
  EXPECT_EQ(j["placement"]["fallback"], true);
  EXPECT_GT(j["run"]["fallbacks"].get<int>(), 0);
  EXPECT_EQ(j["run"]["backends"].size(), 1u);
  EXPECT_TRUE(j["run"]["backends"].contains("host"));
  EXPECT_NE(err().find("falling back to host"), std::string::npos) << err();
  EXPECT_NE(npu(embed("--device npu --allow-host-fallback --fallback npu-sim"), true).rc, 0);
}

TEST_F(NpuDeviceCli, ConfigKeyNpuFallback) {
  write_config("{\"npu_fallback\": \"npu-sim\"}");
  auto r = npu(embed("--device npu --json"));
  ASSERT_EQ(r.rc, 0) << r.out << err();
  EXPECT_EQ(json::parse(r.out)["placement"]["used"], "npu-sim");
  EXPECT_NE(err().find("falling back to npu-sim (config npu_fallback)"), std::string::npos) << err();

  // The flag overrides the config.
  r = npu(embed("--device npu --fallback none"), true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("no NPU device"), std::string::npos) << r.out;

  write_config("{\"npu_fallback\": \"cpu\"}");
  r = npu("doctor", true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"npu_fallback\" must be"), std::string::npos) << r.out;
}

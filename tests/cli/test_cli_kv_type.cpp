// --kv-type and the config key kv_type: `npu bench llm` on the tiny Qwen3 GGUF fixture reports the
// cache type and size it ran with (f16 by default; f16 / bf16 take half the bytes of f32); the config
// key sets it, the flag overrides the config, and bad values are errors naming the value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kQwen = fs::path(XDNA_FIXTURE_DIR) / "decoders" / "qwen3" / "model.gguf";

class KvTypeCli : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("xdna_cli_kv_" + std::to_string(::getpid()));
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir / "config" / "xdna-engine");
  }
  void TearDown() override { fs::remove_all(dir); }
  void write_config(const std::string& text) { std::ofstream(dir / "config" / "xdna-engine" / "config.json") << text; }
  xdna::test::ShellResult npu(const std::string& args) {
    return xdna::test::run_shell("XDG_CONFIG_HOME='" + (dir / "config").string() + "' " + XDNA_NPU_BINARY + " " + args +
                                 " 2>&1");
  }
  // {kv_type, kv_cache_mib} of a short `bench llm --json` run with these flags.
  json bench(const std::string& flags) {
    const auto r = npu("--threads 1 bench llm --model '" + kQwen.string() +
                       "' --prompt-tokens 4 --gen-tokens 4 --json " + flags);
    EXPECT_EQ(r.rc, 0) << r.out;
    const auto j = json::parse(r.out.substr(r.out.rfind("\n{") + 1), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }
};

TEST_F(KvTypeCli, DefaultFlagAndConfigKey) {
  const json def = bench(""), f32 = bench("--kv-type f32"), f16 = bench("--kv-type f16"),
             bf16 = bench("--kv-type bf16");
  EXPECT_EQ(def["kv_type"], "f16");  // the default, as llama.cpp's (docs/benchmarks-llm.md)
  EXPECT_EQ(f32["kv_type"], "f32");
  EXPECT_EQ(f16["kv_type"], "f16");
  EXPECT_EQ(bf16["kv_type"], "bf16");
  EXPECT_DOUBLE_EQ(def["kv_cache_mib"].get<double>(), f16["kv_cache_mib"].get<double>());
  EXPECT_DOUBLE_EQ(f16["kv_cache_mib"].get<double>() * 2, f32["kv_cache_mib"].get<double>());
  EXPECT_DOUBLE_EQ(bf16["kv_cache_mib"].get<double>(), f16["kv_cache_mib"].get<double>());

  write_config("{\"kv_type\": \"f16\"}");
  EXPECT_EQ(bench("")["kv_type"], "f16");
  EXPECT_EQ(bench("--kv-type bf16")["kv_type"], "bf16");  // the flag overrides the config
}

TEST_F(KvTypeCli, BadValuesAreErrors) {
  auto r = npu("bench llm --model '" + kQwen.string() + "' --kv-type fp8");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("fp8"), std::string::npos) << r.out;
  write_config("{\"kv_type\": \"q8\"}");
  r = npu("bench llm --model '" + kQwen.string() + "'");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"kv_type\" must be \"f32\", \"f16\" or \"bf16\", not \"q8\""), std::string::npos) << r.out;
}

}  // namespace

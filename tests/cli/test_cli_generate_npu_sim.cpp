// `npu generate --device npu-sim` on the tiny decoder fixtures (tests/fixtures/decoders, GGUFs
// with their tokenizers): decode tokens run through npu-sim's fused plan and the placement says so
// ("decode ran fused: 1 dispatch per token"), in text and in --json (Gemma 3 too: sliding windows
// and sandwich norms are decode_layer parameters); a model the fused plan cannot run (quantized
// weights) decodes op by op and says why.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/decoders/";

// Each run with its own empty XDG dirs (no user config, no server), stdout and stderr together.
xdna::test::ShellResult npu(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("xdna-cli-npu-sim-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string env = "XDG_CACHE_HOME='" + (dir / "cache").string() + "' XDG_CONFIG_HOME='" +
                          (dir / "config").string() + "' XDG_RUNTIME_DIR='" + (dir / "run").string() + "' ";
  auto r = xdna::test::run_shell(env + "'" XDNA_NPU_BINARY "' " + args + " 2>&1");
  fs::remove_all(dir);
  return r;
}

const std::string kArgs = " --prompt 'ab' --max-tokens 4 --temperature 0 --context 32 --seed 1";

}  // namespace

TEST(CliGenerateNpuSim, DecodeRunsFusedAndSaysSo) {
  const auto r = npu("generate --model '" + kDir + "qwen3/model.gguf' --device npu-sim" + kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("npu-sim: decode ran fused: 1 dispatch per token (2 decode_layer + 1 lm_head"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("[npu-sim (modelled)]"), std::string::npos) << r.out;
}

TEST(CliGenerateNpuSim, JsonPlacementCountsDispatches) {
  const auto r = npu("generate --model '" + kDir + "llama/model.gguf' --device npu-sim --json" + kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const auto& d = j["placement"]["decode"];
  ASSERT_TRUE(d.is_object()) << r.out;
  EXPECT_TRUE(d["fused"].get<bool>());
  EXPECT_EQ(d["dispatches_per_token"].get<double>(), 1.0);
  EXPECT_EQ(d["tokens"].get<int64_t>(), j["usage"]["completion_tokens"].get<int64_t>() - 1);
  EXPECT_EQ(d["label"], "npu-sim (modelled)");
  // Greedy: the same tokens as the host.
  const auto h = npu("generate --model '" + kDir + "llama/model.gguf' --json" + kArgs);
  ASSERT_EQ(h.rc, 0) << h.out;
  const auto hj = nlohmann::json::parse(h.out.substr(h.out.find('{')), nullptr, false);
  ASSERT_FALSE(hj.is_discarded()) << h.out;
  EXPECT_EQ(j["tokens"], hj["tokens"]);
}

TEST(CliGenerateNpuSim, GemmaDecodesFused) {
  const auto r = npu("generate --model '" + kDir + "gemma3/model.gguf' --device npu-sim" + kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("npu-sim: decode ran fused: 1 dispatch per token (4 decode_layer + 1 lm_head"),
            std::string::npos)
      << r.out;
}

TEST(CliGenerateNpuSim, QuantizedDecodesOpByOpWithReason) {
  const auto r = npu("generate --model '" + kDir + "gemma3/model-q5q8.gguf' --device npu-sim" + kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("npu-sim: decode ran op by op, not fused: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("npu-sim executes bf16 designs only"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("decode ran fused"), std::string::npos) << r.out;
}

TEST(CliGenerateNpuSim, HostRunSaysNothingAboutFusion) {
  const auto r = npu("generate --model '" + kDir + "qwen3/model.gguf'" + kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("fused"), std::string::npos) << r.out;
}

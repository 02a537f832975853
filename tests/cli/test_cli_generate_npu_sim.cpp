// `npu generate --device npu-sim` on the tiny decoder fixtures (tests/fixtures/decoders, GGUFs
// with their tokenizers): decode tokens run through npu-sim's fused plan and the placement says so
// ("decode ran fused: 1 dispatch per token"), in text and in --json (Gemma 3 too: sliding windows
// and sandwich norms are decode_layer parameters); a quantized file runs fused from its GGML
// blocks dequantized to f32, and says so. --npu-weights picks the plan's designs: int8 (default)
// or bf16, each named in the report; a bad value, or the flag with --device host, is refused.
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

TEST(CliGenerateNpuSim, QuantizedDecodesFusedFromDequantizedBlocks) {
  const auto r = npu("generate --model '" + kDir + "gemma3/model-q5q8.gguf' --device npu-sim" + kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("npu-sim: weights dequantized from the file's GGML blocks (q5_0, q8_0) to f32"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("npu-sim: decode ran fused: 1 dispatch per token"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("decode ran op by op"), std::string::npos) << r.out;
}

TEST(CliGenerateNpuSim, HostRunSaysNothingAboutFusion) {
  const auto r = npu("generate --model '" + kDir + "qwen3/model.gguf'" + kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("fused"), std::string::npos) << r.out;
}

namespace {

nlohmann::json parse_json(const std::string& out) {
  const size_t at = out.find('{');
  return at == std::string::npos ? nlohmann::json() : nlohmann::json::parse(out.substr(at), nullptr, false);
}

// Every design of placement.decode.designs starts with decode_layer_<p>_ or lm_head_<p>_; both ran.
void expect_designs(const nlohmann::json& d, const std::string& precision) {
  ASSERT_TRUE(d["designs"].is_object()) << d.dump();
  int layers = 0, heads = 0;
  for (const auto& [name, count] : d["designs"].items()) {
    const bool layer = name.rfind("decode_layer_" + precision + "_", 0) == 0;
    const bool head = name.rfind("lm_head_" + precision + "_", 0) == 0;
    EXPECT_TRUE(layer || head) << name;
    layers += layer ? count.get<int>() : 0;
    heads += head ? count.get<int>() : 0;
  }
  EXPECT_GT(layers, 0) << d.dump();
  EXPECT_EQ(heads, d["tokens"].get<int>()) << d.dump();
}

}  // namespace

TEST(CliGenerateNpuSim, Int8IsTheDefaultNamesItsDesignsAndMatchesHostGreedy) {
  for (const std::string name : {"qwen3", "gemma3"}) {
    const std::string model = " --model '" + kDir + name + "/model.gguf'";
    const auto h = npu("generate" + model + " --json" + kArgs);
    ASSERT_EQ(h.rc, 0) << h.out;
    const auto hj = parse_json(h.out);
    ASSERT_FALSE(hj.is_discarded() || hj.is_null()) << h.out;
    for (const std::string flag : {"", " --npu-weights int8"}) {
      const auto r = npu("generate" + model + " --device npu-sim --json" + flag + kArgs);
      ASSERT_EQ(r.rc, 0) << r.out;
      const auto j = parse_json(r.out);
      ASSERT_FALSE(j.is_discarded() || j.is_null()) << r.out;
      const auto& d = j["placement"]["decode"];
      ASSERT_TRUE(d["fused"].get<bool>()) << r.out;
      EXPECT_EQ(d["weights"], "int8") << name << flag;
      expect_designs(d, "int8");
      EXPECT_EQ(j["tokens"], hj["tokens"]) << name << flag;  // greedy: the host's tokens
    }
  }
  // Text mode names them too.
  const auto t = npu("generate --model '" + kDir + "qwen3/model.gguf' --device npu-sim" + kArgs);
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("lm_head invocations, int8)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("npu-sim: designs run: decode_layer_int8_64_h4kv2d16_i64_qkn_kv8_c8 x6, lm_head_int8_"),
            std::string::npos)
      << t.out;
}

TEST(CliGenerateNpuSim, Bf16WeightsRunTheBf16Designs) {
  const auto r = npu("generate --model '" + kDir + "qwen3/model.gguf' --device npu-sim --npu-weights bf16 --json" +
                     kArgs);
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = parse_json(r.out);
  ASSERT_FALSE(j.is_discarded() || j.is_null()) << r.out;
  EXPECT_EQ(j["placement"]["decode"]["weights"], "bf16");
  expect_designs(j["placement"]["decode"], "bf16");
}

TEST(CliGenerateNpuSim, QuantizedFileRunsFusedWithEitherWeights) {
  for (const std::string w : {"int8", "bf16"}) {
    const auto r = npu("generate --model '" + kDir + "gemma3/model-q5q8.gguf' --device npu-sim --npu-weights " + w +
                       kArgs);
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::string then = w == "int8" ? "quantized per row to int8" : "rounded to bf16";
    EXPECT_NE(r.out.find("GGML blocks (q5_0, q8_0) to f32, then " + then), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("npu-sim: decode ran fused: 1 dispatch per token"), std::string::npos) << r.out;
  }
}

TEST(CliGenerateNpuSim, BadNpuWeightsRefusedNamingTheFlag) {
  const auto r = npu("generate --model '" + kDir + "qwen3/model.gguf' --device npu-sim --npu-weights fp8" + kArgs);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("--npu-weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp8"), std::string::npos) << r.out;
  // On the host nothing reads it: refused, not ignored.
  const auto h = npu("generate --model '" + kDir + "qwen3/model.gguf' --npu-weights bf16" + kArgs);
  EXPECT_NE(h.rc, 0) << h.out;
  EXPECT_NE(h.out.find("--npu-weights bf16 applies to --device npu-sim or npu, not host"), std::string::npos)
      << h.out;
}

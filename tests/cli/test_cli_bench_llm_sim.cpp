// `npu bench llm --device npu-sim` on the tiny Qwen3 GGUF fixture: the decode runs through the fused
// plan and the figures are labelled as the simulator's measured wall time, the plan's latency as
// modelled; a --context shorter than the run is an error naming both lengths.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kQwen = fs::path(XDNA_FIXTURE_DIR) / "decoders" / "qwen3" / "model.gguf";

xdna::test::ShellResult npu(const std::string& args) {
  return xdna::test::run_shell(std::string(XDNA_NPU_BINARY) + " " + args + " 2>&1");
}

}  // namespace

TEST(BenchLlmNpuSimCli, FusedDecodeLabelledMeasuredWallTimeBesideModelledLatency) {
  const auto r = npu("--threads 1 bench llm --model '" + kQwen.string() +
                     "' --device npu-sim --prompt-tokens 4 --gen-tokens 3 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = json::parse(r.out.substr(r.out.rfind("\n{") + 1), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["label"], "npu-sim wall time (measured)");
  EXPECT_EQ(j["device"], "npu-sim");
  EXPECT_EQ(j["decode"], "fused") << j.value("decode_refusal", "");
  EXPECT_EQ(j["context"], 7);
  EXPECT_GT(j["decode_ms_per_token"].get<double>(), 0.0);
  EXPECT_EQ(j["modelled_npu_ms_per_token"]["label"], "npu-sim (modelled)");
  EXPECT_GT(j["modelled_npu_ms_per_token"]["value"].get<double>(), 0.0);
}

TEST(BenchLlmNpuSimCli, ContextShorterThanTheRunIsAnError) {
  const auto r = npu("bench llm --model '" + kQwen.string() + "' --device npu-sim --context 5 --prompt-tokens 4 "
                     "--gen-tokens 3");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("--context 5 holds fewer than the 7 prompt and generated tokens"), std::string::npos) << r.out;
}

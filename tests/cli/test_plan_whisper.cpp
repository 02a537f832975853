// `npu plan` on Whisper (the tiny random checkpoint in tests/fixtures/whisper): the encoder per
// 30-s window with its attention on the encoder attention design, the cross-attention K/V per
// window, the decoder step per token (its cached self-attention on the host), modelled labels,
// the measured host encoder beside them, and a Whisper directory without weights refused.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

using xdna::test::run_shell;

namespace {

const std::string kNpu = XDNA_NPU_BINARY;
const std::string kTiny = std::string(XDNA_FIXTURE_DIR) + "/whisper/tiny-random";

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

int rows_with(const nlohmann::json& placement, const std::string& where, const std::string& op) {
  int n = 0;
  for (const auto& r : placement) n += r["placement"] == where && r["op"] == op ? r["count"].get<int>() : 0;
  return n;
}

}  // namespace

TEST(CliPlanWhisper, JsonPlacesEncoderAttentionOnTheNpu) {
  const auto r = run_shell(kNpu + " plan " + kTiny + " --json 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kind"], "whisper");
  EXPECT_EQ(j["label"], "npu-sim (modelled)");
  EXPECT_EQ(j["encoder_positions"], 64);  // the fixture's max_source_positions
  EXPECT_EQ(j["mel_frames"], 128);
  const nlohmann::json& enc = j["encoder"];
  EXPECT_EQ(rows_with(enc["placement"], "npu-sim", "attention"), 2);  // one per encoder layer
  EXPECT_EQ(rows_with(enc["placement"], "host", "attention"), 0);
  EXPECT_EQ(rows_with(enc["placement"], "npu-sim", "matmul"), 2 * 6);  // q, k, v, o, fc1, fc2
  bool attention_design = false;
  for (const auto& op : enc["ops"])
    if (op["op"] == "attention") attention_design |= op["design"].get<std::string>().rfind("encoder_attention_t64s64_h4kv4d16", 0) == 0;
  EXPECT_TRUE(attention_design) << enc["ops"].dump();
  const nlohmann::json& cost = enc["cost"];
  EXPECT_EQ(cost["dispatches"], enc["npu_ops"]);
  EXPECT_GT(cost["configures"].get<int>(), 0);
  EXPECT_EQ(cost["xclbin_switches"], 0);  // one xclbin (--xclbin single)
  EXPECT_GT(cost["ddr_bytes"].get<double>(), 0);
  // Decoder step: the self-attention over the cache (query offset) stays on the host.
  const nlohmann::json& step = j["decoder_step"];
  bool self_on_host = false;
  for (const auto& op : step["ops"])
    if (op["op"] == "attention" && op["placement"] == "host") self_on_host |= contains(op["reason"], "query offset");
  EXPECT_TRUE(self_on_host) << step["ops"].dump();
  EXPECT_GT(j["cross_kv"]["npu_ops"].get<int>(), 0);
  EXPECT_FALSE(j.contains("host_measured_encoder_ms"));
}

TEST(CliPlanWhisper, TextPerDesignAndMeasuredHost) {
  const auto r = run_shell(kNpu + " plan " + kTiny + " --xclbin per-design --measure-host 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "encoder, per 30-s window (128 mel frames -> 64 positions)")) << r.out;
  EXPECT_TRUE(contains(r.out, "decoder step, per token")) << r.out;
  EXPECT_TRUE(contains(r.out, "xclbin policy: per-design")) << r.out;
  EXPECT_TRUE(contains(r.out, "npu-sim (modelled)")) << r.out;
  EXPECT_TRUE(contains(r.out, "host backend (measured, this CPU): encoder")) << r.out;
  // Per-design xclbins: the encoder's design changes are xclbin switches, not configures.
  const size_t at = r.out.find("per window npu-sim (modelled): ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string enc_line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_TRUE(contains(enc_line, " 0 configures")) << enc_line;
  EXPECT_FALSE(contains(enc_line, " 0 xclbin switches")) << enc_line;
}

TEST(CliPlanWhisper, WhisperDirectoryWithoutWeightsIsRefused) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "xdna_plan_whisper_noweights";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "whisper"})";
  const auto r = run_shell(kNpu + " plan " + dir.string() + " 2>&1");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "no model.baked or model.safetensors")) << r.out;
  std::filesystem::remove_all(dir);
}

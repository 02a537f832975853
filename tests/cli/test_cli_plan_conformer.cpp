// `npu plan` on conformer ASR models (the tiny archives in tests/fixtures/conformer/archives):
// placement of the encoder and head on npu-sim designs, the host work named with its reason, the
// per-token transducer step, modelled labels, and --seconds scaling the frames.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

using xdna::test::run_shell;

namespace {

const std::string kNpu = XDNA_NPU_BINARY;
const std::string kArchives = std::string(XDNA_FIXTURE_DIR) + "/conformer/archives/";

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

nlohmann::json plan_json(const std::string& archive, const std::string& extra = "") {
  const auto r = run_shell(kNpu + " plan " + kArchives + archive + " --json" + extra + " 2>&1");
  EXPECT_EQ(r.rc, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

// Rows of a placement table with this placement and op.
int rows_with(const nlohmann::json& placement, const std::string& where, const std::string& op) {
  int n = 0;
  for (const auto& r : placement) n += r["placement"] == where && r["op"] == op ? r["count"].get<int>() : 0;
  return n;
}

TEST(CliPlanConformer, ParakeetTdtText) {
  const auto r = run_shell(kNpu + " plan " + kArchives + "parakeet_tdt_bpe.nemo 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "parakeet conformer, tdt head; 10 s of audio = 1000 mel frames -> 125 encoder frames"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "npu-sim  matmul")) << r.out;
  EXPECT_TRUE(contains(r.out, "host: attention with a mask input")) << r.out;  // rel-pos biases
  EXPECT_TRUE(contains(r.out, "host: no design family for conv2d")) << r.out;
  EXPECT_TRUE(contains(r.out, "glu+depthwise_conv1d+silu")) << r.out;
  EXPECT_TRUE(contains(r.out, "host: no design family for depthwise conv1d or GLU")) << r.out;
  EXPECT_TRUE(contains(r.out, "per inference npu-sim (modelled):")) << r.out;
  EXPECT_TRUE(contains(r.out, "tdt head, per emitted token")) << r.out;
  EXPECT_TRUE(contains(r.out, "per token npu-sim (modelled):")) << r.out;
  EXPECT_TRUE(contains(r.out, "no design family for sigmoid or tanh")) << r.out;
}

TEST(CliPlanConformer, ParakeetTdtJson) {
  const nlohmann::json j = plan_json("parakeet_tdt_bpe.nemo");
  EXPECT_EQ(j["label"], "npu-sim (modelled)");
  EXPECT_EQ(j["kind"], "conformer");
  EXPECT_EQ(j["family"], "parakeet");
  EXPECT_EQ(j["head"], "tdt");
  EXPECT_EQ(j["mel_frames"], 1000);
  EXPECT_EQ(j["encoded_frames"], 125);
  const int layers = j["layers"].get<int>();
  EXPECT_EQ(j["graphs"], layers + 1);
  EXPECT_GT(j["npu_ops"].get<int>(), 0);
  EXPECT_EQ(rows_with(j["placement"], "host", "glu+depthwise_conv1d+silu"), layers);
  EXPECT_GT(rows_with(j["placement"], "npu-sim", "matmul"), 0);
  EXPECT_GT(rows_with(j["placement"], "host", "conv2d"), 0);
  EXPECT_EQ(j["cost"]["label"], "npu-sim (modelled)");
  EXPECT_GT(j["cost"]["dispatches"].get<int>(), 0);
  EXPECT_GT(j["cost"]["ddr_bytes"].get<int64_t>(), 0);
  EXPECT_GT(j["cost"]["modelled_us"]["total"].get<double>(), 0.0);
  // The joint's encoder projection runs once per inference; the decode step per token uses GEMVs.
  bool enc_proj = false;
  for (const auto& op : j["ops"]) enc_proj |= op["node"] == "head.joint.enc" && op["placement"] == "npu-sim";
  EXPECT_TRUE(enc_proj);
  ASSERT_TRUE(j.contains("per_token"));
  bool gemv = false;
  for (const auto& r : j["per_token"]["placement"])
    gemv |= r["placement"] == "npu-sim" && r["design"].get<std::string>().rfind("gemv_", 0) == 0;
  EXPECT_TRUE(gemv) << j["per_token"].dump(1);
  EXPECT_EQ(j["per_token"]["cost"]["label"], "npu-sim (modelled)");
}

TEST(CliPlanConformer, GigaamCtcJsonAndSecondsScaleFrames) {
  const nlohmann::json a = plan_json("gigaam_ctc.ckpt");
  EXPECT_EQ(a["family"], "gigaam");
  EXPECT_EQ(a["head"], "ctc");
  EXPECT_FALSE(a.contains("per_token"));
  EXPECT_EQ(rows_with(a["placement"], "host", "log_softmax+argmax"), 1);
  EXPECT_EQ(rows_with(a["placement"], "host", "rope"), a["layers"].get<int>());  // rotary attention
  bool ctc = false;
  for (const auto& op : a["ops"]) ctc |= op["node"] == "head.ctc.linear" && op["placement"] == "npu-sim";
  EXPECT_TRUE(ctc);

  const nlohmann::json b = plan_json("gigaam_ctc.ckpt", " --seconds 20");
  // GigaAM keeps the last centred frame: 10 s = 1001 frames, 20 s = 2001; 4x subsampling.
  EXPECT_EQ(a["mel_frames"], 1001);
  EXPECT_EQ(b["mel_frames"], 2001);
  EXPECT_EQ(a["encoded_frames"], 251);
  EXPECT_EQ(b["encoded_frames"], 501);
  EXPECT_GT(b["cost"]["modelled_us"]["total"].get<double>(), a["cost"]["modelled_us"]["total"].get<double>());
  EXPECT_GT(b["cost"]["ddr_bytes"].get<int64_t>(), a["cost"]["ddr_bytes"].get<int64_t>());
}

TEST(CliPlanConformer, StoreName) {
  char tmpl[] = "/tmp/xdna-cli-plan-conformer-XXXXXX";
  const std::string store = mkdtemp(tmpl);
  auto r = run_shell(kNpu + " model import " + kArchives + "parakeet_ctc_bpe.nemo --name tiny-ctc --store " + store + " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = run_shell(kNpu + " plan tiny-ctc --store " + store + " --json --seconds 3 2>&1");
  std::filesystem::remove_all(store);
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["family"], "parakeet");
  EXPECT_EQ(j["head"], "ctc");
  EXPECT_EQ(j["mel_frames"], 300);

}

TEST(CliPlanConformer, GigaamRnntPerToken) {
  const auto r = run_shell(kNpu + " plan " + kArchives + "gigaam_rnnt.ckpt 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "rnnt head, per emitted token")) << r.out;
  EXPECT_TRUE(contains(r.out, "the host picks the token\n")) << r.out;  // no duration (that is TDT)
  EXPECT_TRUE(contains(r.out, "host: attention with a mask input")) << r.out;  // rel-pos biases
}

TEST(CliPlanConformer, BadSecondsIsAnError) {
  const auto r = run_shell(kNpu + " plan " + kArchives + "gigaam_ctc.ckpt --seconds 0 2>&1");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.out, "--seconds")) << r.out;
  const auto tiny = run_shell(kNpu + " plan " + kArchives + "parakeet_tdt_bpe.nemo --seconds 0.001 2>&1");
  EXPECT_NE(tiny.rc, 0);
  EXPECT_TRUE(contains(tiny.out, "too few for one encoder frame")) << tiny.out;
}

}  // namespace

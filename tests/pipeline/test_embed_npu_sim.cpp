// Embeddings with the encoder placed on [npu-sim, host]: the NPU-placed ops run with AIE2P
// numerics (bf16 operands, f32 accumulation, bf16 stores, lookup-table exp/reciprocal), the rest
// falls back to the host and the run report says so. Gate: cosine >= 0.999 against the host
// backend on the tiny BERT fixture; on the real all-MiniLM-L6-v2 (when present) the min cosine
// is printed and must stay >= 0.999 too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../encoder_test_util.h"
#include "host/host_backend.h"
#include "models/model_store.h"
#include "npu/sim_backend.h"
#include "pipeline/embed.h"

using namespace xdna;
namespace fs = std::filesystem;


namespace {

const std::string& kDir = xdna::testing::kEncoderFixtureDir;

// Min cosine of npu-sim against host over the texts; fills the sim's report.
double min_cosine_vs_host(const EmbeddingModel& m, const std::vector<std::string>& texts,
                          npu::NpuSimBackend& sim, EmbedResult& sim_result) {
  HostBackend host;
  const EmbedResult ref = m.embed(texts);
  EmbedOptions o;
  o.backends = {&sim, &host};
  sim_result = m.embed(texts, o);
  double min_cos = 1.0;
  for (size_t i = 0; i < texts.size(); ++i)
    min_cos = std::min(min_cos, xdna::testing::cosine(sim_result.items[i].vector.data(), ref.items[i].vector.data(),
                                                       ref.items[i].vector.size()));
  return min_cos;
}

}  // namespace

TEST(EmbedNpuSim, TinyBertMatchesHostAndReportsPlacement) {
  const EmbeddingModel m = EmbeddingModel::load(kDir + "tiny-bert-e5");
  const std::vector<std::string> texts = {"query: how much protein should a female eat",
                                          "passage: As a general guideline, the CDC's average "
                                          "requirement of protein for women ages 19 to 70 is 46 grams per day.",
                                          "a", "The quick brown fox jumps over the lazy dog."};
  npu::NpuSimBackend sim;
  EmbedResult r;
  const double min_cos = min_cosine_vs_host(m, texts, sim, r);
  std::printf("tiny-bert-e5 npu-sim vs host: min cosine %.6f\n", min_cos);
  EXPECT_GE(min_cos, 0.999);

  // Which ops ran where: matmuls, norms, gelu and residual adds on npu-sim; attention, the
  // embedding lookups and the shape ops fell back to the host.
  int sim_matmul = 0, sim_norm = 0, sim_gelu = 0, host_attention = 0, host_embedding = 0;
  for (const OpRecord& op : r.report.ops) {
    const bool on_sim = op.backend == "npu-sim (modelled)";
    EXPECT_EQ(op.fallback, !on_sim) << op.node;
    if (on_sim) {
      sim_matmul += op.op == OpKind::MatMul;
      sim_norm += op.op == OpKind::LayerNorm;
      sim_gelu += op.op == OpKind::Gelu;
    } else {
      EXPECT_EQ(op.backend, "host");
      EXPECT_NE(op.op, OpKind::MatMul) << op.node;
      host_attention += op.op == OpKind::Attention;
      host_embedding += op.op == OpKind::Embedding;
    }
  }
  EXPECT_EQ(sim_matmul, 2 * 6);  // 2 layers x (q, k, v, attn_out, mlp_in, mlp_out)
  EXPECT_EQ(sim_norm, 1 + 2 * 2);
  EXPECT_EQ(sim_gelu, 2);
  EXPECT_EQ(host_attention, 2 * 4);  // per layer, per sequence
  EXPECT_EQ(host_embedding, 3);
  EXPECT_GT(r.report.fallbacks(), 0);
  // Its head_dim (8) has no encoder attention design (multiples of 16); MiniLM's (32) does.
  EXPECT_NE(sim.refusals().at("attention").find("head_dim 8"), std::string::npos);
  const nlohmann::json summary = run_summary_json(r.report);
  EXPECT_TRUE(summary["backends"].contains("npu-sim (modelled)"));
  EXPECT_TRUE(summary["backends"].contains("host"));

  const npu::CostReport cost = sim.cost();
  EXPECT_EQ(cost.label, "npu-sim (modelled)");
  EXPECT_GT(cost.run.total_s, 0);
  EXPECT_GT(cost.compute_s, 0);
  EXPECT_GT(cost.run.ddr_bytes, 0);
  int sim_ops = 0;
  for (const OpRecord& op : r.report.ops) sim_ops += op.backend == "npu-sim (modelled)";
  EXPECT_EQ(cost.run.dispatches, sim_ops);
  EXPECT_GT(cost.run.configures, 0);
  EXPECT_LT(cost.run.configures, cost.run.dispatches);  // q, k, v share one design
  EXPECT_NE(cost.text().find("modelled"), std::string::npos);
}

// The real model, when its weights are present: min cosine of npu-sim against host.
TEST(EmbedNpuSimRealWeights, MiniLmMinCosineVsHost) {
#if XDNA_UNDER_ASAN
  GTEST_SKIP() << "skipped under AddressSanitizer (22M-parameter model: too slow instrumented)";
#endif
  std::string dir;
  if (const char* env = std::getenv("XDNA_MINILM_DIR")) dir = env;
  else dir = ModelStore(default_store_dir()).model_dir("all-minilm-l6-v2");
  if (!fs::exists(fs::path(dir) / "model.safetensors"))
    GTEST_SKIP() << "all-MiniLM-L6-v2 weights not found at " << dir
                 << ": run `npu model pull all-minilm-l6-v2` or set XDNA_MINILM_DIR";
  std::vector<std::string> texts;
  {
    std::ifstream in(kDir + "eval_sentences.txt", std::ios::binary);
    std::string line;
    while (std::getline(in, line) && texts.size() < 16) texts.push_back(line);
  }
  const EmbeddingModel m = EmbeddingModel::load(dir);
  npu::NpuSimBackend sim;
  EmbedResult r;
  const double min_cos = min_cosine_vs_host(m, texts, sim, r);
  std::printf("all-MiniLM-L6-v2 npu-sim vs host: %zu sentences, min cosine %.6f\n%s", texts.size(),
              min_cos, sim.cost().text().c_str());
  EXPECT_GE(min_cos, 0.999);
  // Attention (head_dim 32) ran on npu-sim: 6 layers x one op per sentence, none on the host.
  int sim_attention = 0, host_attention = 0;
  for (const OpRecord& op : r.report.ops)
    if (op.op == OpKind::Attention) (op.backend == "npu-sim (modelled)" ? sim_attention : host_attention) += 1;
  EXPECT_EQ(sim_attention, 6 * int(texts.size()));
  EXPECT_EQ(host_attention, 0);
  bool attention_design = false;
  for (const auto& [name, n] : sim.cost().designs) attention_design |= name.rfind("encoder_attention_", 0) == 0;
  EXPECT_TRUE(attention_design);
}

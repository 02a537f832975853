// A whole decode token of the tiny decoder fixtures (tests/fixtures/decoders: Qwen3- and
// Llama-shaped, random weights, HF safetensors) through the fused plan on npu-sim: every layer one
// decode_layer design, the final norm and LM head one lm_head design, executed functionally
// (sim_exec.h). Greedy tokens equal the host decoder's for a short prompt; every op but the
// embedding gather reports "npu-sim (modelled)"; the priced cost is one dispatch per token.
// (Links xdna_models for the fixture loader and the host decoder: tests/CMakeLists.txt.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>

#include "models/decoder.h"
#include "models/decoder_spec.h"
#include "models/spec.h"
#include "npu/sim_exec_decoder.h"
#include "weights/source.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/decoders/";

std::vector<float> values(const WeightSource& w, const std::string& name) { return w.get(name).to_vector(); }

// The fused plan's model from a DecoderSpec and its checkpoint (plain f32 copies of the weights).
SimDecoderModel sim_model(const DecoderSpec& s, const WeightSource& w) {
  SimDecoderModel m;
  m.shape = {s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, 1, s.qk_norm, s.act != Activation::Silu};
  m.kernel.eps = s.norm_eps;
  m.kernel.rms_offset = s.rms_offset;
  m.kernel.attn_scale = s.attn_scale;
  m.kernel.rope_interleaved = s.rope_layout == 0;
  m.vocab = s.vocab_size;
  m.embed = values(w, s.names.token_embd);
  m.embed_scale = s.embed_scale;
  for (int64_t i = 0; i < s.head_dim / 2; ++i)  // default RoPE, as the host computes it in f32
    m.inv_freq.push_back(1.0f / std::pow(s.rope_theta, float(2 * i) / float(s.head_dim)));
  const auto L = [](const std::string& p, int64_t i) { return layer_name(p, i); };
  for (int64_t i = 0; i < s.layers; ++i) {
    const DecoderWeightNames& n = s.names;
    SimLayerWeights lw;
    lw.attn_norm = values(w, L(n.attn_norm, i));
    lw.q = values(w, L(n.q, i)), lw.k = values(w, L(n.k, i)), lw.v = values(w, L(n.v, i));
    if (s.qk_norm) lw.q_norm = values(w, L(n.q_norm, i)), lw.k_norm = values(w, L(n.k_norm, i));
    lw.o = values(w, L(n.o, i));
    lw.ffn_norm = values(w, L(n.ffn_norm, i));
    lw.gate = values(w, L(n.gate, i)), lw.up = values(w, L(n.up, i)), lw.down = values(w, L(n.down, i));
    m.layers.push_back(std::move(lw));
  }
  m.final_norm = values(w, s.names.final_norm);
  m.head = !s.tied_embeddings && w.contains(s.names.output) ? values(w, s.names.output) : m.embed;
  return m;
}

int32_t argmax(const float* p, int64_t n) { return int32_t(std::max_element(p, p + n) - p); }

struct Fixture {
  DecoderSpec spec;
  std::shared_ptr<const WeightSource> weights;
};

Fixture load(const std::string& name) {
  std::ifstream f(kDir + name + "/config.json");
  const nlohmann::json cfg = nlohmann::json::parse(f);
  return {decoder_spec_from_config(cfg), open_weights(kDir + name + "/model.safetensors")};
}

}  // namespace

class SimFusedLlm : public ::testing::TestWithParam<const char*> {};

// Prompt of 4 tokens, then 8 greedy tokens: the same on npu-sim's fused plan as on the host.
TEST_P(SimFusedLlm, GreedyTokensMatchHost) {
  const Fixture fx = load(GetParam());
  const DecoderSpec& s = fx.spec;
  ASSERT_EQ(s.sliding_window, 0);
  ASSERT_FALSE(s.sandwich_norms);
  const std::vector<int32_t> prompt = {1, 17, 42, 99};
  constexpr int kNew = 8;

  Decoder host(s, fx.weights);
  DecoderState hs = host.new_state(32);
  DecoderStep hstep = host.forward(prompt, hs);
  std::vector<int32_t> host_tokens;
  std::vector<std::vector<float>> host_logits;
  for (int t = 0; t < kNew; ++t) {
    const float* l = hstep.logits.data<float>();
    host_logits.emplace_back(l, l + s.vocab_size);
    host_tokens.push_back(argmax(l, s.vocab_size));
    hstep = host.forward({host_tokens.back()}, hs);
  }

  const SimDecoderModel m = sim_model(s, *fx.weights);
  SimDecoderState st(m, 32);
  SimTokenResult r;
  for (int32_t id : prompt) r = fused_decode_token(m, id, st);
  std::vector<int32_t> sim_tokens;
  double worst = 0;
  for (int t = 0; t < kNew; ++t) {
    double span = 0, err = 0;
    for (int64_t v = 0; v < s.vocab_size; ++v) {
      span = std::max(span, std::fabs(double(host_logits[size_t(t)][size_t(v)])));
      err = std::max(err, std::fabs(double(r.logits[size_t(v)]) - host_logits[size_t(t)][size_t(v)]));
    }
    worst = std::max(worst, err / span);
    sim_tokens.push_back(argmax(r.logits.data(), s.vocab_size));
    // Every op of the token ran in the fused plan on npu-sim, but the embedding row gather.
    for (const OpRecord& op : r.report.ops) {
      if (op.node == "embed") EXPECT_EQ(op.backend, "host");
      else EXPECT_EQ(op.backend, "npu-sim (modelled)") << op.node;
    }
    EXPECT_EQ(r.report.fallbacks(), 0);
    EXPECT_EQ(r.cost.run.dispatches, 1);
    EXPECT_EQ(r.cost.label, "npu-sim (modelled)");
    EXPECT_EQ(int64_t(r.cost.designs.size()), 2);  // one decode_layer design for every layer + the LM head
    EXPECT_GT(r.cost.run.total_s, 0.0);
    r = fused_decode_token(m, sim_tokens.back(), st);
  }
  std::printf("%s: %d greedy tokens, host %s, npu-sim fused %s; worst max|dlogit| / max|logit| %.2e\n",
              GetParam(), kNew, ::testing::PrintToString(host_tokens).c_str(),
              ::testing::PrintToString(sim_tokens).c_str(), worst);
  EXPECT_EQ(sim_tokens, host_tokens);
  EXPECT_LE(worst, 0.05);  // bf16 weights and activations through 2 layers
  EXPECT_EQ(r.report.ops.size(), size_t(1 + s.layers * (s.qk_norm ? 14 : 13) + 2));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SimFusedLlm, ::testing::Values("qwen3", "llama"));

TEST(SimFusedLlmInput, RejectsBadTokenIds) {
  const Fixture fx = load("qwen3");
  const SimDecoderModel m = sim_model(fx.spec, *fx.weights);
  SimDecoderState st(m, 4);
  EXPECT_THROW(fused_decode_token(m, -1, st), std::invalid_argument);
  EXPECT_THROW(fused_decode_token(m, int32_t(m.vocab), st), std::invalid_argument);
  for (int i = 0; i < 4; ++i) fused_decode_token(m, 3, st);
  EXPECT_THROW(fused_decode_token(m, 3, st), std::invalid_argument);  // cache full
}

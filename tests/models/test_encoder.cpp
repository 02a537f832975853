// Encoder spec parsing and the encoder forward pass against transformers on tiny random-init
// models of each family (tests/fixtures/encoders/, written by scripts/make_encoder_fixtures.py).
// Tolerance: max abs error <= 1e-4 on the last hidden state (the models' weights are large on
// purpose, so activations are O(1) and attention is far from uniform).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/encoder.h"
#include "models/spec.h"
#include "weights/source.h"
#include "../encoder_test_util.h"

using namespace xdna;
using nlohmann::json;

namespace {

const std::string& kDir = xdna::testing::kEncoderFixtureDir;
using xdna::testing::read_json;

json minilm_config() {
  return json::parse(R"({"model_type": "bert", "hidden_size": 384, "num_hidden_layers": 6,
    "num_attention_heads": 12, "intermediate_size": 1536, "max_position_embeddings": 512,
    "vocab_size": 30522, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "type_vocab_size": 2,
    "pad_token_id": 0, "position_embedding_type": "absolute"})");
}

struct Loaded {
  std::shared_ptr<WeightSource> weights;
  std::unique_ptr<Encoder> encoder;
  json ref;
};

Loaded load(const std::string& name) {
  Loaded l;
  const std::string dir = kDir + name;
  l.weights = open_weights(dir);
  l.encoder = std::make_unique<Encoder>(spec_from_config(read_json(dir + "/config.json")), l.weights);
  l.ref = read_json(dir + "/reference.json");
  return l;
}

// Max abs difference between rows [r0, r0 + T) of `hidden` and the reference [T, D].
double max_err(const Tensor& hidden, int64_t r0, const json& ref) {
  const int64_t D = hidden.dim(1);
  double err = 0.0;
  for (size_t t = 0; t < ref.size(); ++t) {
    EXPECT_EQ(static_cast<int64_t>(ref[t].size()), D);
    for (int64_t d = 0; d < D; ++d)
      err = std::max(err, std::abs(double(hidden.data<float>()[(r0 + t) * D + d]) - ref[t][d].get<double>()));
  }
  return err;
}

// Runs every reference input in one packed batch and alone; both must match transformers.
void check_family(const std::string& name) {
  Loaded l = load(name);
  std::vector<std::vector<int32_t>> ids;
  for (const auto& in : l.ref["inputs"]) ids.push_back(in["ids"].get<std::vector<int32_t>>());
  ASSERT_GE(ids.size(), 3u);

  EncoderOutput batch = l.encoder->forward(ids);
  ASSERT_EQ(batch.offsets.size(), ids.size() + 1);
  double worst = 0.0;
  for (size_t b = 0; b < ids.size(); ++b) {
    const double e = max_err(batch.hidden, batch.offsets[b], l.ref["inputs"][b]["hidden"]);
    EXPECT_LE(e, 1e-4) << name << " input " << b << " (batched)";
    worst = std::max(worst, e);
    EncoderOutput one = l.encoder->forward({ids[b]});
    EXPECT_LE(max_err(one.hidden, 0, l.ref["inputs"][b]["hidden"]), 1e-4) << name << " input " << b;
  }
  std::printf("%s: max abs err %.3g over %zu inputs\n", name.c_str(), worst, ids.size());
  // Every op ran somewhere and the report says where.
  ASSERT_FALSE(batch.report.ops.empty());
  for (const auto& op : batch.report.ops) EXPECT_EQ(op.backend, "host");
}

}  // namespace

TEST(EncoderSpec, MiniLmBert) {
  const EncoderSpec s = spec_from_config(minilm_config());
  EXPECT_EQ(s.family, "bert");
  EXPECT_EQ(s.hidden, 384);
  EXPECT_EQ(s.layers, 6);
  EXPECT_EQ(s.heads, 12);
  EXPECT_EQ(s.head_dim, 32);
  EXPECT_EQ(s.intermediate, 1536);
  EXPECT_EQ(s.max_positions, 512);
  EXPECT_EQ(s.act, Activation::Gelu);
  EXPECT_FLOAT_EQ(s.norm_eps, 1e-12f);
  EXPECT_FALSE(s.pre_norm);
  EXPECT_EQ(s.positions, PositionKind::Absolute);
  EXPECT_EQ(s.position_offset, 0);
  EXPECT_EQ(s.type_vocab_size, 2);
  EXPECT_EQ(layer_name(s.names.q, 3), "encoder.layer.3.attention.self.query.weight");
  EXPECT_EQ(bias_name(layer_name(s.names.mlp_out, 5)), "encoder.layer.5.output.dense.bias");
}

TEST(EncoderSpec, RobertaOffsetsPositions) {
  json c = minilm_config();
  c["model_type"] = "xlm-roberta";
  c["pad_token_id"] = 1;
  c["max_position_embeddings"] = 514;
  c["hidden_act"] = "gelu_new";
  const EncoderSpec s = spec_from_config(c);
  EXPECT_EQ(s.position_offset, 2);
  EXPECT_EQ(s.max_positions, 512);
  EXPECT_EQ(s.act, Activation::GeluTanh);
}

TEST(EncoderSpec, ModernBertOldAndNewConfigKeys) {
  const EncoderSpec s = spec_from_config(read_json(kDir + "tiny-modernbert/config.json"));
  EXPECT_EQ(s.family, "modernbert");
  EXPECT_TRUE(s.gated_mlp);
  EXPECT_TRUE(s.pre_norm);
  EXPECT_FALSE(s.norm_bias);
  EXPECT_FALSE(s.attn_bias);
  EXPECT_EQ(s.positions, PositionKind::Rotary);
  EXPECT_FLOAT_EQ(s.rope_theta, 160000.0f);
  EXPECT_FLOAT_EQ(s.rope_theta_local, 10000.0f);
  EXPECT_EQ(s.local_window, 4);
  EXPECT_EQ(s.global_every, 3);
  EXPECT_TRUE(s.layer_is_global(0));
  EXPECT_FALSE(s.layer_is_global(1));
  EXPECT_TRUE(s.layer_is_global(3));
  // The pre-transformers-5 form (as ModernBERT-base's config.json on the Hub has it).
  json old = json::parse(R"({"model_type": "modernbert", "hidden_size": 768, "num_hidden_layers": 22,
    "num_attention_heads": 12, "intermediate_size": 1152, "max_position_embeddings": 8192,
    "vocab_size": 50368, "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0,
    "local_attention": 128, "local_rope_theta": 10000.0, "norm_eps": 1e-05, "norm_bias": false})");
  const EncoderSpec o = spec_from_config(old);
  EXPECT_EQ(o.local_window, 64);
  EXPECT_EQ(o.global_every, 3);
  EXPECT_EQ(o.head_dim, 64);
  // A layer pattern that is not periodic is refused rather than misread.
  json bad = read_json(kDir + "tiny-modernbert/config.json");
  bad["layer_types"] = {"full_attention", "full_attention", "sliding_attention", "full_attention"};
  EXPECT_THROW(spec_from_config(bad), std::invalid_argument);
}

TEST(EncoderSpec, Esm2) {
  const EncoderSpec s = spec_from_config(read_json(kDir + "tiny-esm2/config.json"));
  EXPECT_EQ(s.family, "esm");
  EXPECT_EQ(s.positions, PositionKind::Rotary);
  EXPECT_TRUE(s.pre_norm);
  EXPECT_TRUE(s.token_dropout);
  EXPECT_EQ(s.mask_token_id, 32);
  EXPECT_EQ(s.names.final_norm, "encoder.emb_layer_norm_after.weight");
  EXPECT_TRUE(s.names.embed_norm.empty());
}

TEST(EncoderSpec, BadConfigsNameTheProblem) {
  json c = minilm_config();
  c["model_type"] = "llama";
  try {
    spec_from_config(c, "x/config.json");
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("x/config.json"), std::string::npos);
  }
  c = minilm_config();
  c.erase("hidden_size");
  EXPECT_THROW(spec_from_config(c), std::invalid_argument);
  c = minilm_config();
  c["num_attention_heads"] = 7;
  EXPECT_THROW(spec_from_config(c), std::invalid_argument);
  c = minilm_config();
  c["position_embedding_type"] = "relative_key";
  EXPECT_THROW(spec_from_config(c), std::invalid_argument);
  c = minilm_config();
  c["hidden_act"] = "mish";
  EXPECT_THROW(spec_from_config(c), std::invalid_argument);
  EXPECT_THROW(spec_from_config(json::array()), std::invalid_argument);
}

TEST(Encoder, BertMatchesTransformers) { check_family("tiny-bert-e5"); }
TEST(Encoder, ModernBertMatchesTransformers) { check_family("tiny-modernbert"); }
TEST(Encoder, Esm2MatchesTransformers) { check_family("tiny-esm2"); }

TEST(Encoder, ModernBertLocalWindowMatters) {
  // The longest input is longer than the local window: dropping the window must change it.
  Loaded l = load("tiny-modernbert");
  EncoderSpec global_only = l.encoder->spec();
  global_only.local_window = 0;
  Encoder g(global_only, l.weights);
  const auto ids = l.ref["inputs"][3]["ids"].get<std::vector<int32_t>>();
  ASSERT_GT(static_cast<int64_t>(ids.size()), 2 * l.encoder->spec().local_window + 1);
  EXPECT_GT(max_err(g.forward({ids}).hidden, 0, l.ref["inputs"][3]["hidden"]), 1e-2);
}

TEST(Encoder, RejectsBadInput) {
  Loaded l = load("tiny-bert-e5");
  EXPECT_THROW(l.encoder->forward({}), std::invalid_argument);
  EXPECT_THROW(l.encoder->forward({{}}), std::invalid_argument);
  std::vector<int32_t> too_long(l.encoder->spec().max_positions + 1, 5);
  EXPECT_THROW(l.encoder->forward({too_long}), std::invalid_argument);
  EXPECT_THROW(l.encoder->forward({{2, 5, 3}}, {{0, 7, 0}}), std::invalid_argument);  // type id
  EXPECT_THROW(l.encoder->forward({{2, 5, 3}}, {{0, 0}}), std::invalid_argument);     // length
  EXPECT_THROW(l.encoder->forward({{2, 1 << 30, 3}}), std::invalid_argument);         // id
}

TEST(Encoder, FindsPrefixedNamesAndReportsMissingTensors) {
  Loaded l = load("tiny-bert-e5");
  EXPECT_EQ(l.encoder->weight_prefix(), "");
  // The ESM checkpoint saved by EsmModel has no "esm." prefix; a spec for another family fails
  // with the missing tensor's name.
  EncoderSpec wrong = l.encoder->spec();
  wrong.names.mlp_norm = "encoder.layer.{i}.no_such_norm.weight";
  try {
    Encoder e(wrong, l.weights);
    FAIL() << "expected a throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.layer.0.no_such_norm.weight"), std::string::npos);
  }
}

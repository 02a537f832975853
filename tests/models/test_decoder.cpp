// Decoder spec parsing and the decoder against transformers (f32) on tiny random-init models of
// each family, from both their safetensors checkpoint and the GGUF llama.cpp's converter would
// write (tests/fixtures/decoders/, scripts/make_decoder_fixtures.py): a 64-token prefill (every
// row's logits) then 32 decode steps fed the reference's greedy tokens, each step's logits within
// 1e-4 x max|logit| of the reference. Plus bad input: unknown architecture, missing tensor,
// out-of-vocabulary id, context overflow.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "host/host_backend.h"
#include "models/decoder.h"
#include "models/model_store.h"
#include "models/decoder_spec.h"
#include "weights/gguf.h"
#include "weights/source.h"

using namespace xdna;
using nlohmann::json;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/decoders/";

json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return json::parse(f);
}

struct Reference {
  std::vector<int32_t> prompt, decoded;
  Tensor prefill, decode;  // [64, V], [32, V]
};

Reference load_reference(const std::string& name) {
  auto src = open_weights(kDir + name + "/reference.safetensors");
  Reference r;
  const auto ids = [&](const char* n) {
    const Tensor t = src->get(n).contiguous();
    return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  };
  r.prompt = ids("prompt");
  r.decoded = ids("decoded");
  r.prefill = src->get("prefill_logits").clone();
  r.decode = src->get("decode_logits").clone();
  return r;
}

std::unique_ptr<Decoder> load_decoder(const std::string& name, const std::string& format) {
  if (format == "gguf") {
    auto g = std::make_shared<GgufFile>(kDir + name + "/model.gguf");
    return std::make_unique<Decoder>(decoder_spec_from_gguf(*g), g);
  }
  std::shared_ptr<WeightSource> w = open_weights(kDir + name + "/model.safetensors");
  return std::make_unique<Decoder>(decoder_spec_from_config(read_json(kDir + name + "/config.json")), w);
}

// max |a - b| over matching rows, and max |b|.
void compare(const Tensor& got, const Tensor& want, float& err, float& scale) {
  ASSERT_EQ(got.shape(), want.shape());
  const float* a = got.data<float>();
  const float* b = want.data<float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
}

// ---- spec ----------------------------------------------------------------------------------------

TEST(DecoderSpec, GemmaConfigOldStyleKeys) {
  // Gemma 3 270M's config.json as published (transformers 4.x names).
  const json c = json::parse(R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "vocab_size": 262144, "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": null,
    "query_pre_attn_scalar": 256, "sliding_window": 512, "sliding_window_pattern": 6,
    "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": null, "bos_token_id": 2,
    "eos_token_id": [1, 106]})");
  const DecoderSpec s = decoder_spec_from_config(c);
  EXPECT_EQ(s.family, "gemma3");
  EXPECT_EQ(s.layers, 18);
  EXPECT_EQ(s.sliding_window, 512);
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(s.is_local(i), (i + 1) % 6 != 0) << i;
  EXPECT_FLOAT_EQ(s.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(s.rope_theta_local, 1e4f);
  EXPECT_FLOAT_EQ(s.attn_scale, 1.0f / 16.0f);
  EXPECT_FLOAT_EQ(s.embed_scale, std::sqrt(640.0f));
  EXPECT_FLOAT_EQ(s.rms_offset, 1.0f);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_EQ(s.eos_token_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(s.act, Activation::GeluTanh);
}

TEST(DecoderSpec, LlamaRopeScalingOldStyle) {
  const json c = json::parse(R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": true})");
  const DecoderSpec s = decoder_spec_from_config(c);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_FLOAT_EQ(s.rope_scale_factor, 32.0f);
  EXPECT_EQ(s.rope_original_max_positions, 8192);
  EXPECT_EQ(s.sliding_window, 0);
  EXPECT_FALSE(s.qk_norm);
  EXPECT_TRUE(s.names.output.empty());  // tied
}

TEST(DecoderSpec, FixtureConfigsAndGgufAgree) {
  for (const std::string name : {"llama", "llama3", "qwen3", "gemma3"}) {
    const DecoderSpec hf = decoder_spec_from_config(read_json(kDir + name + "/config.json"));
    const GgufFile g(kDir + name + "/model.gguf");
    const DecoderSpec gg = decoder_spec_from_gguf(g);
    EXPECT_EQ(hf.family, gg.family) << name;
    EXPECT_EQ(hf.layers, gg.layers) << name;
    EXPECT_EQ(hf.kv_heads, gg.kv_heads) << name;
    EXPECT_EQ(hf.head_dim, gg.head_dim) << name;
    EXPECT_EQ(hf.layer_is_local, gg.layer_is_local) << name;
    EXPECT_EQ(hf.tied_embeddings, gg.tied_embeddings) << name;
    EXPECT_EQ(gg.rope_layout, name.starts_with("llama") ? 0 : 1) << name;
  }
  const DecoderSpec g = decoder_spec_from_config(read_json(kDir + "gemma3/config.json"));
  EXPECT_EQ(g.layer_is_local, (std::vector<bool>{true, false, true, false}));
  EXPECT_FLOAT_EQ(g.rope_linear_factor, 2.0f);
}

TEST(DecoderSpec, UnknownArchitectureIsNamed) {
  json c = read_json(kDir + "llama/config.json");
  c["model_type"] = "mamba";
  try {
    decoder_spec_from_config(c, "x/config.json");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mamba"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("x/config.json"), std::string::npos) << e.what();
  }
  c = read_json(kDir + "llama/config.json");
  c.erase("hidden_size");
  EXPECT_THROW(decoder_spec_from_config(c), std::invalid_argument);
}

// ---- forward against transformers -------------------------------------------------------------

struct Case {
  std::string name, format;
};

class DecoderFixture : public ::testing::TestWithParam<Case> {};

TEST_P(DecoderFixture, MatchesTransformers) {
  const Case c = GetParam();
  const Reference ref = load_reference(c.name);
  auto dec = load_decoder(c.name, c.format);
  DecoderState st = dec->new_state();
  EXPECT_EQ(st.context_length(), 128);

  float err = 0, scale = 0;
  DecoderStep step = dec->forward(ref.prompt, st, /*all_logits=*/true);
  compare(step.logits, ref.prefill, err, scale);
  EXPECT_EQ(st.position, 64);
  const float prefill_err = err;
  for (size_t j = 0; j < ref.decoded.size(); ++j) {
    step = dec->forward({ref.decoded[j]}, st);
    compare(step.logits, ref.decode.row(static_cast<int64_t>(j)).reshape({1, -1}), err, scale);
  }
  EXPECT_EQ(st.position, 96);
  EXPECT_GT(scale, 1.0f);
  EXPECT_LE(err, 1e-4f * scale) << "prefill error " << prefill_err << ", max|logit| " << scale;
  char rel[32];
  std::snprintf(rel, sizeof rel, "%.3g", err / scale);
  RecordProperty("rel_error", rel);

  // Prefill without all_logits gives only the last row, the same numbers.
  DecoderState st2 = dec->new_state(70);
  const DecoderStep last = dec->forward(ref.prompt, st2);
  ASSERT_EQ(last.logits.shape(), (Shape{1, ref.prefill.dim(1)}));
  float e2 = 0, s2 = 0;
  compare(last.logits, ref.prefill.row(63).reshape({1, -1}), e2, s2);
  EXPECT_LE(e2, 1e-4f * scale);
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderFixture,
                         ::testing::Values(Case{"llama", "hf"}, Case{"llama", "gguf"}, Case{"llama3", "hf"},
                                           Case{"llama3", "gguf"}, Case{"qwen3", "hf"}, Case{"qwen3", "gguf"},
                                           Case{"gemma3", "hf"}, Case{"gemma3", "gguf"}),
                         [](const auto& info) { return info.param.name + "_" + info.param.format; });

// The fixtures exercise what they claim: the sliding window, the llama q/k permutation of the
// GGUF, llama3 scaling and gemma's norm offset each change the prefill logits by far more than
// the tolerance when ignored.
TEST(DecoderFixtureSensitivity, EachFeatureMatters) {
  const auto prefill_error = [](const std::string& name, const std::string& format,
                                const std::function<void(DecoderSpec&)>& mutate) {
    const Reference ref = load_reference(name);
    DecoderSpec s;
    std::shared_ptr<WeightSource> w;
    if (format == "gguf") {
      auto g = std::make_shared<GgufFile>(kDir + name + "/model.gguf");
      s = decoder_spec_from_gguf(*g);
      w = g;
    } else {
      s = decoder_spec_from_config(read_json(kDir + name + "/config.json"));
      w = open_weights(kDir + name + "/model.safetensors");
    }
    mutate(s);
    Decoder dec(s, w);
    DecoderState st = dec.new_state();
    float err = 0, scale = 0;
    compare(dec.forward(ref.prompt, st, true).logits, ref.prefill, err, scale);
    return err / scale;
  };
  EXPECT_LT(prefill_error("gemma3", "hf", [](DecoderSpec&) {}), 1e-4);
  EXPECT_GT(prefill_error("gemma3", "hf", [](DecoderSpec& s) { s.sliding_window = 0; }), 1e-2);
  EXPECT_GT(prefill_error("gemma3", "hf", [](DecoderSpec& s) { s.rope_linear_factor = 1; }), 1e-2);
  EXPECT_GT(prefill_error("gemma3", "gguf", [](DecoderSpec& s) { s.rms_offset = 1; }), 1e-2);
  EXPECT_GT(prefill_error("llama", "gguf", [](DecoderSpec& s) { s.rope_layout = 1; }), 1e-2);
  EXPECT_GT(prefill_error("llama3", "hf", [](DecoderSpec& s) { s.rope_scale_factor = 0; }), 1e-2);
  EXPECT_GT(prefill_error("llama3", "gguf", [](DecoderSpec& s) { s.names.rope_freqs.clear(); }), 1e-2);
}

// ---- bad input ----------------------------------------------------------------------------------

TEST(Decoder, MissingTensorIsNamed) {
  // The llama config against the qwen3 weights: qwen3 has no lm_head (tied), llama wants one,
  // but the first difference is the kv projection shape (llama has 2 kv heads, qwen3 too) -- so
  // use gemma3's names, which qwen3's file lacks.
  DecoderSpec s = decoder_spec_from_config(read_json(kDir + "qwen3/config.json"));
  s.names.post_attn_norm = "model.layers.{i}.no_such_norm.weight";
  s.sandwich_norms = true;
  std::shared_ptr<WeightSource> w = open_weights(kDir + "qwen3/model.safetensors");
  try {
    Decoder d(s, w);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.no_such_norm.weight"), std::string::npos) << e.what();
  }
  // Wrong shape: a config claiming a larger hidden size.
  json c = read_json(kDir + "qwen3/config.json");
  c["intermediate_size"] = 96;
  try {
    Decoder d(decoder_spec_from_config(c), w);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(Decoder, BadIdsAndContextOverflow) {
  auto dec = load_decoder("llama", "hf");
  DecoderState st = dec->new_state(10);
  EXPECT_EQ(st.context_length(), 10);
  try {
    dec->forward({1, 128}, st);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("128"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dec->forward({-1}, st), std::invalid_argument);
  EXPECT_THROW(dec->forward({}, st), std::invalid_argument);
  EXPECT_EQ(st.position, 0);  // failed steps leave the state alone
  dec->forward({1, 2, 3, 4, 5, 6}, st);
  try {
    dec->forward({1, 2, 3, 4, 5}, st);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("11"), std::string::npos) << m;  // needed
    EXPECT_NE(m.find("10"), std::string::npos) << m;  // available
  }
  EXPECT_EQ(st.position, 6);
  // A budget caps the context; one that cannot hold a token throws.
  const uint64_t per_token = dec->kv_cache_bytes(1);
  EXPECT_EQ(per_token, 2u * 2u * 2u * 16u * 4u);
  EXPECT_EQ(dec->new_state(0, per_token * 20).context_length(), 20);
  EXPECT_EQ(dec->new_state(0).context_length(), 128);
  EXPECT_THROW(dec->new_state(0, per_token - 1), std::invalid_argument);
}

TEST(Decoder, RewindReusesTheCache) {
  // Truncating the cache and resetting the position replays a suffix with the same logits.
  const Reference ref = load_reference("qwen3");
  auto dec = load_decoder("qwen3", "hf");
  DecoderState st = dec->new_state();
  dec->forward(ref.prompt, st);
  const Tensor first = dec->forward({ref.decoded[0]}, st).logits;
  st.cache.truncate(64);
  st.position = 64;
  const Tensor again = dec->forward({ref.decoded[0]}, st).logits;
  float err = 0, scale = 0;
  compare(again, first, err, scale);
  EXPECT_EQ(err, 0.0f);
}

TEST(KvWrite, WritesRowsInPlaceAndReturnsThePrefix) {
  host::KvCache cache(1, 8, 2, 4);
  const Tensor x = Tensor::from_vector({2, 2, 4}, std::vector<float>(16, 3.0f));
  Node n{OpKind::KvWrite, {}, {}, 0, "kv"};
  n.attrs.start = 5;
  HostBackend host;
  const Tensor in[] = {cache.key_storage(0), x};
  const Tensor y = host.compute(n, in);
  EXPECT_EQ(y.shape(), (Shape{7, 2, 4}));
  EXPECT_EQ(y.raw(), cache.key_storage(0).raw());  // a view of the cache, not a copy
  const Tensor rows = cache.key_storage(0).contiguous();  // [8, 2, 4], whatever the storage order
  EXPECT_EQ(rows.data<float>()[5 * 8], 3.0f);
  EXPECT_EQ(rows.data<float>()[7 * 8 - 1], 3.0f);
  n.attrs.start = 7;  // 7 + 2 rows > 8
  EXPECT_THROW(host.compute(n, in), std::invalid_argument);
  cache.set_length(7);
  EXPECT_EQ(cache.keys(0).shape(), (Shape{7, 2, 4}));
  EXPECT_THROW(cache.set_length(9), std::invalid_argument);
}

// ---- real weights (skipped unless pulled; "Slow": 250 MB of weights, ~35 s under ASan) -----

std::string gemma_path() {
  if (const char* p = std::getenv("XDNA_GEMMA3_GGUF")) return p;
  return xdna::ModelStore(xdna::default_store_dir()).model_dir("gemma3-270m") + "/gemma-3-270m-q4_k_m.gguf";
}

TEST(DecoderReal, Gemma3_270mGreedyContinuationSlow) {
  const std::string path = gemma_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (npu model pull gemma3-270m)";
  auto g = std::make_shared<GgufFile>(path);
  const DecoderSpec spec = decoder_spec_from_gguf(*g);
  EXPECT_EQ(spec.vocab_size, 262144);
  EXPECT_EQ(spec.layers, 18);
  EXPECT_EQ(spec.sliding_window, 512);
  EXPECT_EQ(spec.eos_token_ids, (std::vector<int32_t>{1, 106}));  // <eos>, <end_of_turn>
  Decoder dec(spec, g);
  DecoderState st = dec.new_state(256);
  // "<bos>The capital of France is" in Gemma 3's vocabulary.
  const std::vector<int32_t> prompt{2, 818, 5279, 529, 7001, 563};
  auto t0 = std::chrono::steady_clock::now();
  DecoderStep s = dec.forward(prompt, st);
  const double prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int32_t> out;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) {
    const float* l = s.logits.data<float>();
    const int32_t next = static_cast<int32_t>(std::max_element(l, l + s.logits.numel()) - l);
    out.push_back(next);
    s = dec.forward({next}, st);
  }
  const double decode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::string ids;
  for (int32_t id : out) ids += std::to_string(id) + " ";
  std::printf("gemma3-270m greedy: %s\nprefill %.1f ms (%zu tokens), decode %.2f tok/s\n", ids.c_str(),
              prefill_ms, prompt.size(), 8e3 / decode_ms);
  const auto tokens = g->get_string_array("tokenizer.ggml.tokens");
  std::string text;
  for (int32_t id : out) text += tokens.at(static_cast<size_t>(id));
  std::printf("text: %s\nlast decode step:\n%s", text.c_str(), s.report.summary().c_str());
  auto ops = s.report.ops;
  std::sort(ops.begin(), ops.end(), [](const OpRecord& a, const OpRecord& b) { return a.ms > b.ms; });
  for (size_t i = 0; i < std::min<size_t>(6, ops.size()); ++i)
    std::printf("  %-20s %8.3f ms\n", ops[i].node.c_str(), ops[i].ms);
  // A base model's greedy continuation; it stays on topic (random or mis-normed weights do not).
  EXPECT_NE(text.find("France"), std::string::npos) << text;
}

}  // namespace

// The embeddings pipeline (tokenizer -> encoder -> pooling head) against sentence-transformers /
// transformers: tiny random-init models (max abs err <= 1e-4) and, when its weights are present,
// the real all-MiniLM-L6-v2 on the committed evaluation set (cosine >= 0.9999 on every sentence).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "../encoder_test_util.h"
#include "models/model_store.h"
#include "pipeline/embed.h"
#include "weights/bake.h"

using namespace xdna;
using nlohmann::json;
namespace fs = std::filesystem;


namespace {

const std::string& kDir = xdna::testing::kEncoderFixtureDir;
using xdna::testing::cosine;
using xdna::testing::read_json;

double max_abs(const std::vector<float>& a, const json& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double e = 0.0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i)
    e = std::max(e, std::abs(double(a[i]) - ref[i].get<double>()));
  return e;
}

std::vector<std::string> texts_of(const json& ref) {
  std::vector<std::string> t;
  for (const auto& in : ref["inputs"]) t.push_back(in["text"]);
  return t;
}

}  // namespace

TEST(Pooling, ModesAndNormalisation) {
  Tensor h = Tensor::from_vector({4, 2}, {1, 2, 3, 4, 5, -6, 7, 8});
  EXPECT_EQ(pool_rows(h, 1, 4, Pooling::Cls, false), (std::vector<float>{3, 4}));
  EXPECT_EQ(pool_rows(h, 1, 4, Pooling::LastToken, false), (std::vector<float>{7, 8}));
  EXPECT_EQ(pool_rows(h, 1, 4, Pooling::Max, false), (std::vector<float>{7, 8}));
  EXPECT_EQ(pool_rows(h, 1, 4, Pooling::Mean, false), (std::vector<float>{5, 2}));
  const auto s = pool_rows(h, 0, 4, Pooling::MeanSqrtLen, false);
  EXPECT_FLOAT_EQ(s[0], 16.0f / 2.0f);
  const auto n = pool_rows(h, 0, 1, Pooling::Cls, true);
  EXPECT_NEAR(n[0], 1 / std::sqrt(5.0), 1e-7);
  EXPECT_NEAR(n[1], 2 / std::sqrt(5.0), 1e-7);
  EXPECT_THROW(pool_rows(h, 2, 2, Pooling::Mean, false), std::invalid_argument);
  EXPECT_THROW(pool_rows(h, 0, 5, Pooling::Mean, false), std::invalid_argument);
}

TEST(Head, ReadsSentenceTransformersFiles) {
  std::map<std::string, std::string> files = {
      {"modules.json", R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
                           {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])"},
      {"1_Pooling/config.json", R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false})"},
      {"sentence_bert_config.json", R"({"max_seq_length": 128})"}};
  const ModelFileReader reader = [&](const std::string& n) -> std::optional<std::string> {
    auto it = files.find(n);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  EncoderSpec spec;
  spec.family = "bert";
  HeadConfig h = head_for_model(reader, spec, json::object());
  EXPECT_EQ(h.pooling, Pooling::Cls);
  EXPECT_FALSE(h.normalize);
  EXPECT_EQ(h.max_length, 128u);
  EXPECT_EQ(h.source, "sentence-transformers");
  files["1_Pooling/config.json"] = R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true})";
  EXPECT_THROW(head_for_model(reader, spec, json::object()), std::runtime_error);
  files["modules.json"] = "[";
  EXPECT_THROW(head_for_model(reader, spec, json::object()), std::runtime_error);
  files.clear();
  h = head_for_model(reader, spec, json::object());
  EXPECT_EQ(h.pooling, Pooling::Mean);
  EXPECT_EQ(h.source, "default");
}

// The sentence-transformers embeddings of a tiny random BERT saved with `pooling`.
void expect_matches_sentence_transformers(const std::string& name, Pooling pooling) {
  const json ref = read_json(kDir + name + "/reference.json");
  EmbeddingModel m = EmbeddingModel::load(kDir + name);
  EXPECT_EQ(m.head().pooling, pooling);
  EXPECT_TRUE(m.head().normalize);
  EXPECT_EQ(m.max_length(), 64u);
  const EmbedResult r = m.embed(texts_of(ref));
  ASSERT_EQ(r.items.size(), ref["inputs"].size());
  for (size_t i = 0; i < r.items.size(); ++i) {
    const json& in = ref["inputs"][i];
    EXPECT_EQ(r.items[i].tokens, in["ids"].size()) << i;
    EXPECT_FALSE(r.items[i].truncated);
    EXPECT_LE(max_abs(r.items[i].vector, in["embedding"]), 1e-4) << "input " << i;
  }
  EXPECT_FALSE(r.report.ops.empty());
}

TEST(Embed, TinyBertMatchesSentenceTransformers) {
  expect_matches_sentence_transformers("tiny-bert-e5", Pooling::Mean);
}

// bge-small-en-v1.5's layout (CLS pooling + Normalize, ST's single-key "pooling_mode": "cls"):
// the architecture the blocked real weights would use.
TEST(Embed, TinyBgeStyleClsPoolingMatchesSentenceTransformers) {
  expect_matches_sentence_transformers("tiny-bert-bge", Pooling::Cls);
}

TEST(Embed, TruncationIsReported) {
  EmbeddingModel m = EmbeddingModel::load(kDir + "tiny-bert-e5");
  EmbedOptions o;
  o.max_length = 5;
  const EmbedResult r = m.embed({"The quick brown fox jumps over the lazy dog.", "a"}, o);
  EXPECT_TRUE(r.items[0].truncated);
  EXPECT_EQ(r.items[0].tokens, 5u);
  EXPECT_GT(r.items[0].original_tokens, 5u);
  EXPECT_FALSE(r.items[1].truncated);
  o.max_length = 1000;
  EXPECT_THROW(m.embed({"a"}, o), std::invalid_argument);
  // Token-id input: cut the same way, and bad ids refused.
  o.max_length = 3;
  const EmbedResult ri = m.embed_ids({{2, 10, 11, 12, 3}}, o);
  EXPECT_TRUE(ri.items[0].truncated);
  EXPECT_EQ(ri.items[0].tokens, 3u);
  EXPECT_THROW(m.embed_ids({{2, -1, 3}}), std::invalid_argument);
}

TEST(Embed, TinyModernBertAndEsmFromText) {
  // ModernBERT: BPE tokenizer.json; pooling defaults to its config's classifier_pooling (cls).
  {
    const json ref = read_json(kDir + "tiny-modernbert/reference.json");
    EmbeddingModel m = EmbeddingModel::load(kDir + "tiny-modernbert");
    EXPECT_EQ(m.head().pooling, Pooling::Cls);
    const EmbedResult r = m.embed(texts_of(ref));
    for (size_t i = 0; i < r.items.size(); ++i)
      EXPECT_LE(max_abs(r.items[i].vector, ref["inputs"][i]["hidden"][0]), 1e-4) << "input " << i;
  }
  // ESM-2: character tokenizer from vocab.txt; mean pooling (special tokens included).
  {
    const json ref = read_json(kDir + "tiny-esm2/reference.json");
    EmbeddingModel m = EmbeddingModel::load(kDir + "tiny-esm2");
    EXPECT_EQ(m.head().pooling, Pooling::Mean);
    const EmbedResult r = m.embed(texts_of(ref));
    for (size_t i = 0; i < r.items.size(); ++i) {
      EXPECT_EQ(r.items[i].tokens, ref["inputs"][i]["ids"].size()) << i;
      EXPECT_LE(max_abs(r.items[i].vector, ref["inputs"][i]["mean"]), 1e-4) << "input " << i;
    }
  }
}

TEST(Embed, UnknownModelSaysHowToGetIt) {
  try {
    EmbeddingModel::load("all-minilm-l6-v2", "/nonexistent-store-dir");
    FAIL() << "expected a throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("npu model pull all-minilm-l6-v2"), std::string::npos);
  }
  EXPECT_THROW(EmbeddingModel::load("/no/such/dir/model"), std::runtime_error);
}

// The accuracy gate on real weights: all-MiniLM-L6-v2 at f32 against sentence-transformers.
// Weights: $XDNA_MINILM_DIR, else the model store (`npu model pull all-minilm-l6-v2`).
TEST(EmbedRealWeights, MiniLmCosineOnEvalSet) {
#if XDNA_UNDER_ASAN
  GTEST_SKIP() << "skipped under AddressSanitizer (22M-parameter model: too slow instrumented)";
#endif
  std::string dir;
  if (const char* env = std::getenv("XDNA_MINILM_DIR")) dir = env;
  else dir = ModelStore(default_store_dir()).model_dir("all-minilm-l6-v2");
  if (!fs::exists(fs::path(dir) / "model.safetensors"))
    GTEST_SKIP() << "all-MiniLM-L6-v2 weights not found at " << dir
                 << ": run `npu model pull all-minilm-l6-v2` or set XDNA_MINILM_DIR";

  std::vector<std::string> sentences;
  {
    std::ifstream in(kDir + "eval_sentences.txt", std::ios::binary);
    std::string line;
    while (std::getline(in, line)) sentences.push_back(line);
  }
  const json meta = read_json(kDir + "minilm_eval.json");
  const size_t D = meta["dimensions"];
  std::vector<float> ref(sentences.size() * D);
  {
    std::ifstream in(kDir + "minilm_eval.f32", std::ios::binary);
    in.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4));
    ASSERT_EQ(static_cast<size_t>(in.gcount()), ref.size() * 4) << "minilm_eval.f32 does not match the eval set";
  }
  ASSERT_GE(sentences.size(), 200u);

  EmbeddingModel m = EmbeddingModel::load(dir);
  EXPECT_EQ(m.max_length(), 256u);  // sentence_bert_config.json
  double min_cos = 1.0, max_err = 0.0;
  size_t worst = 0, truncated = 0;
  for (size_t b0 = 0; b0 < sentences.size(); b0 += 32) {
    const size_t b1 = std::min(sentences.size(), b0 + 32);
    const EmbedResult r = m.embed({sentences.begin() + b0, sentences.begin() + b1});
    for (size_t i = b0; i < b1; ++i) {
      const EmbeddingItem& it = r.items[i - b0];
      ASSERT_EQ(it.vector.size(), D);
      EXPECT_EQ(it.original_tokens, meta["token_counts"][i].get<size_t>()) << "sentence " << i;
      truncated += it.truncated;
      const double c = cosine(it.vector.data(), &ref[i * D], D);
      EXPECT_GE(c, 0.9999) << "sentence " << i << ": " << sentences[i];
      if (c < min_cos) min_cos = c, worst = i;
      for (size_t d = 0; d < D; ++d)
        max_err = std::max(max_err, std::abs(double(it.vector[d]) - ref[i * D + d]));
    }
  }
  std::printf("all-MiniLM-L6-v2 f32: %zu sentences (%zu truncated), min cosine %.7f (sentence %zu), "
              "max abs err %.3g\n", sentences.size(), truncated, min_cos, worst, max_err);
  EXPECT_EQ(truncated, 3u);
}

// A baked file (config and tokenizer embedded) runs the same; bf16 / int8 weights run through the
// same encoder (zero-copy views in the stored dtype) and stay close to the f32 reference.
TEST(Embed, BakedFilesAndWeightPrecisions) {
  const json ref = read_json(kDir + "tiny-bert-e5/reference.json");
  const fs::path tmp = fs::temp_directory_path() / ("xdna_embed_test_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  struct Case { Precision p; double min_cos; };
  for (const Case c : {Case{Precision::Keep, 0.999999}, Case{Precision::BF16, 0.999},
                       Case{Precision::Int8, 0.99}}) {
    BakeOptions bo;
    bo.source = kDir + "tiny-bert-e5";
    bo.output = (tmp / (std::string(precision_name(c.p)) + ".xdna")).string();
    bo.precision = c.p;
    bake_checkpoint(bo);
    EmbeddingModel m = EmbeddingModel::load(bo.output);
    EXPECT_TRUE(m.head().normalize);
    const EmbedResult r = m.embed(texts_of(ref));
    double min_cos = 1.0;
    for (size_t i = 0; i < r.items.size(); ++i) {
      std::vector<float> want = ref["inputs"][i]["embedding"].get<std::vector<float>>();
      min_cos = std::min(min_cos, cosine(r.items[i].vector.data(), want.data(), want.size()));
    }
    std::printf("tiny-bert-e5 baked %s: min cosine %.7f\n", precision_name(c.p), min_cos);
    EXPECT_GE(min_cos, c.min_cos) << precision_name(c.p);
  }
  fs::remove_all(tmp);
}

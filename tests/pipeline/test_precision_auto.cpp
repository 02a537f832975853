// Accuracy-gated precisions (`npu checkpoint bake --precision auto`) on the tiny random-init BERT
// fixture, and the sentence-transformers head surviving a bake.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "pipeline/precision_auto.h"
#include "weights/baked.h"

using namespace xdna;
namespace fs = std::filesystem;

namespace {

const std::string kTiny = std::string(XDNA_FIXTURE_DIR) + "/encoders/tiny-bert-e5";

// The first n lines of the committed evaluation set (all of it would only make the test slower).
std::vector<std::string> eval_sentences(size_t n) {
  std::vector<std::string> s = read_eval_sentences(std::string(XDNA_FIXTURE_DIR) + "/encoders/eval_sentences.txt");
  EXPECT_GE(s.size(), 200u);
  s.resize(std::min(n, s.size()));
  return s;
}

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / ("xdna_prec_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST(PrecisionAuto, UniformPrecisionsAreMeasuredAgainstF32) {
  const AccuracyProbe probe(kTiny, eval_sentences(24));
  EXPECT_EQ(probe.sentences(), 24u);
  EXPECT_EQ(probe.ops().size(), 16u);  // 3 embedding tables, 2 layers x 6 matrices, the pooler
  const Accuracy f32 = probe.measure(probe.uniform_plans(Precision::F32));
  EXPECT_NEAR(f32.min_cosine, 1.0, 1e-12);
  const Accuracy bf16 = probe.measure(probe.uniform_plans(Precision::BF16));
  const Accuracy int4 = probe.measure(probe.uniform_plans(Precision::Int4));
  // Lower precisions really change the embeddings, int4 more than bf16, and stay close.
  EXPECT_LT(bf16.min_cosine, 1.0);
  EXPECT_GT(bf16.min_cosine, 0.99);
  EXPECT_LE(bf16.min_cosine, bf16.mean_cosine);
  EXPECT_LT(int4.mean_cosine, bf16.mean_cosine);
  EXPECT_LT(probe.bytes(probe.uniform_plans(Precision::Int8)), probe.bytes(probe.uniform_plans(Precision::BF16)));
  EXPECT_EQ(probe.bytes(probe.uniform_plans(Precision::F32)), probe.bytes({}));
}

// The choice meets the gate by its own record, and the baked file, loaded and run from scratch,
// gives embeddings whose cosine to the f32 ones is the recorded one.
TEST(PrecisionAuto, BakedChoiceMeetsTheGateWhenReloaded) {
  TempDir dir;
  const std::vector<std::string> sentences = eval_sentences(24);
  const AccuracyProbe probe(kTiny, sentences);
  AutoOptions ao;
  ao.gate = 0.999;
  const AutoChoice c = choose_precisions(probe, ao);
  ASSERT_EQ(c.ops.size(), probe.ops().size());
  EXPECT_GE(c.accuracy.min_cosine, ao.gate);
  EXPECT_LT(c.bytes, c.bytes_f32);  // something cheaper than f32 was chosen
  for (const OpChoice& op : c.ops) {
    EXPECT_GE(op.accuracy.min_cosine, ao.gate) << op.tensor;
    for (const auto& [prec, a] : op.rejected) EXPECT_LT(a.min_cosine, ao.gate) << op.tensor << " " << prec;
  }

  BakeOptions o;
  o.source = kTiny;
  o.output = dir / "auto.xdna";
  o.precision = Precision::Auto;
  o.plans = c.plans();
  o.tensor_fields = c.tensor_fields();
  o.auto_record = c.record({{"sentences", sentences.size()}});
  bake_checkpoint(o);

  const BakedModel baked(o.output);
  const nlohmann::json& m = baked.manifest();
  EXPECT_EQ(m["precision"], "auto");
  EXPECT_EQ(m["auto"]["gate"], 0.999);
  EXPECT_GE(m["auto"]["min_cosine"].get<double>(), 0.999);
  EXPECT_EQ(m["auto"]["bytes"], c.bytes);
  size_t recorded = 0;
  for (const auto& t : m["tensors"]) {
    if (!t.contains("auto")) continue;
    ++recorded;
    const OpChoice* op = nullptr;
    for (const OpChoice& x : c.ops) op = x.tensor == t["name"] ? &x : op;
    ASSERT_NE(op, nullptr) << t["name"];
    EXPECT_EQ(t["precision"], op->plan.precision);
    EXPECT_EQ(t["dtype"], std::string(dtype_name(op->plan.dtype)));
    EXPECT_GE(t["auto"]["min_cosine"].get<double>(), 0.999) << t["name"];
    EXPECT_LE(t["auto"]["min_cosine"].get<double>(), t["auto"]["mean_cosine"].get<double>());
  }
  EXPECT_EQ(recorded, probe.ops().size());

  // Re-measure from the file: f32 embeddings from the checkpoint directory, the baked ones.
  const EmbeddingModel ref = EmbeddingModel::load(kTiny);
  const EmbeddingModel got = EmbeddingModel::load(o.output);
  EXPECT_EQ(got.head().pooling, ref.head().pooling);
  const EmbedResult a = ref.embed(sentences), b = got.embed(sentences);
  ASSERT_EQ(b.items.size(), sentences.size());
  double min_cos = 1;
  for (size_t i = 0; i < sentences.size(); ++i) min_cos = std::min(min_cos, cosine(a.items[i].vector, b.items[i].vector));
  EXPECT_GE(min_cos, 0.999);
  EXPECT_NEAR(min_cos, c.accuracy.min_cosine, 1e-6);
}

TEST(PrecisionAuto, BadInputsAreNamed) {
  TempDir dir;
  try {
    read_eval_sentences(dir / "missing.txt");
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt"), std::string::npos) << e.what();
  }
  { std::ofstream(dir / "empty.txt") << "\n\r\n"; }
  EXPECT_THROW(read_eval_sentences(dir / "empty.txt"), std::runtime_error);
  BakeOptions o{kTiny, dir / "x.xdna", Precision::Auto, 0, {}};
  EXPECT_THROW(bake_checkpoint(o), std::invalid_argument);  // auto without a plan
  o.plans["no.such.weight"] = {DType::BF16, 0, "bf16", ""};
  EXPECT_THROW(bake_checkpoint(o), std::invalid_argument);
  // The reference must be the original weights, not a baked file.
  bake_checkpoint({kTiny, dir / "f32.xdna", Precision::F32, 0, {}});
  EXPECT_THROW(AccuracyProbe(dir / "f32.xdna", eval_sentences(2)), std::invalid_argument);
}

// A BGE-style checkpoint pools the [CLS] token, as its 1_Pooling/config.json says: the baked copy
// must pool the same way (the file is carried), not fall back to the default mean.
TEST(PrecisionAuto, PoolingConfigSurvivesBake) {
  TempDir dir;
  const fs::path src = dir.path / "cls-model";
  fs::copy(kTiny, src, fs::copy_options::recursive);
  { std::ofstream(src / "1_Pooling/config.json") << R"({"word_embedding_dimension": 32, "pooling_mode_cls_token": true})"; }
  bake_checkpoint({src.string(), dir / "cls.xdna", Precision::F32, 0, {}});
  const EmbeddingModel from_dir = EmbeddingModel::load(src.string());
  const EmbeddingModel baked = EmbeddingModel::load(dir / "cls.xdna");
  const EmbeddingModel mean = EmbeddingModel::load(kTiny);
  ASSERT_EQ(from_dir.head().pooling, Pooling::Cls);
  EXPECT_EQ(baked.head().pooling, Pooling::Cls);
  EXPECT_EQ(baked.head().normalize, from_dir.head().normalize);
  EXPECT_EQ(baked.max_length(), from_dir.max_length());  // sentence_bert_config.json
  const std::vector<std::string> text = {"The cat sat on the mat."};
  const std::vector<float> a = from_dir.embed(text).items[0].vector, b = baked.embed(text).items[0].vector;
  EXPECT_EQ(a, b);
  EXPECT_LT(cosine(a, mean.embed(text).items[0].vector), 0.9999);  // CLS really differs from mean
}

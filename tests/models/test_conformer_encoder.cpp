// Conformer encoder and CTC head against the upstream implementations on tiny random-init models
// (tests/fixtures/conformer/encoder/, written by scripts/make_conformer_fixtures.py):
//   parakeet_ctc_tiny   transformers' ParakeetForCTC (dw_striding, rel_pos, xscaling), NeMo names
//   gigaam_rotary_tiny  gigaam 0.1.0 ConformerEncoder + CTCHead (striding, rotary)
//   gigaam_rel_pos_tiny the same with rel_pos attention (no xscaling)
// References were computed in float64 from the f32 weights. Error measure: relative max norm,
// max|ours - ref| / max|ref| over the whole tensor; tolerance 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "models/conformer.h"
#include "weights/source.h"

#include "models_test_util.h"

using namespace xdna;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/conformer/encoder/";

ConformerConfig parakeet_config() {
  ConformerConfig c;
  c.family = "parakeet";
  c.subsampling = "dw_striding";
  c.subsampling_factor = 8;
  c.subsampling_channels = 16;
  c.n_mels = 32;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.ff_dim = 128;
  c.conv_kernel = 9;
  c.self_attention = "rel_pos";
  c.xscaling = true;
  c.head = "ctc";
  c.vocab_size = 16;
  return c;
}

ConformerConfig gigaam_config(const std::string& attention) {
  ConformerConfig c;
  c.family = "gigaam";
  c.subsampling = "striding";
  c.subsampling_factor = 4;
  c.subsampling_channels = 32;  // GigaAM: conv channels = d_model
  c.n_mels = 32;
  c.d_model = 32;
  c.n_layers = attention == "rotary" ? 2 : 1;
  c.n_heads = 4;
  c.ff_dim = 128;
  c.conv_kernel = 5;
  c.self_attention = attention;
  c.rotary_base = 5000.0f;  // gigaam passes pos_emb_max_len as the rotary base
  c.xscaling = false;
  c.head = "ctc";
  c.vocab_size = 16;
  return c;
}

std::vector<std::string> vocab(int64_t n) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back("t" + std::to_string(i));
  return v;
}

std::shared_ptr<ConformerModel> make(const ConformerConfig& c, std::shared_ptr<const WeightSource> w) {
  return std::make_shared<ConformerModel>(c, std::move(w), vocab(c.vocab_size));
}

using mtest::rel_err;

// Checks both reference inputs (a long one and one that leaves a single encoder frame).
void check_against_reference(const std::string& dir, const ConformerConfig& c) {
  const auto model = make(c, open_weights(kDir + dir + "/model.safetensors"));
  const auto ref = open_weights(kDir + dir + "/reference.safetensors");
  for (const char* i : {"0", "1"}) {
    SCOPED_TRACE(dir + " input " + i);
    const Tensor features = ref->get(std::string("features_") + i);
    RunReport report;
    const Tensor encoded = model->encode(features, {}, &report);
    EXPECT_EQ(encoded.dim(0), c.encoded_frames(features.dim(1)));
    EXPECT_LT(rel_err(encoded, ref->get(std::string("encoded_") + i)), 1e-4);
    EXPECT_LT(rel_err(model->ctc_log_probs(encoded), ref->get(std::string("log_probs_") + i)), 1e-4);
    // Every op is reported: the graph ops on the host, one direct step per layer.
    int matmuls = 0, direct = 0;
    for (const OpRecord& r : report.ops) {
      matmuls += r.op == OpKind::MatMul && r.backend == "host";
      direct += r.backend == "host-direct";
    }
    EXPECT_GE(matmuls, 8 * c.n_layers);
    EXPECT_EQ(direct, c.n_layers);
  }
}

// A source that hides one tensor, or serves it with its first dimension halved.
class Tampered final : public WeightSource {
 public:
  Tampered(std::shared_ptr<WeightSource> inner, std::string name, bool hide)
      : inner_(std::move(inner)), name_(std::move(name)), hide_(hide) {
    for (const auto& t : inner_->tensors())
      if (!(hide_ && t.name == name_)) list_.push_back(t);
  }
  std::string format() const override { return inner_->format(); }
  std::string path() const override { return inner_->path(); }
  const std::vector<TensorInfo>& tensors() const override { return list_; }
  Tensor get(const std::string& name) const override {
    if (!contains(name)) throw std::runtime_error("no tensor " + name);
    Tensor t = inner_->get(name);
    return name == name_ ? t.slice(0, 0, t.dim(0) / 2) : t;
  }
  nlohmann::json metadata() const override { return inner_->metadata(); }

 private:
  std::shared_ptr<WeightSource> inner_;
  std::string name_;
  bool hide_;
  std::vector<TensorInfo> list_;
};

std::shared_ptr<WeightSource> parakeet_weights() {
  return open_weights(kDir + "parakeet_ctc_tiny/model.safetensors");
}

// The message of the std::runtime_error that building the model throws ("" if none).
std::string load_error(const ConformerConfig& c, std::shared_ptr<const WeightSource> w) {
  try {
    make(c, std::move(w));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ConformerEncoder, ParakeetMatchesTransformers) {
  check_against_reference("parakeet_ctc_tiny", parakeet_config());
}

TEST(ConformerEncoder, GigaamRotaryMatchesGigaam) {
  check_against_reference("gigaam_rotary_tiny", gigaam_config("rotary"));
}

TEST(ConformerEncoder, GigaamRelPosMatchesGigaam) {
  check_against_reference("gigaam_rel_pos_tiny", gigaam_config("rel_pos"));
}

TEST(ConformerEncoder, EncodedFramesMatchesNemoLengthFormula) {
  // floor((L + 2 pad - k) / 2 + 1) per stride-2 step, as NeMo / transformers / gigaam compute it.
  const int64_t frames[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 67, 100, 1000, 1001, 3000};
  const int64_t x8[] = {1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 9, 13, 125, 126, 375};
  const int64_t x4[] = {1, 1, 1, 1, 2, 2, 2, 3, 4, 5, 17, 25, 250, 251, 750};
  const ConformerConfig p = parakeet_config(), g = gigaam_config("rotary");
  for (size_t i = 0; i < std::size(frames); ++i) {
    EXPECT_EQ(p.encoded_frames(frames[i]), x8[i]) << frames[i] << " frames";
    EXPECT_EQ(g.encoded_frames(frames[i]), x4[i]) << frames[i] << " frames";
  }
  EXPECT_EQ(p.encoded_frames(0), 0);
}

TEST(ConformerEncoder, MissingWeightNamesTheTensor) {
  const std::string name = "encoder.layers.1.conv.batch_norm.running_var";
  const std::string err = load_error(parakeet_config(), std::make_shared<Tampered>(parakeet_weights(), name, true));
  EXPECT_NE(err.find("missing tensor '" + name + "'"), std::string::npos) << err;
}

TEST(ConformerEncoder, MissingCtcHeadOnlyMattersForCtc) {
  const std::string name = "decoder.decoder_layers.0.weight";
  const auto w = std::make_shared<Tampered>(parakeet_weights(), name, true);
  const std::string err = load_error(parakeet_config(), w);
  EXPECT_NE(err.find(name), std::string::npos) << err;
  ConformerConfig rnnt = parakeet_config();
  rnnt.head = "rnnt";
  const auto model = make(rnnt, w);  // the encoder alone loads
  EXPECT_THROW(model->ctc_log_probs(Tensor::zeros({3, 32})), std::logic_error);
}

TEST(ConformerEncoder, BadWeightShapeNamesTheTensorAndBothShapes) {
  const std::string name = "encoder.layers.0.self_attn.linear_pos.weight";
  const std::string err = load_error(parakeet_config(), std::make_shared<Tampered>(parakeet_weights(), name, false));
  EXPECT_NE(err.find("'" + name + "' has shape [16, 32], expected [32, 32]"), std::string::npos) << err;
  ConformerConfig wrong_ff = parakeet_config();
  wrong_ff.ff_dim = 64;
  const std::string err2 = load_error(wrong_ff, parakeet_weights());
  EXPECT_NE(err2.find("feed_forward1.linear1.weight' has shape [128, 32], expected [64, 32]"), std::string::npos)
      << err2;
}

TEST(ConformerEncoder, BadConfigAndVocabularyThrow) {
  ConformerConfig heads = parakeet_config();
  heads.n_heads = 5;
  EXPECT_NE(load_error(heads, parakeet_weights()).find("not a multiple of n_heads"), std::string::npos);
  ConformerConfig sub = parakeet_config();
  sub.subsampling = "vggnet";
  EXPECT_NE(load_error(sub, parakeet_weights()).find("vggnet"), std::string::npos);
  EXPECT_THROW(ConformerModel(parakeet_config(), parakeet_weights(), vocab(3)), std::runtime_error);
}

TEST(ConformerEncoder, BadInputShapesThrow) {
  const auto model = make(parakeet_config(), parakeet_weights());
  EXPECT_THROW(model->encode(Tensor::zeros({31, 67})), std::invalid_argument);
  EXPECT_THROW(model->encode(Tensor::zeros({32, 0})), std::invalid_argument);
  EXPECT_THROW(model->encode(Tensor::zeros({32})), std::invalid_argument);
  EXPECT_THROW(model->encode(Tensor()), std::invalid_argument);
  EXPECT_THROW(model->ctc_log_probs(Tensor::zeros({4, 31})), std::invalid_argument);
}

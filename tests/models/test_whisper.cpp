// Whisper encoder/decoder against transformers on a random-init tiny model
// (tests/fixtures/whisper/, written by scripts/make_whisper_fixtures.py).
// Error measure: relative max norm, max|ours - ref| / max|ref| over the whole tensor. Tolerance
// 1e-4 for the f32 weights; 3e-3 for the f16 copy (its weights are rounded by up to 4.9e-4
// relative; measured: ~6e-4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "models/whisper.h"
#include "weights/source.h"

using namespace xdna;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/whisper/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

struct Fixture {
  std::shared_ptr<WhisperModel> model;
  std::unique_ptr<WeightSource> ref;
  nlohmann::json tokens;
  Tensor features;  // our encoder output
};

Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    x.model = WhisperModel::load(kDir + "tiny-random");
    x.ref = open_weights(kDir + "reference.safetensors");
    x.tokens = read_json(kDir + "reference.json");
    x.features = x.model->encode(x.ref->get("mel"));
    return x;
  }();
  return f;
}

std::vector<int32_t> ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// Relative max-norm error of `got` against `want` (same number of elements).
double rel_err(const Tensor& got, const Tensor& want) {
  const std::vector<float> a = got.to_vector(), b = want.to_vector();
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Row r of a [R, V] tensor (or of a deeper tensor flattened to rows of its last dimension).
Tensor row(const Tensor& t, int64_t r) { return t.reshape({-1, t.dim(-1)}).row(r); }

// A source that hides one tensor (to check the error for a missing weight).
class Hiding final : public WeightSource {
 public:
  Hiding(std::shared_ptr<WeightSource> inner, std::string hidden) : inner_(std::move(inner)) {
    for (const auto& t : inner_->tensors())
      if (t.name != hidden) list_.push_back(t);
  }
  std::string format() const override { return inner_->format(); }
  std::string path() const override { return inner_->path(); }
  const std::vector<TensorInfo>& tensors() const override { return list_; }
  Tensor get(const std::string& name) const override {
    if (!contains(name)) throw std::runtime_error("no tensor " + name);
    return inner_->get(name);
  }
  nlohmann::json metadata() const override { return inner_->metadata(); }

 private:
  std::shared_ptr<WeightSource> inner_;
  std::vector<TensorInfo> list_;
};

}  // namespace

TEST(WhisperSpec, FromConfigAndFromWeightsAgree) {
  const WhisperSpec a = WhisperSpec::from_hf_config(read_json(kDir + "tiny-random/config.json"));
  EXPECT_EQ(a.d_model, 64);
  EXPECT_EQ(a.encoder_layers, 2);
  EXPECT_EQ(a.decoder_layers, 2);
  EXPECT_EQ(a.encoder_heads, 4);
  EXPECT_EQ(a.n_mels, 80);
  EXPECT_EQ(a.n_audio_ctx, 64);
  EXPECT_EQ(a.n_text_ctx, 448);
  EXPECT_EQ(a.vocab, 200);
  EXPECT_EQ(a.ffn_dim, 256);
  EXPECT_FALSE(a.multilingual());
  const auto w = open_weights(kDir + "tiny-random");
  const WhisperSpec b = WhisperSpec::from_weights(*w, 4);
  EXPECT_EQ(b.d_model, a.d_model);
  EXPECT_EQ(b.n_mels, a.n_mels);
  EXPECT_EQ(b.n_audio_ctx, a.n_audio_ctx);
  EXPECT_EQ(b.n_text_ctx, a.n_text_ctx);
  EXPECT_EQ(b.vocab, a.vocab);
  EXPECT_EQ(b.ffn_dim, a.ffn_dim);
  EXPECT_EQ(b.encoder_layers, a.encoder_layers);
  EXPECT_EQ(b.decoder_layers, a.decoder_layers);
  EXPECT_THROW(WhisperSpec::from_weights(*w, 3), std::runtime_error);  // 3 does not divide 64
}

TEST(WhisperSpec, ConfigErrorsNameTheField) {
  nlohmann::json c = read_json(kDir + "tiny-random/config.json");
  c.erase("d_model");
  try {
    WhisperSpec::from_hf_config(c);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("d_model"), std::string::npos) << e.what();
  }
  c = read_json(kDir + "tiny-random/config.json");
  c["encoder_attention_heads"] = 5;
  EXPECT_THROW(WhisperSpec::from_hf_config(c), std::runtime_error);
}

TEST(Whisper, EncoderMatchesTransformers) {
  Fixture& f = fixture();
  RunReport report;
  const Tensor out = f.model->encode(f.ref->get("mel"), {}, &report);
  ASSERT_EQ(out.shape(), (Shape{64, 64}));
  const double err = rel_err(out, f.ref->get("encoder_out"));
  EXPECT_LT(err, 1e-4);
  std::printf("encoder output rel err %.2e\n", err);
  std::map<OpKind, int> kinds;
  for (const auto& op : report.ops) ++kinds[op.op];
  EXPECT_EQ(kinds[OpKind::Conv1d], 2);
  EXPECT_EQ(kinds[OpKind::Attention], 2);
  EXPECT_EQ(kinds[OpKind::LayerNorm], 5);
}

TEST(Whisper, CachedStepsMatchTransformers) {
  Fixture& f = fixture();
  const Tensor want = f.ref->get("steps_logits");  // [4, vocab]
  WhisperDecodeState st = f.model->start(f.features);
  RunReport report;
  Tensor lg = f.model->decode({ids(f.tokens["prompt"])}, st, {}, &report);
  ASSERT_EQ(lg.shape(), (Shape{1, 200}));
  EXPECT_LT(rel_err(lg, row(want, 0)), 1e-4);
  EXPECT_EQ(st.position, 4);
  int kv_writes = 0;
  for (const auto& op : report.ops) kv_writes += op.op == OpKind::KvWrite;
  EXPECT_EQ(kv_writes, 4);  // K and V of 2 layers
  const auto steps = ids(f.tokens["steps"]);
  double worst = rel_err(lg, row(want, 0));
  for (size_t i = 0; i < steps.size(); ++i) {
    lg = f.model->decode({{steps[i]}}, st);
    const double err = rel_err(lg, row(want, static_cast<int64_t>(i) + 1));
    EXPECT_LT(err, 1e-4) << "step " << i;
    worst = std::max(worst, err);
  }
  std::printf("prompt + 3 cached steps: worst logits rel err %.2e\n", worst);
  EXPECT_EQ(st.position, 7);
}

TEST(Whisper, CachedStepsEqualOneFullForward) {
  Fixture& f = fixture();
  const Tensor full = f.ref->get("full_logits");  // [7, vocab], every position of one forward
  std::vector<int32_t> seq = ids(f.tokens["prompt"]);
  for (int32_t t : ids(f.tokens["steps"])) seq.push_back(t);
  WhisperDecodeState stepwise = f.model->start(f.features);
  f.model->decode({std::vector<int32_t>(seq.begin(), seq.begin() + 4)}, stepwise);
  for (size_t n = 5; n <= seq.size(); ++n) {
    const Tensor step = f.model->decode({{seq[n - 1]}}, stepwise);
    WhisperDecodeState fresh = f.model->start(f.features);
    const Tensor whole = f.model->decode({std::vector<int32_t>(seq.begin(), seq.begin() + n)}, fresh);
    EXPECT_LT(rel_err(step, whole), 1e-5) << n << " tokens";
    EXPECT_LT(rel_err(whole, row(full, static_cast<int64_t>(n) - 1)), 1e-4) << n << " tokens";
  }
}

TEST(Whisper, BatchedBeamsEqualSeparateRuns) {
  Fixture& f = fixture();
  const Tensor want = f.ref->get("beams_logits");  // [beam, (prompt, next), vocab]
  const auto p0 = ids(f.tokens["beam_prompts"][0]), p1 = ids(f.tokens["beam_prompts"][1]);
  const auto next = ids(f.tokens["beam_next"]);
  WhisperDecodeState st = f.model->start(f.features, 2);
  ASSERT_EQ(st.beams(), 2);
  const Tensor a = f.model->decode({p0, p1}, st);
  ASSERT_EQ(a.shape(), (Shape{2, 200}));
  const Tensor b = f.model->decode({{next[0]}, {next[1]}}, st);
  for (int64_t beam = 0; beam < 2; ++beam) {
    EXPECT_LT(rel_err(a.row(beam), row(want, beam * 2)), 1e-4) << "beam " << beam;
    EXPECT_LT(rel_err(b.row(beam), row(want, beam * 2 + 1)), 1e-4) << "beam " << beam;
    WhisperDecodeState one = f.model->start(f.features);
    const Tensor sa = f.model->decode({beam == 0 ? p0 : p1}, one);
    const Tensor sb = f.model->decode({{next[beam]}}, one);
    EXPECT_LT(rel_err(a.row(beam), sa), 1e-5);
    EXPECT_LT(rel_err(b.row(beam), sb), 1e-5);
  }
}

TEST(Whisper, ReorderCopiesCaches) {
  Fixture& f = fixture();
  const Tensor want = f.ref->get("beams_logits");
  const auto p0 = ids(f.tokens["beam_prompts"][0]), p1 = ids(f.tokens["beam_prompts"][1]);
  const auto next = ids(f.tokens["beam_next"]);
  WhisperDecodeState st = f.model->start(f.features, 2);
  f.model->decode({p0, p1}, st);
  // Three beams: two continue prompt 1 (with different tokens), one continues prompt 0.
  f.model->reorder(st, {1, 1, 0});
  ASSERT_EQ(st.beams(), 3);
  const int32_t other = 33;
  const Tensor lg = f.model->decode({{next[1]}, {other}, {next[0]}}, st);
  EXPECT_LT(rel_err(lg.row(0), row(want, 3)), 1e-4);
  EXPECT_LT(rel_err(lg.row(2), row(want, 1)), 1e-4);
  WhisperDecodeState one = f.model->start(f.features);
  f.model->decode({p1}, one);
  EXPECT_LT(rel_err(lg.row(1), f.model->decode({{other}}, one)), 1e-5);
  // Swapping back and forth keeps each beam's own history.
  f.model->reorder(st, {2, 0});
  ASSERT_EQ(st.beams(), 2);
  EXPECT_EQ(st.position, 5);
  const Tensor again = f.model->decode({{7}, {7}}, st);
  WhisperDecodeState ref0 = f.model->start(f.features);
  f.model->decode({p0}, ref0);
  f.model->decode({{next[0]}}, ref0);
  EXPECT_LT(rel_err(again.row(0), f.model->decode({{7}}, ref0)), 1e-5);
  EXPECT_THROW(f.model->reorder(st, {2}), std::invalid_argument);
  EXPECT_THROW(f.model->reorder(st, {}), std::invalid_argument);
}

TEST(Whisper, BadInputIsRejectedWithNumbers) {
  Fixture& f = fixture();
  const auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no std::invalid_argument)");
  };
  std::string m = message([&] { f.model->encode(Tensor::zeros({80, 3000})); });
  EXPECT_NE(m.find("[80, 128]"), std::string::npos) << m;
  EXPECT_NE(m.find("3000"), std::string::npos) << m;
  m = message([&] { f.model->start(Tensor::zeros({10, 64})); });
  EXPECT_NE(m.find("[64, 64]"), std::string::npos) << m;

  WhisperDecodeState st = f.model->start(f.features);
  m = message([&] { f.model->decode({{200}}, st); });
  EXPECT_NE(m.find("200"), std::string::npos) << m;
  m = message([&] { f.model->decode({{-1}}, st); });
  EXPECT_NE(m.find("-1"), std::string::npos) << m;
  m = message([&] { f.model->decode({std::vector<int32_t>(449, 5)}, st); });
  EXPECT_NE(m.find("449"), std::string::npos) << m;
  EXPECT_NE(m.find("448"), std::string::npos) << m;
  m = message([&] { f.model->decode({{1}, {2}}, st); });  // 2 token lists, 1 beam
  EXPECT_NE(m.find("2 token lists for 1 beams"), std::string::npos) << m;
  EXPECT_EQ(st.position, 0);  // nothing ran
  f.model->decode({std::vector<int32_t>(446, 5)}, st);
  m = message([&] { f.model->decode({{5, 6, 7}}, st); });
  EXPECT_NE(m.find("449"), std::string::npos) << m;
  f.model->decode({{5, 6}}, st);  // exactly fills the 448 positions
  EXPECT_EQ(st.position, 448);

  WhisperDecodeState two = f.model->start(f.features, 2);
  m = message([&] { f.model->decode({{1, 2}, {3}}, two); });
  EXPECT_NE(m.find("beam 1 has 1 tokens"), std::string::npos) << m;
  EXPECT_THROW(f.model->start(f.features, 0), std::invalid_argument);
}

TEST(Whisper, WeightErrorsNameTheTensor) {
  std::shared_ptr<WeightSource> w = open_weights(kDir + "tiny-random");
  const WhisperSpec spec = WhisperSpec::from_hf_config(read_json(kDir + "tiny-random/config.json"));
  const std::string hidden = "model.decoder.layers.1.encoder_attn.v_proj.bias";
  try {
    WhisperModel(spec, std::make_shared<Hiding>(w, hidden));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(hidden), std::string::npos) << e.what();
  }
  WhisperSpec wrong = spec;
  wrong.ffn_dim = 128;
  try {
    WhisperModel(wrong, w);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.encoder.layers.0.fc1.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(WhisperModel::load(kDir + "no-such-model"), std::runtime_error);
  EXPECT_THROW(WhisperModel::load(kDir), std::runtime_error);  // no weights in the fixture root
}

TEST(Whisper, LoadsWithoutConfigTakingHeadsOfSize64) {
  // No config.json: sizes from the shapes, heads = d_model / 64 (true of every released size; the
  // fixture's 4 heads of 16 are not, so its outputs differ, but everything loads and runs).
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("xdna_whisper_noconfig_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kDir + "tiny-random/model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  const auto m = WhisperModel::load(dir.string());
  EXPECT_EQ(m->spec().d_model, 64);
  EXPECT_EQ(m->spec().encoder_heads, 1);
  EXPECT_EQ(m->spec().decoder_layers, 2);
  EXPECT_EQ(m->encode(fixture().ref->get("mel")).shape(), (Shape{64, 64}));
  std::filesystem::remove_all(dir);
}

TEST(Whisper, F16WeightsStayClose) {
  Fixture& f = fixture();
  const auto m16 = WhisperModel::load(kDir + "tiny-random-f16");
  EXPECT_EQ(m16->weights().get("model.encoder.layers.0.fc1.weight").dtype(), DType::F16);
  const Tensor enc = m16->encode(f.ref->get("mel"));
  const double enc_err = rel_err(enc, f.ref->get("encoder_out"));
  EXPECT_LT(enc_err, 3e-3);
  WhisperDecodeState st = m16->start(enc);
  const Tensor lg = m16->decode({ids(f.tokens["prompt"])}, st);
  const double dec_err = rel_err(lg, row(f.ref->get("steps_logits"), 0));
  EXPECT_LT(dec_err, 3e-3);
  EXPECT_GT(enc_err + dec_err, 0.0);  // the f16 copy really is a different model
  std::printf("f16 weights: encoder rel err %.2e, prompt logits rel err %.2e\n", enc_err, dec_err);
}

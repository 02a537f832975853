// ViT and DINOv2 against transformers on tiny random-init models (tests/fixtures/vision/, written
// by scripts/make_vision_fixtures.py): last_hidden_state, pooler output and logits at the model's
// resolution and at others (interpolated position embeddings, plain and antialiased bicubic).
// Tolerance: |ours - ref| <= 1e-4 * max(1, |ref|) per element at f32 (the weights are large on
// purpose, so activations are O(1) and attention is far from uniform).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "models/vision.h"
#include "weights/source.h"
#include "../encoder_test_util.h"

using namespace xdna;
using nlohmann::json;
using xdna::testing::read_json;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/vision/";

// The fixture script's inputs: sin(0.37 x + 0.91 y + 1.3 c + 2.1 n) * 1.7 + 0.05 (x - y).
Tensor pixels(int64_t N, int64_t H, int64_t W) {
  Tensor t = Tensor::empty({N, 3, H, W});
  float* p = t.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x)
          *p++ = static_cast<float>(std::sin(0.37 * x + 0.91 * y + 1.3 * c + 2.1 * n) * 1.7 +
                                    0.05 * (double(x) - double(y)));
  return t;
}

// Worst |got - ref| / max(1, |ref|) over a nested JSON array against a flat tensor.
void flatten(const json& j, std::vector<double>& out) {
  if (j.is_array())
    for (const auto& e : j) flatten(e, out);
  else
    out.push_back(j.get<double>());
}
double rel_err(const Tensor& got, const json& ref) {
  std::vector<double> r;
  flatten(ref, r);
  EXPECT_EQ(static_cast<int64_t>(r.size()), got.numel());
  if (static_cast<int64_t>(r.size()) != got.numel()) return 1e9;
  double worst = 0.0;
  for (size_t i = 0; i < r.size(); ++i)
    worst = std::max(worst, std::abs(double(got.data<float>()[i]) - r[i]) / std::max(1.0, std::abs(r[i])));
  return worst;
}

void check_model(const std::string& name, bool pooled, bool logits) {
  auto model = VisionModel::load(kDir + name);
  EXPECT_EQ(model->has_pooler(), pooled);
  EXPECT_EQ(model->num_labels(), logits ? 5 : 0);
  const json ref = read_json(kDir + name + "/reference.json");
  ASSERT_EQ(ref["inputs"].size(), 3u);
  for (const auto& in : ref["inputs"]) {
    const auto s = in["shape"].get<std::vector<int64_t>>();
    const bool native = s[2] == 32 && s[3] == 32;
    VisionOutput out = model->forward(pixels(s[0], s[2], s[3]), /*interpolate_pos_encoding=*/!native);
    const int64_t T = model->tokens(s[2], s[3]);
    EXPECT_EQ(out.hidden.shape(), (Shape{s[0], T, 32})) << name;
    const double e = rel_err(out.hidden, in["last_hidden_state"]);
    double ep = 0.0, el = 0.0;
    ASSERT_EQ(out.pooled.defined(), pooled);
    if (pooled) {
      EXPECT_EQ(out.pooled.shape(), (Shape{s[0], 32}));
      ep = rel_err(out.pooled, in["pooled"]);
    }
    ASSERT_EQ(out.logits.defined(), logits);
    if (logits) {
      EXPECT_EQ(out.logits.shape(), (Shape{s[0], 5}));
      el = rel_err(out.logits, in["logits"]);
    }
    std::printf("%s %lldx%lld: rel err hidden %.3g, pooled %.3g, logits %.3g\n", name.c_str(),
                (long long)s[2], (long long)s[3], e, ep, el);
    EXPECT_LE(e, 1e-4) << name << " " << s[2] << "x" << s[3] << " last_hidden_state";
    EXPECT_LE(ep, 1e-4) << name << " " << s[2] << "x" << s[3] << " pooled";
    EXPECT_LE(el, 1e-4) << name << " " << s[2] << "x" << s[3] << " logits";
    for (const auto& op : out.report.ops) EXPECT_EQ(op.backend, "host");
  }
}

// A WeightSource holding tensors in memory (random full-size models, doctored checkpoints).
class MemorySource : public WeightSource {
 public:
  std::string format() const override { return "memory"; }
  std::string path() const override { return "<memory>"; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Tensor get(const std::string& name) const override {
    auto it = data_.find(name);
    if (it == data_.end()) throw std::runtime_error("<memory>: no tensor '" + name + "'");
    return it->second;
  }
  nlohmann::json metadata() const override { return nlohmann::json::object(); }
  void put(const std::string& name, Tensor t) {
    TensorInfo info;
    info.name = name;
    info.file_dtype = "F32";
    info.dtype = t.dtype();
    info.shape = t.shape();
    infos_.push_back(info);
    data_[name] = std::move(t);
  }

 private:
  std::vector<TensorInfo> infos_;
  std::map<std::string, Tensor> data_;
};

// The fixture checkpoint copied into memory without the tensors in `drop`.
std::shared_ptr<MemorySource> copy_without(const std::string& name, const std::set<std::string>& drop) {
  auto src = open_weights(kDir + name);
  auto mem = std::make_shared<MemorySource>();
  for (const auto& t : src->tensors())
    if (!drop.count(t.name)) mem->put(t.name, src->get(t.name).clone());
  return mem;
}

}  // namespace

TEST(VisionSpec, ReadsViTAndDinov2Configs) {
  const VisionSpec vit = vision_spec_from_config(read_json(kDir + "tiny-vit-cls/config.json"));
  EXPECT_EQ(vit.family, "vit");
  EXPECT_EQ(vit.encoder.hidden, 32);
  EXPECT_EQ(vit.encoder.intermediate, 64);
  EXPECT_EQ(vit.encoder.head_dim, 8);
  EXPECT_TRUE(vit.encoder.pre_norm);
  EXPECT_FLOAT_EQ(vit.encoder.norm_eps, 1e-12f);
  EXPECT_EQ(vit.grid(), 4);
  EXPECT_FALSE(vit.always_interpolate);
  EXPECT_TRUE(vit.encoder.names.layer_scale_attn.empty());

  const VisionSpec dino = vision_spec_from_config(read_json(kDir + "tiny-dinov2/config.json"));
  EXPECT_EQ(dino.encoder.intermediate, 64);  // hidden * mlp_ratio
  EXPECT_FLOAT_EQ(dino.encoder.norm_eps, 1e-6f);
  EXPECT_TRUE(dino.always_interpolate);
  EXPECT_FALSE(dino.antialias);
  EXPECT_FALSE(dino.encoder.names.layer_scale_mlp.empty());
  EXPECT_EQ(dino.registers, 0);

  const VisionSpec reg = vision_spec_from_config(read_json(kDir + "tiny-dinov2-reg/config.json"));
  EXPECT_EQ(reg.registers, 4);
  EXPECT_TRUE(reg.antialias);
}

TEST(VisionSpec, BadConfigsNameTheProblem) {
  json c = read_json(kDir + "tiny-vit-cls/config.json");
  const auto fails_with = [](const json& cfg, const std::string& what) {
    try {
      vision_spec_from_config(cfg);
      ADD_FAILURE() << "accepted a config that should fail with " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  json bad = c;
  bad["patch_size"] = 5;
  fails_with(bad, "not a multiple of patch_size 5");
  bad = c;
  bad["model_type"] = "bert";
  fails_with(bad, "\"bert\"");
  bad = c;
  bad.erase("hidden_size");
  fails_with(bad, "hidden_size");
  bad = c;
  bad["num_attention_heads"] = 5;
  fails_with(bad, "num_attention_heads 5");
  bad = read_json(kDir + "tiny-dinov2/config.json");
  bad["use_swiglu_ffn"] = true;
  fails_with(bad, "use_swiglu_ffn");
}

TEST(Vision, ViTClassifierMatchesTransformers) { check_model("tiny-vit-cls", false, true); }
TEST(Vision, ViTPoolerMatchesTransformers) { check_model("tiny-vit-pooler", true, false); }
TEST(Vision, Dinov2MatchesTransformers) { check_model("tiny-dinov2", false, true); }
TEST(Vision, Dinov2WithRegistersMatchesTransformers) { check_model("tiny-dinov2-reg", false, true); }

TEST(Vision, BatchRowsEqualSingleImages) {
  auto model = VisionModel::load(kDir + "tiny-dinov2-reg");
  const Tensor two = pixels(2, 32, 32);
  const VisionOutput both = model->forward(two);
  const VisionOutput second = model->forward(two.slice(0, 1, 2).contiguous());
  const int64_t n = both.hidden.numel() / 2;
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, double(std::abs(both.hidden.data<float>()[n + i] - second.hidden.data<float>()[i])));
  EXPECT_LE(worst, 1e-5);
}

TEST(Vision, BadInputsNameTheProblem) {
  auto vit = VisionModel::load(kDir + "tiny-vit-cls");
  const auto fails_with = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one with " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // ViT does not resize its positions unless asked (transformers raises the same way).
  fails_with([&] { vit->forward(pixels(1, 48, 40)); }, "48x40 differs from the model's 32x32");
  fails_with([&] { vit->forward(pixels(1, 33, 32), true); }, "not a multiple of the patch size 8");
  auto dino = VisionModel::load(kDir + "tiny-dinov2");
  fails_with([&] { dino->forward(pixels(1, 32, 36)); }, "32x36 is not a multiple of the patch size");
  fails_with([&] { dino->forward(Tensor::zeros({1, 1, 32, 32})); }, "1 channels, the model wants 3");
  fails_with([&] { dino->forward(Tensor::zeros({3, 32, 32})); }, "want pixels [N, C, H, W]");
}

TEST(Vision, BadCheckpointsNameTheTensor) {
  const VisionSpec spec = vision_spec_from_config(read_json(kDir + "tiny-dinov2-reg/config.json"));
  const auto fails_with = [&](const VisionSpec& s, std::shared_ptr<MemorySource> w, const std::string& what) {
    try {
      VisionModel m(s, w);
      ADD_FAILURE() << "loaded a checkpoint that should fail with " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const std::string p = "dinov2_with_registers.";
  fails_with(spec, copy_without("tiny-dinov2-reg", {p + "encoder.layer.1.layer_scale2.lambda1"}),
             "missing tensor '" + p + "encoder.layer.1.layer_scale2.lambda1'");
  fails_with(spec, copy_without("tiny-dinov2-reg", {p + "embeddings.register_tokens"}),
             "missing tensor '" + p + "embeddings.register_tokens'");
  fails_with(spec, copy_without("tiny-dinov2-reg", {p + "embeddings.cls_token"}),
             "no 'embeddings.cls_token'");
  // A config whose patch size disagrees with the checkpoint's kernel.
  json cfg = read_json(kDir + "tiny-dinov2-reg/config.json");
  cfg["patch_size"] = 4;
  fails_with(vision_spec_from_config(cfg), copy_without("tiny-dinov2-reg", {}),
             "projection.weight' has shape [32, 3, 8, 8], expected [32, 3, 4, 4]");
  // Or whose image size disagrees with the position table.
  cfg = read_json(kDir + "tiny-dinov2-reg/config.json");
  cfg["image_size"] = 64;
  fails_with(vision_spec_from_config(cfg), copy_without("tiny-dinov2-reg", {}),
             "position_embeddings' has shape [1, 17, 32], expected [1, 65, 32]");
}

TEST(VisionResize, SameSizeIsIdentityAndConstantsStayConstant) {
  Tensor g = Tensor::empty({3, 4, 2});
  for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::sin(0.7f * i);
  const Tensor same = resize_bicubic(g, 3, 4, false);
  for (int64_t i = 0; i < g.numel(); ++i) EXPECT_NEAR(same.data<float>()[i], g.data<float>()[i], 1e-6);
  Tensor c = Tensor::empty({5, 5, 1});
  for (int64_t i = 0; i < c.numel(); ++i) c.data<float>()[i] = 2.5f;
  for (bool aa : {false, true})
    for (auto [h, w] : {std::pair<int64_t, int64_t>{9, 7}, {2, 3}}) {
      const Tensor r = resize_bicubic(c, h, w, aa);
      ASSERT_EQ(r.shape(), (Shape{h, w, 1}));
      for (int64_t i = 0; i < r.numel(); ++i) EXPECT_NEAR(r.data<float>()[i], 2.5f, 1e-5) << aa;
    }
  EXPECT_THROW(resize_bicubic(Tensor::zeros({4, 4}), 2, 2, false), std::invalid_argument);
}

// ViT-B/16 (google/vit-base-patch16-224's config) with random weights made here: loads from the
// config alone and times one 224x224 image on the host (printed, not asserted).
TEST(Vision, FullSizeViTB16Smoke) {
  if (XDNA_UNDER_ASAN) GTEST_SKIP() << "86M-parameter model: too slow under AddressSanitizer";
  const json cfg = json::parse(R"({"model_type": "vit", "hidden_size": 768, "num_hidden_layers": 12,
    "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
    "image_size": 224, "patch_size": 16, "num_channels": 3, "qkv_bias": true})");
  const VisionSpec spec = vision_spec_from_config(cfg);
  auto mem = std::make_shared<MemorySource>();
  // Uniform in [-sqrt(3), sqrt(3)] (unit variance) from xorshift64: fast enough for 86M values.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  const auto uniform = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (static_cast<float>(state >> 40) / 16777216.0f * 2.0f - 1.0f) * 1.7320508f;
  };
  const auto randn = [&](const std::string& name, Shape shape, float scale, float mean = 0.0f) {
    Tensor t = Tensor::empty(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = mean + scale * uniform();
    mem->put("vit." + name, t);
  };
  const int64_t H = 768, I = 3072;
  randn("embeddings.cls_token", {1, 1, H}, 1.0f);
  randn("embeddings.position_embeddings", {1, 197, H}, 1.0f);
  randn("embeddings.patch_embeddings.projection.weight", {H, 3, 16, 16}, 0.036f);
  randn("embeddings.patch_embeddings.projection.bias", {H}, 0.1f);
  for (int i = 0; i < 12; ++i) {
    const std::string L = "encoder.layer." + std::to_string(i) + ".";
    for (const char* m : {"attention.attention.query.", "attention.attention.key.",
                          "attention.attention.value.", "attention.output.dense."}) {
      randn(L + m + "weight", {H, H}, 0.036f);
      randn(L + m + "bias", {H}, 0.1f);
    }
    randn(L + "intermediate.dense.weight", {I, H}, 0.036f);
    randn(L + "intermediate.dense.bias", {I}, 0.1f);
    randn(L + "output.dense.weight", {H, I}, 0.018f);
    randn(L + "output.dense.bias", {H}, 0.1f);
    for (const char* n : {"layernorm_before.", "layernorm_after."}) {
      randn(L + n + "weight", {H}, 0.1f, 1.0f);
      randn(L + n + "bias", {H}, 0.1f);
    }
  }
  randn("layernorm.weight", {H}, 0.1f, 1.0f);
  randn("layernorm.bias", {H}, 0.1f);
  Tensor cw = Tensor::empty({1000, H}), cb = Tensor::zeros({1000});
  for (int64_t i = 0; i < cw.numel(); ++i) cw.data<float>()[i] = 0.036f * uniform();
  mem->put("classifier.weight", cw);
  mem->put("classifier.bias", cb);

  VisionModel model(spec, mem);
  EXPECT_EQ(model.weight_prefix(), "vit.");
  EXPECT_EQ(model.num_labels(), 1000);
  const Tensor px = pixels(1, 224, 224);
  model.forward(px);  // warm-up (thread pool, page faults)
  const auto t0 = std::chrono::steady_clock::now();
  const VisionOutput out = model.forward(px);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out.hidden.shape(), (Shape{1, 197, 768}));
  EXPECT_EQ(out.logits.shape(), (Shape{1, 1000}));
  for (int64_t i = 0; i < out.logits.numel(); ++i) ASSERT_TRUE(std::isfinite(out.logits.data<float>()[i]));
  std::printf("ViT-B/16 random init, one 224x224 image on the host: %.1f ms\n%s", ms,
              out.report.summary().c_str());
}

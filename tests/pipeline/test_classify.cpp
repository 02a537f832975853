// ImageModel (pipeline/classify.h): classification and image embeddings on the tiny random ViT /
// DINOv2 fixtures, checked against VisionModel run directly on the same preprocessed pixels.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "models/vision.h"
#include "pipeline/classify.h"

namespace fs = std::filesystem;
using namespace xdna;

namespace {

const fs::path kVision = fs::path(XDNA_FIXTURE_DIR) / "vision";
const fs::path kImages = fs::path(XDNA_FIXTURE_DIR) / "images";

std::vector<Image> photos() {
  return {load_image((kImages / "photo.jpg").string()), load_image((kImages / "grad.png").string()),
          load_image((kImages / "rgba.png").string())};
}

// What VisionModel gives for the images, preprocessed as ImageModel does.
VisionOutput direct(const std::string& fixture, const std::vector<Image>& images) {
  const std::string dir = (kVision / fixture).string();
  return VisionModel::load(dir)->forward(preprocess_images(images, image_preprocess_for(dir)));
}

double norm(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  return std::sqrt(ss);
}

}  // namespace

TEST(TopClasses, SortsBySoftmaxProbabilityTiesById) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const std::vector<ImageClass> top = top_classes(logits.data(), 4, {"a", "b", "c", "d"}, 10);
  ASSERT_EQ(top.size(), 4u);  // capped at the class count
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 3);  // same logit as 1: the lower id first
  EXPECT_EQ(top[2].id, 2);
  EXPECT_EQ(top[3].id, 0);
  EXPECT_EQ(top[0].label, "b");
  double sum = 0;
  for (const ImageClass& c : top) sum += c.probability;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(top[0].probability, std::exp(3.0) / z, 1e-6);
  // Huge logits do not overflow.
  const std::vector<float> big = {1000.0f, 999.0f};
  const std::vector<ImageClass> t2 = top_classes(big.data(), 2, {}, 1);
  ASSERT_EQ(t2.size(), 1u);
  EXPECT_EQ(t2[0].label, "LABEL_0");
  EXPECT_NEAR(t2[0].probability, 1 / (1 + std::exp(-1.0)), 1e-6);
}

TEST(Classify, VitTopKIsOrderedAndSumsToOne) {
  const ImageModel m = ImageModel::load((kVision / "tiny-vit-cls").string());
  EXPECT_EQ(m.network().family(), "vit");
  ASSERT_EQ(m.labels().size(), 5u);
  EXPECT_EQ(m.labels()[3], "LABEL_3");  // the fixture's id2label
  ASSERT_EQ(m.notes().size(), 1u);      // the fixture has no preprocessor_config.json
  EXPECT_NE(m.notes()[0].find("built from config.json"), std::string::npos) << m.notes()[0];
  EXPECT_EQ(m.preprocess().size_height, 32);

  const std::vector<Image> imgs = photos();
  const auto all = m.classify(imgs, 5);
  ASSERT_EQ(all.size(), imgs.size());
  for (const auto& classes : all) {
    ASSERT_EQ(classes.size(), 5u);
    double sum = 0;
    for (size_t k = 0; k < classes.size(); ++k) {
      sum += classes[k].probability;
      if (k) {
        EXPECT_GE(classes[k - 1].probability, classes[k].probability);
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  const auto top2 = m.classify(imgs, 2);
  for (size_t i = 0; i < imgs.size(); ++i) {
    ASSERT_EQ(top2[i].size(), 2u);
    EXPECT_EQ(top2[i][0].id, all[i][0].id);
    EXPECT_EQ(top2[i][1].id, all[i][1].id);
  }
  EXPECT_THROW(m.classify(imgs, 0), std::invalid_argument);
}

TEST(Classify, LogitsAreVisionModelsOwn) {
  for (const char* fixture : {"tiny-vit-cls", "tiny-dinov2", "tiny-dinov2-reg"}) {
    SCOPED_TRACE(fixture);
    const std::vector<Image> imgs = photos();
    const ImageModel m = ImageModel::load((kVision / fixture).string());
    const Tensor got = m.logits(imgs);
    const Tensor want = direct(fixture, imgs).logits.contiguous();
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < got.numel(); ++i) EXPECT_FLOAT_EQ(got.data<float>()[i], want.data<float>()[i]);
    // The top class is the arg max of the logits.
    const auto top = m.classify(imgs, 1);
    for (int64_t i = 0; i < got.dim(0); ++i) {
      const float* row = want.data<float>() + i * want.dim(1);
      EXPECT_EQ(top[i][0].id, std::max_element(row, row + want.dim(1)) - row);
    }
  }
}

TEST(Classify, BatchEqualsSingles) {
  const ImageModel m = ImageModel::load((kVision / "tiny-dinov2").string());
  const std::vector<Image> imgs = photos();
  ImageRunOptions two;
  two.batch = 2;  // forward passes of 2 and 1
  const std::vector<std::vector<float>> batched = m.embed_images(imgs, true, two);
  ASSERT_EQ(batched.size(), imgs.size());
  for (size_t i = 0; i < imgs.size(); ++i) {
    const std::vector<float> single = m.embed_images({imgs[i]})[0];
    ASSERT_EQ(single.size(), batched[i].size());
    for (size_t d = 0; d < single.size(); ++d) EXPECT_NEAR(single[d], batched[i][d], 1e-5);
  }
}

TEST(ImageEmbeddings, ClsTokenOrPoolerPerFamily) {
  const std::vector<Image> imgs = photos();
  for (const char* fixture : {"tiny-vit-cls", "tiny-dinov2", "tiny-dinov2-reg"}) {  // no pooler: CLS
    SCOPED_TRACE(fixture);
    const ImageModel m = ImageModel::load((kVision / fixture).string());
    EXPECT_EQ(m.network().pooling(), "cls");
    const Tensor h = direct(fixture, imgs).hidden.contiguous();
    const int64_t t = h.dim(1), d = h.dim(2);
    EXPECT_EQ(m.dimensions(), d);
    const auto raw = m.embed_images(imgs, /*normalize=*/false);
    const auto unit = m.embed_images(imgs);
    ASSERT_EQ(raw.size(), imgs.size());
    for (size_t i = 0; i < imgs.size(); ++i) {
      ASSERT_EQ(static_cast<int64_t>(raw[i].size()), d);
      for (int64_t k = 0; k < d; ++k) EXPECT_FLOAT_EQ(raw[i][k], h.data<float>()[i * t * d + k]);
      EXPECT_NEAR(norm(unit[i]), 1.0, 1e-5);
      EXPECT_NEAR(unit[i][0], raw[i][0] / norm(raw[i]), 1e-5);
    }
  }
  // A ViT with pooler.dense: its pooler output.
  const ImageModel p = ImageModel::load((kVision / "tiny-vit-pooler").string());
  EXPECT_EQ(p.network().pooling(), "pooler");
  const Tensor pooled = direct("tiny-vit-pooler", imgs).pooled.contiguous();
  const auto raw = p.embed_images(imgs, false);
  EXPECT_EQ(p.dimensions(), pooled.dim(1));
  for (size_t i = 0; i < imgs.size(); ++i)
    for (int64_t k = 0; k < pooled.dim(1); ++k) EXPECT_FLOAT_EQ(raw[i][k], pooled.data<float>()[i * pooled.dim(1) + k]);
  // A base model has no classifier: classifying is an error saying so.
  try {
    p.classify(imgs, 1);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no classifier head"), std::string::npos) << e.what();
  }
}

TEST(ImageEmbeddings, PreprocessorDefaultsPerFamily) {
  std::string note;
  const ImagePreprocessConfig vit = image_preprocess_for((kVision / "tiny-vit-cls").string(), &note);
  EXPECT_FLOAT_EQ(vit.mean[0], 0.5f);
  EXPECT_EQ(vit.resample, Resample::Bilinear);
  EXPECT_NE(note.find("ViTImageProcessor"), std::string::npos);
  const ImagePreprocessConfig dino = image_preprocess_for((kVision / "tiny-dinov2").string(), &note);
  EXPECT_FLOAT_EQ(dino.mean[0], 0.485f);
  EXPECT_FLOAT_EQ(dino.std[2], 0.225f);
  EXPECT_EQ(dino.resample, Resample::Bicubic);
  EXPECT_EQ(dino.size_width, 32);
  EXPECT_FALSE(dino.do_center_crop);
  EXPECT_NE(note.find("ImageNet"), std::string::npos);
}

TEST(ImageEmbeddings, NotAVisionModelIsAnError) {
  EXPECT_THROW(ImageModel::load((fs::path(XDNA_FIXTURE_DIR) / "no-such-model-dir").string()), std::runtime_error);
  const fs::path enc = fs::path(XDNA_FIXTURE_DIR) / "encoders";
  for (const auto& e : fs::directory_iterator(enc))
    if (e.is_directory() && fs::exists(e.path() / "config.json")) {
      EXPECT_THROW(open_image_network(e.path().string()), std::invalid_argument) << e.path();
      break;
    }
  EXPECT_FALSE(is_vision_family("bert"));
  EXPECT_TRUE(is_vision_family("dinov2"));
}

// `npu classify` and `npu embed --image` end to end: the built binary on the image fixtures with
// the tiny random ViT classifier (labels LABEL_0..4), compared with ImageModel in-process.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "pipeline/classify.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

const std::string kModel = (fs::path(XDNA_FIXTURE_DIR) / "vision" / "tiny-vit-cls").string();
const fs::path kImages = fs::path(XDNA_FIXTURE_DIR) / "images";

test::ShellResult npu(const std::string& args, bool with_stderr = false) {
  // An empty store and config of its own: nothing on this machine changes what the command does.
  return test::run_shell("XDG_CACHE_HOME=/nonexistent-xdna-test XDG_CONFIG_HOME=/nonexistent-xdna-test " +
                         std::string(XDNA_NPU_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

std::string img(const char* name) { return (kImages / name).string(); }

}  // namespace

TEST(CliClassify, JsonMatchesInProcessClassify) {
  const test::ShellResult r = npu("classify --json --top-k 3 --model " + kModel + " " + img("photo.jpg") + " " +
                                  img("grad.png"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["family"], "vit");
  EXPECT_EQ(j["labels"], 5);
  EXPECT_EQ(j["top_k"], 3);
  ASSERT_EQ(j["notes"].size(), 1u);  // no preprocessor_config.json in the fixture: said so
  ASSERT_EQ(j["data"].size(), 2u);

  const ImageModel m = ImageModel::load(kModel);
  const auto want = m.classify({load_image(img("photo.jpg")), load_image(img("grad.png"))}, 3);
  for (size_t i = 0; i < 2; ++i) {
    const json& classes = j["data"][i]["classes"];
    ASSERT_EQ(classes.size(), 3u);
    EXPECT_EQ(j["data"][i]["image"], i == 0 ? img("photo.jpg") : img("grad.png"));
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(classes[k]["id"], want[i][k].id);
      EXPECT_EQ(classes[k]["label"], "LABEL_" + std::to_string(want[i][k].id));
      EXPECT_NEAR(classes[k]["probability"].get<double>(), want[i][k].probability, 1e-6);
    }
  }
}

TEST(CliClassify, TextOutputAndTopK) {
  const test::ShellResult r = npu("classify -k 2 --model " + kModel + " " + img("photo.webp"));
  ASSERT_EQ(r.rc, 0) << r.out;
  // The file name, then one "  probability  label (id)" line per class.
  EXPECT_EQ(r.out.rfind(img("photo.webp") + "\n", 0), 0u) << r.out;
  size_t lines = 0, pos = 0;
  while ((pos = r.out.find("  0.", pos)) != std::string::npos) ++lines, ++pos;
  EXPECT_EQ(lines, 2u) << r.out;
  EXPECT_NE(r.out.find("LABEL_"), std::string::npos);
  // --top-k above the label count shows every label.
  const test::ShellResult all = npu("classify --json --top-k 50 --model " + kModel + " " + img("grad.png"));
  ASSERT_EQ(all.rc, 0);
  double sum = 0;
  const json classes = json::parse(all.out)["data"][0]["classes"];
  EXPECT_EQ(classes.size(), 5u);
  for (const json& c : classes) sum += c["probability"].get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(CliClassify, BadImageOrModelExitsOneWithAMessage) {
  const test::ShellResult bad = npu("classify --model " + kModel + " " + kModel + "/config.json", true);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.out.find("npu: error:"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("config.json"), std::string::npos) << bad.out;  // names the file

  const test::ShellResult missing = npu("classify --model " + kModel + " /nonexistent/cat.jpg", true);
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.out.find("/nonexistent/cat.jpg"), std::string::npos) << missing.out;

  const test::ShellResult unknown = npu("classify --model no-such-vision-model " + img("grad.png"), true);
  EXPECT_EQ(unknown.rc, 1);
  EXPECT_NE(unknown.out.find("no-such-vision-model"), std::string::npos) << unknown.out;

  // A text model is not a vision model.
  const std::string bert = (fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5").string();
  const test::ShellResult text = npu("classify --model " + bert + " " + img("grad.png"), true);
  EXPECT_EQ(text.rc, 1);
  EXPECT_NE(text.out.find("not a vision model"), std::string::npos) << text.out;
}

TEST(CliEmbedImage, VectorsMatchEmbedImages) {
  const test::ShellResult r = npu("embed --json --model " + kModel + " --image " + img("photo.jpg") + " " +
                                  img("gray.png"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["pooling"], "cls");
  EXPECT_EQ(j["dimensions"], 32);
  const ImageModel m = ImageModel::load(kModel);
  const auto want = m.embed_images({load_image(img("photo.jpg")), load_image(img("gray.png"))});
  ASSERT_EQ(j["data"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto got = j["data"][i]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(got.size(), want[i].size());
    for (size_t d = 0; d < got.size(); ++d) EXPECT_NEAR(got[d], want[i][d], 1e-6);
  }
  // Text output: one line of 32 numbers per image.
  const test::ShellResult text = npu("embed --model " + kModel + " --image " + img("grad.png"));
  ASSERT_EQ(text.rc, 0);
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), '\n'), 1);
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), ' '), 31);
}

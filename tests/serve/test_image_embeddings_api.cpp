// POST /v1/embeddings with image inputs: the server in-process, a temp store holding the tiny
// DINOv2 fixture (a vision model) and the tiny BERT fixture (a text model). An image given as a
// data URL must embed to exactly what ImageModel::embed_images gives for the same file; text to the
// vision model and images to the text model are 400s naming the model and the input index.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipeline/classify.h"
#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

const fs::path kVision = fs::path(XDNA_FIXTURE_DIR) / "vision" / "tiny-dinov2";
const fs::path kText = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";
const fs::path kImages = fs::path(XDNA_FIXTURE_DIR) / "images";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string base64(const std::string& bytes) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? a[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::string data_url(const fs::path& file, const std::string& type) {
  return "data:image/" + type + ";base64," + base64(read_file(file));
}

// A PNG whose header claims width x height (valid signature and CRCs, one byte of pixel data).
std::string png_header_only(uint32_t width, uint32_t height) {
  auto crc32 = [](const std::string& s) {
    uint32_t c = 0xffffffffu;
    for (unsigned char b : s) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
  };
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc32(type + data));
  };
  const std::string ihdr = be32(width) + be32(height) + std::string{8, 2, 0, 0, 0};  // 8-bit RGB
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", "x") + chunk("IEND", "");
}

class ImageEmbeddingsApi : public test::ServerSuite<ImageEmbeddingsApi> {
 public:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-image-embed-api");
    const fs::path store = dir_ / "models";
    test::add_store_model(store, "tiny-dino", "dinov2", "safetensors", "f32", kVision, true);
    test::add_store_model(store, "tiny-bert", "bert", "safetensors", "f32", kText, true);
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    server_ = std::make_unique<test::RunningServer>(opts);
  }

 protected:
  httplib::Result embed(const json& input, const std::string& model = "tiny-dino") {
    return post("/v1/embeddings", {{"model", model}, {"input", input}});
  }
  // A 400 whose message contains every one of `parts`.
  void expect_400(const httplib::Result& r, const std::vector<std::string>& parts, int status = 400) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const std::string message = json::parse(r->body)["error"]["message"];
    for (const std::string& p : parts) EXPECT_NE(message.find(p), std::string::npos) << message;
  }
};

}  // namespace

TEST_F(ImageEmbeddingsApi, DataUrlGivesEmbedImagesVector) {
  const ImageModel model = ImageModel::load(kVision.string());
  const std::vector<std::vector<float>> want =
      model.embed_images({load_image((kImages / "photo.jpg").string()), load_image((kImages / "grad.png").string())});

  // Both documented forms: a data URL string, and an image_url object.
  const json j = ok(embed({data_url(kImages / "photo.jpg", "jpeg"),
                           {{"type", "image_url"}, {"image_url", {{"url", data_url(kImages / "grad.png", "png")}}}}}));
  ASSERT_EQ(j["data"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<float> got = j["data"][i]["embedding"].get<std::vector<float>>();
    EXPECT_EQ(j["data"][i]["index"], i);
    ASSERT_EQ(got.size(), want[i].size());
    for (size_t d = 0; d < got.size(); ++d) EXPECT_FLOAT_EQ(got[d], want[i][d]);
  }
  EXPECT_EQ(j["model"], "tiny-dino");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 0);
  // A single data URL string works too, and the vector has unit length.
  const json one = ok(embed(data_url(kImages / "photo.webp", "webp")));
  double ss = 0;
  for (float x : one["data"][0]["embedding"].get<std::vector<float>>()) ss += double(x) * x;
  EXPECT_NEAR(std::sqrt(ss), 1.0, 1e-5);
}

TEST_F(ImageEmbeddingsApi, WrongKindsAre400sNamingModelAndIndex) {
  const std::string img = data_url(kImages / "grad.png", "png");
  expect_400(embed(json::array({img, "a sentence"})), {"input[1]", "tiny-dino", "vision model"});
  expect_400(embed(json::array({"a sentence", img}), "tiny-bert"), {"input[1]", "tiny-bert", "image"});
  expect_400(embed(json::array({1, 2, 3})), {"tiny-dino", "token ids"});
}

TEST_F(ImageEmbeddingsApi, BadImagesAreRefused) {
  expect_400(embed("data:image/png;base64,!!!notbase64"), {"input", "base64"});
  expect_400(embed("data:image/png,rawbytes"), {"input", "data URL"});
  expect_400(embed(json::array({{{"type", "image_url"}, {"image_url", {{"url", "https://example.com/a.png"}}}}})),
             {"input[0]", "not fetched"});
  expect_400(embed(json::array({{{"type", "text"}}})), {"input[0]", "image_url"});
  // Not an image at all: the decoder's message, naming the input.
  expect_400(embed("data:image/png;base64," + base64("hello, not a png")), {"input[0]"});
  // A header claiming 20000 x 20000 pixels: over the decoder's pixel cap, refused before allocating.
  expect_400(embed("data:image/png;base64," + base64(png_header_only(20000, 20000))), {"input[0]", "exceeds"}, 413);
}

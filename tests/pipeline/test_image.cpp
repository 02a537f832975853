// Image frontend: decoding against Pillow 12.0.0's Image.open(f).convert("RGB") of every fixture
// (tests/fixtures/images, made by scripts/make_image_fixtures.py), preprocessing against
// transformers 5.24.0's PIL-backend processors (ViT, BiT/DINOv2, ConvNeXt, EfficientNet), and bad
// input: empty, wrong magic, truncated, huge headers, CMYK — each an exception naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "core/numeric.h"
#include "pipeline/image.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

const fs::path kDir = fs::path(XDNA_FIXTURE_DIR) / "images";

const json& index_json() {
  static const json j = json::parse(std::ifstream(kDir / "images.json"));
  return j;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f) << "missing fixture " << p;
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The decode must throw std::invalid_argument whose message contains every one of `words`.
void expect_error(const std::string& bytes, const std::vector<std::string>& words, const ImageLimits& limits = {}) {
  try {
    decode_image(bytes, "bad.img", limits);
    ADD_FAILURE() << "decoded without error; expected: " << words[0];
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.img"), std::string::npos) << msg;
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

// Largest |ours - Pillow's| allowed per decoded sample: 0 for every fixture. Lossless formats are
// exact by definition. JPEG (baseline, progressive, gray): both sides are libjpeg-turbo's
// default islow IDCT with fancy upsampling (Debian's 2.1.5 here, the build bundled in Pillow's
// wheel there) and were measured identical. Lossy WebP: Debian's libwebp 1.2.4 against Pillow's
// bundled libwebp, also measured identical. Should a library update change a rounding, this is the
// number to revisit (a differing IDCT would typically move samples by 1-2 levels).
int decode_tolerance(const std::string&) { return 0; }

}  // namespace

TEST(ImageDecode, MatchesPillowConvertRgb) {
  for (const auto& [name, meta] : index_json()["decoded"].items()) {
    SCOPED_TRACE(name);
    const Image img = decode_image(read_bytes(kDir / name), name);
    ASSERT_EQ(img.width, meta["width"].get<int>());
    ASSERT_EQ(img.height, meta["height"].get<int>());
    const std::string want = read_bytes(kDir / (name + ".rgb"));
    ASSERT_EQ(img.rgb.size(), want.size());
    int worst = 0;
    size_t differing = 0;
    for (size_t i = 0; i < want.size(); i++) {
      const int d = std::abs(int(img.rgb[i]) - int(static_cast<uint8_t>(want[i])));
      worst = std::max(worst, d);
      differing += d != 0;
    }
    EXPECT_LE(worst, decode_tolerance(name)) << differing << " of " << want.size() << " samples differ";
    const std::string mode = meta["mode"];
    const bool transparent = mode == "RGBA" || name == "palette.png";  // palette.png has a tRNS chunk
    EXPECT_EQ(!img.alpha.empty(), transparent);
  }
}

TEST(ImageDecode, FormatFromMagicBytesNotName) {
  EXPECT_EQ(detect_image_format(read_bytes(kDir / "photo.jpg")), ImageFormat::Jpeg);
  EXPECT_EQ(detect_image_format(read_bytes(kDir / "grad.png")), ImageFormat::Png);
  EXPECT_EQ(detect_image_format(read_bytes(kDir / "photo.webp")), ImageFormat::Webp);
  EXPECT_EQ(detect_image_format("GIF89a......"), ImageFormat::Unknown);
  // A PNG named .jpg still decodes as PNG.
  const Image img = decode_image(read_bytes(kDir / "grad.png"), "misnamed.jpg");
  EXPECT_EQ(img.width, 97);
}

TEST(ImageDecode, ExifOrientationIsNotApplied) {
  // Orientation 6 would rotate 16x8 to 8x16; transformers' processors leave it as stored.
  const Image img = load_image((kDir / "exif_rotated.jpg").string());
  EXPECT_EQ(img.width, 16);
  EXPECT_EQ(img.height, 8);
}

TEST(ImageDecode, BadInputNamesTheProblem) {
  expect_error("", {"empty"});
  expect_error("GIF89a\x01\x00\x01\x00", {"magic"});
  expect_error(read_bytes(kDir / "cmyk.jpg"), {"JPEG", "CMYK"});
  const std::string jpg = read_bytes(kDir / "photo.jpg"), png = read_bytes(kDir / "grad.png"),
                    webp = read_bytes(kDir / "photo.webp");
  expect_error(jpg.substr(0, jpg.size() / 2), {"JPEG", "truncated"});
  expect_error(read_bytes(kDir / "photo_progressive.jpg").substr(0, 1500), {"JPEG", "truncated"});
  expect_error(png.substr(0, png.size() / 2), {"PNG", "truncated"});
  expect_error(webp.substr(0, webp.size() / 2), {"WebP"});
  expect_error(jpg.substr(0, 3), {"JPEG"});
  expect_error(png.substr(0, 8), {"PNG"});
  // A pixel cap below the image's size.
  expect_error(jpg, {"JPEG", "exceeds the limit"}, ImageLimits{1000});
  expect_error(png, {"PNG", "exceeds the limit"}, ImageLimits{1000});
  expect_error(webp, {"WebP", "exceeds the limit"}, ImageLimits{1000});
  expect_error(std::string("\xFF\xD8\xFF\xE0", 4) + std::string(64, '\0'), {"JPEG"});
  // A corrupt IHDR checksum.
  std::string bad_crc = png;
  bad_crc[29] ^= 0x55;
  expect_error(bad_crc, {"PNG"});
}

TEST(ImageDecode, HugeDimensionsInHeaderAreRefusedBeforeAllocating) {
  // PNG: IHDR says 60000 x 60000 (3.6 gigapixels), checksum valid.
  std::string png = read_bytes(kDir / "grad.png");
  const unsigned char dims[8] = {0, 0, 0xEA, 0x60, 0, 0, 0xEA, 0x60};
  std::memcpy(png.data() + 16, dims, 8);
  const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  const unsigned char crc_be[4] = {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8), uint8_t(crc)};
  std::memcpy(png.data() + 29, crc_be, 4);
  expect_error(png, {"PNG", "60000x60000", "exceeds the limit"});
  // JPEG: patch the SOF marker's height and width to 65000.
  std::string jpg = read_bytes(kDir / "photo.jpg");
  size_t sof = jpg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  const unsigned char big[4] = {0xFD, 0xE8, 0xFD, 0xE8};
  std::memcpy(jpg.data() + sof + 5, big, 4);
  expect_error(jpg, {"JPEG", "65000x65000", "exceeds the limit"});
}

TEST(ImageDecode, EveryTruncationThrowsOrDecodesNeverCrashes) {
  for (const char* name : {"photo.jpg", "photo_progressive.jpg", "grad.png", "palette.png", "photo.webp", "rgba.webp"}) {
    const std::string bytes = read_bytes(kDir / name);
    for (size_t n = 0; n < bytes.size(); n += 1 + n / 16) {
      try {
        const Image img = decode_image(bytes.substr(0, n), name);
        EXPECT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3);
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos);
      }
    }
  }
}

TEST(ImageResize, BasicProperties) {
  Image flat;
  flat.width = 37;
  flat.height = 23;
  flat.rgb.assign(37 * 23 * 3, 77);
  for (Resample f : {Resample::Nearest, Resample::Bilinear, Resample::Bicubic, Resample::Lanczos})
    for (auto [w, h] : {std::pair{10, 7}, std::pair{80, 50}, std::pair{37, 5}}) {
      const Image r = resize_image(flat, w, h, f);
      ASSERT_EQ(r.width, w);
      ASSERT_EQ(r.height, h);
      for (uint8_t v : r.rgb) ASSERT_EQ(v, 77) << "a flat image stays flat (weights sum to 1)";
    }
  const Image same = resize_image(flat, 37, 23, Resample::Bicubic);
  EXPECT_EQ(same.rgb, flat.rgb);
  EXPECT_THROW(resize_image(flat, 0, 5, Resample::Bilinear), std::invalid_argument);
  // A crop bigger than the image pads with zeros, centred with floor offsets.
  const Image padded = center_crop(flat, 40, 24);
  EXPECT_EQ(padded.at(0, 0, 0), 0);
  EXPECT_EQ(padded.at(2, 1, 0), 77);
  EXPECT_EQ(padded.at(1, 1, 0), 0);
}

TEST(ImagePreprocess, MatchesTransformersProcessors) {
  for (const auto& c : index_json()["processed"]) {
    const std::string name = c["image"], proc = c["processor"];
    SCOPED_TRACE(name + " / " + proc);
    const ImagePreprocessConfig cfg = parse_preprocessor_config(c["config"].dump());
    const Image img = load_image((kDir / name).string());
    const Tensor t = preprocess_image(img, cfg);
    const auto shape = c["shape"].get<std::vector<int64_t>>();
    ASSERT_EQ(t.shape(), Shape(shape.begin(), shape.end()));
    const std::string ref = read_bytes(kDir / c["output"].get<std::string>());
    ASSERT_EQ(ref.size(), size_t(t.numel()) * 2);
    const int64_t plane = shape[2] * shape[3];
    const float* ours = t.data<float>();
    double worst = 0;
    int64_t within = 0;
    for (int64_t i = 0; i < t.numel(); i++) {
      uint16_t h;
      std::memcpy(&h, ref.data() + 2 * i, 2);
      const float want = f16_to_f32(h);
      const int ch = int(i / plane);
      // One uint8 level after rescale/normalise, plus the f16 rounding of the stored reference.
      double level = cfg.rescale_factor / cfg.std[ch];
      if (cfg.include_top) level /= cfg.std[ch];
      const double err = std::fabs(double(ours[i]) - want);
      worst = std::max(worst, err / level);
      within += err <= level + std::fabs(want) * 1e-3;
    }
    const double frac = double(within) / double(t.numel());
    EXPECT_GE(frac, 0.99) << "max error " << worst << " uint8 levels";
    // Measured: the resized uint8 pixels equal Pillow's everywhere; what is left is the f16
    // rounding of the stored reference (under 0.06 of a level), so half a level means "same pixel".
    EXPECT_LT(worst, 0.5) << "some pixel differs from Pillow's resize";
    std::printf("  %-10s %-13s max error %.3f uint8 levels, %.2f%% within one level\n", name.c_str(), proc.c_str(),
                worst, 100 * frac);
  }
}

TEST(ImagePreprocess, BatchAndConfigErrors) {
  const Image a = load_image((kDir / "photo.jpg").string()), b = load_image((kDir / "grad.png").string());
  const ImagePreprocessConfig vit = parse_preprocessor_config(R"({"image_processor_type": "ViTImageProcessor",
      "size": {"height": 32, "width": 40}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})");
  const Tensor batch = preprocess_images({a, b}, vit);
  EXPECT_EQ(batch.shape(), (Shape{2, 3, 32, 40}));
  const Tensor one = preprocess_image(b, vit);
  EXPECT_EQ(std::memcmp(batch.data<float>() + one.numel(), one.data<float>(), one.nbytes()), 0);
  // Shortest-edge resize without a crop gives per-image sizes: a batch of them is refused.
  const ImagePreprocessConfig bit = parse_preprocessor_config(
      R"({"image_processor_type": "BitImageProcessor", "size": {"shortest_edge": 30}, "do_center_crop": false})");
  EXPECT_THROW(preprocess_images({a, b}, bit), std::invalid_argument);
  const Tensor t = preprocess_image(a, bit);
  EXPECT_EQ(t.shape(), (Shape{1, 3, 30, 40}));  // 96x72 -> short side 30, long int(30 * 96 / 72)
  EXPECT_THROW(parse_preprocessor_config("{"), std::invalid_argument);
  EXPECT_THROW(parse_preprocessor_config(R"({"image_processor_type": "SiglipImageProcessor"})"), std::invalid_argument);
  EXPECT_THROW(parse_preprocessor_config(R"({"image_processor_type": "ViTImageProcessor", "resample": 5})"), std::invalid_argument);
  EXPECT_THROW(parse_preprocessor_config(R"({"image_processor_type": "ViTImageProcessor", "size": {"height": -3, "width": 4}})"),
               std::invalid_argument);
  EXPECT_THROW(parse_preprocessor_config(R"({"image_processor_type": "ViTImageProcessor", "image_std": [1, 0, 1]})"),
               std::invalid_argument);
  // The real facebook/dinov2-small values parse to the BiT path.
  const ImagePreprocessConfig dino = parse_preprocessor_config(R"({"crop_size": {"height": 224, "width": 224},
      "do_center_crop": true, "do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
      "image_mean": [0.485, 0.456, 0.406], "image_processor_type": "BitImageProcessor",
      "image_std": [0.229, 0.224, 0.225], "resample": 3, "rescale_factor": 0.00392156862745098,
      "size": {"shortest_edge": 256}})");
  EXPECT_EQ(preprocess_image(a, dino).shape(), (Shape{1, 3, 224, 224}));
  EXPECT_EQ(dino.resample, Resample::Bicubic);
}

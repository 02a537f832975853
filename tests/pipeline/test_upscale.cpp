// Super-resolution pipeline: tiling equals the untiled run, PNG writing round-trips, and (when
// `npu model pull esrgan-slim` has been run) the real ESRGAN-slim models reproduce the package's
// own expected outputs for its fixture image.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "pipeline/upscale.h"

#include "upscale_test_util.h"

namespace fs = std::filesystem;
using namespace xdna;

namespace {

const std::string kFixtures = XDNA_FIXTURE_DIR;

using uptest::esrgan_slim_dir;

Image noise_image(int w, int h, unsigned seed) { return uptest::gradient_image(w, h, seed, 40); }

Upscaler tiny_upscaler() {
  Upscaler up;
  up.net = load_upscaler(kFixtures + "/tfjs/tiny/model.json");
  return up;
}

}  // namespace

TEST(Upscale, TiledEqualsUntiledOnTinyModel) {
  const Upscaler up = tiny_upscaler();
  ASSERT_GT(up.net.receptive_radius, 0);
  const Image img = noise_image(53, 41, 1);
  UpscaleOptions whole, tiled;
  whole.tile = 4096;
  tiled.tile = 16;  // 4 x 3 tiles, ragged at the right and bottom edges
  const Image a = upscale_image(up, img, whole), b = upscale_image(up, img, tiled);
  ASSERT_EQ(a.width, 53 * up.net.scale);
  ASSERT_EQ(a.height, 41 * up.net.scale);
  EXPECT_EQ(a.rgb, b.rgb);
}

TEST(Upscale, PngRoundTrip) {
  const Image img = noise_image(17, 9, 2);
  const std::string path = (fs::temp_directory_path() / ("xdna_png_" + std::to_string(::getpid()) + ".png")).string();
  encode_png(img, path);
  const Image back = load_image(path);
  fs::remove(path);
  EXPECT_EQ(back.width, 17);
  EXPECT_EQ(back.height, 9);
  EXPECT_EQ(back.rgb, img.rgb);
  EXPECT_THROW(encode_png(img, "/nonexistent-dir/x.png"), std::runtime_error);
  EXPECT_THROW(encode_png(Image{}, path), std::runtime_error);
}

TEST(Upscale, PsnrOfKnownDifference) {
  Image a = noise_image(10, 10, 3), b = a;
  EXPECT_TRUE(std::isinf(psnr_rgb(a, b)));
  b.rgb[0] = static_cast<uint8_t>(a.rgb[0] ^ 1);  // one value off by one: MSE 1/300
  EXPECT_NEAR(psnr_rgb(a, b), 10 * std::log10(255.0 * 255.0 * 300), 1e-9);
}

// The package's samples/<N>x/result.png were written by UpscalerJS from fixture.png (x8 ships none).
TEST(Upscale, EsrganSlimMatchesPackageOutputs) {
  const std::string dir = esrgan_slim_dir();
  if (dir.empty()) GTEST_SKIP() << "esrgan-slim is not in the store (`npu model pull esrgan-slim`)";
  const Image fixture = load_image(dir + "/fixture.png");
  for (int s : {2, 3, 4}) {
    Upscaler up;
    up.net = load_upscaler(dir + "/x" + std::to_string(s) + "/model.json");
    ASSERT_EQ(up.net.scale, s);
    const Image got = upscale_image(up, fixture);
    const Image want = load_image(dir + "/samples/" + std::to_string(s) + "x/result.png");
    ASSERT_EQ(got.width, want.width);
    const double psnr = psnr_rgb(got, want);
    std::printf("esrgan-slim x%d: PSNR %.2f dB vs the package's expected output\n", s, psnr);
    EXPECT_GE(psnr, 50.0) << "x" << s;
  }
}

TEST(Upscale, EsrganSlimTiledEqualsUntiled) {
  const std::string dir = esrgan_slim_dir();
  if (dir.empty()) GTEST_SKIP() << "esrgan-slim is not in the store (`npu model pull esrgan-slim`)";
  Upscaler up;
  up.net = load_upscaler(dir + "/x2/model.json");
  const Image img = noise_image(70, 50, 4);
  const Tensor raw = upscale_raw(up, img);
  UpscaleOptions whole, tiled;
  whole.tile = 4096;
  tiled.tile = 24;
  const Image a = upscale_image(up, img, whole), b = upscale_image(up, img, tiled);
  // Winograd convolutions (host/conv_winograd.h) round per tile of their own grid, which starts
  // at each image tile's corner: tiles may differ from the whole image by 1 of 255.
  ASSERT_EQ(a.rgb.size(), b.rgb.size());
  int worst = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) worst = std::max(worst, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  EXPECT_LE(worst, 1);
  ASSERT_EQ(raw.dim(1), 100);
}

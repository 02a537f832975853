// Upscaler networks from TF.js layers: the hand-written fixture against its numpy reference
// (scripts/make_tfjs_fixture.py), TF's depth_to_space channel order, and unsupported graphs.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "models/upscaler.h"

using namespace xdna;
using nlohmann::json;

namespace {

const std::string kTiny = std::string(XDNA_FIXTURE_DIR) + "/tfjs/tiny";

json load_json(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

}  // namespace

TEST(Upscaler, DepthToSpaceUsesTensorFlowChannelOrder) {
  // C = 2, r = 2, H = W = 1: input channel k = (i r + j) C + c holds value k.
  Tensor x = Tensor::from_vector({8, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor y = depth_to_space(x, 2);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 2}));
  // out[c, i, j] = in[(i 2 + j) 2 + c]; PyTorch's pixel_shuffle would give c 4 + i 2 + j instead.
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_THROW(depth_to_space(Tensor::zeros({6, 1, 1}), 2), std::invalid_argument);
}

TEST(Upscaler, TinyModelMatchesNumpyReference) {
  const UpscalerNet net = load_upscaler(kTiny + "/model.json");
  EXPECT_EQ(net.scale, 2);
  // c1 3x3 (1) + c2 2x2 (1, rounded up) = 2 input pixels; upsampling adds nothing.
  EXPECT_EQ(net.receptive_radius, 2);
  const json want = load_json(kTiny + "/expected.json");
  const int H = want["height"], W = want["width"];
  const std::vector<double> in = want["input_hwc"], out = want["output_hwc"];
  Tensor x = Tensor::empty({3, H, W});
  for (int y = 0; y < H; ++y)
    for (int xx = 0; xx < W; ++xx)
      for (int c = 0; c < 3; ++c) x.data<float>()[(c * H + y) * W + xx] = float(in[(y * W + xx) * 3 + c]);
  const Tensor got = run_upscaler(net, x);
  ASSERT_EQ(got.shape(), (Shape{3, 2 * H, 2 * W}));
  double max_err = 0;
  for (int y = 0; y < 2 * H; ++y)
    for (int xx = 0; xx < 2 * W; ++xx)
      for (int c = 0; c < 3; ++c)
        max_err = std::max(max_err, std::abs(got.data<float>()[(c * 2 * H + y) * 2 * W + xx] -
                                             out[(y * 2 * W + xx) * 3 + c]));
  EXPECT_LT(max_err, 1e-5);
}

TEST(Upscaler, UnsupportedGraphsNameTheLayer) {
  const json good = load_json(kTiny + "/model.json");
  auto error_of = [](const json& j) -> std::string {
    try {
      build_upscaler(parse_tfjs_model(j.dump(), kTiny, "m.json"));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(good), "");
  json j = good;
  j["modelTopology"]["model_config"]["config"]["layers"][4]["class_name"] = "Lambda";
  EXPECT_NE(error_of(j).find("layer 'ps': unsupported layer class 'Lambda'"), std::string::npos) << error_of(j);
  j = good;
  j["modelTopology"]["model_config"]["config"]["layers"][1]["config"]["activation"] = "gelu_new";
  EXPECT_NE(error_of(j).find("layer 'c1': unsupported activation 'gelu_new'"), std::string::npos);
  j = good;
  j["modelTopology"]["model_config"]["config"]["layers"][3]["config"]["filters"] = 13;
  EXPECT_NE(error_of(j).find("layer 'c2': kernel shape"), std::string::npos);
  j = good;  // PixelShuffle3x on 12 channels: 12 % 9 != 0
  j["modelTopology"]["model_config"]["config"]["layers"][4]["class_name"] = "PixelShuffle3x";
  EXPECT_NE(error_of(j).find("do not split"), std::string::npos);
  EXPECT_THROW(run_upscaler(load_upscaler(kTiny + "/model.json"), Tensor::zeros({4, 2, 2})), std::invalid_argument);
}

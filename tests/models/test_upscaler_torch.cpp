// ESPCN and EDSR (x2, x3, x4) from PyTorch state dicts: random-init models against PyTorch's
// output at f32 (scripts/make_sr_fixtures.py), the layer list they become, and bad checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/upscaler.h"
#include "weights/source.h"
#include "weights/torch_checkpoint.h"

using namespace xdna;
using nlohmann::json;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/sr";

json cases() {
  std::ifstream in(kDir + "/sr.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str())["cases"];
}

Tensor read_f32(const std::string& path, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(t.data<float>()), static_cast<std::streamsize>(t.numel() * 4));
  EXPECT_EQ(in.gcount(), t.numel() * 4) << path;
  return t;
}

Shape shape_of(const json& j) { return j.get<Shape>(); }

}  // namespace

TEST(UpscalerTorch, EveryFixtureMatchesPyTorch) {
  const json all = cases();
  ASSERT_EQ(all.size(), 6u);  // ESPCN and EDSR at x2, x3, x4
  for (const json& c : all) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const UpscalerNet net = load_upscaler(kDir + "/" + c["weights"].get<std::string>());
    EXPECT_EQ(net.scale, c["scale"].get<int>());
    const Tensor x = read_f32(kDir + "/" + c["name"].get<std::string>() + ".in.f32", shape_of(c["in_shape"]));
    const Tensor want = read_f32(kDir + "/" + c["name"].get<std::string>() + ".out.f32", shape_of(c["out_shape"]));
    const Tensor got = run_upscaler(net, x);
    ASSERT_EQ(got.shape(), want.shape());
    double peak = 0, worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) peak = std::max(peak, double(std::fabs(want.data<float>()[i])));
    for (int64_t i = 0; i < want.numel(); ++i)
      worst = std::max(worst, double(std::fabs(got.data<float>()[i] - want.data<float>()[i])));
    EXPECT_GT(peak, 0.1);
    EXPECT_LE(worst / peak, 1e-4) << "max |diff| " << worst << " of peak " << peak;
  }
}

TEST(UpscalerTorch, EdsrLayersFollowTheReferenceModules) {
  const UpscalerNet net = load_upscaler(kDir + "/edsr_x4.safetensors");
  // input, sub_mean, head, 2 blocks x (conv, conv, res_scale, add), body conv, skip add,
  // 2 x (upsampler conv, shuffle), tail conv, add_mean.
  ASSERT_EQ(net.layers.size(), 1u + 2 + 2 * 4 + 2 + 2 * 2 + 2);
  EXPECT_EQ(net.layers[1].name, "sub_mean");
  EXPECT_EQ(net.layers[5].kind, UpLayerKind::Rescale);
  EXPECT_FLOAT_EQ(net.layers[5].scale, 0.1f);  // from the safetensors metadata
  EXPECT_EQ(net.layers[net.output].name, "add_mean");
  EXPECT_EQ(net.layers[net.output].factor, 4);
  // res_scale 1 (the x2 fixture, EDSR baseline) adds no Rescale layers.
  const UpscalerNet x2 = load_upscaler(kDir + "/edsr_x2.pt");
  for (const UpLayer& u : x2.layers) EXPECT_NE(u.kind, UpLayerKind::Rescale) << u.name;
  // Receptive radius: 1x1 convs add nothing; 3x3 ones at 1x add 1, the tail conv at 2x adds 1.
  EXPECT_EQ(x2.receptive_radius, 1 + 2 * 2 + 1 + 1 + 1);
}

TEST(UpscalerTorch, WrongResScaleChangesTheOutput) {
  // The x3 fixture has res_scale 0.1 in edsr_x3.json; built with 1 the output must differ.
  const json c = cases()[4];
  ASSERT_EQ(c["name"], "edsr_x3");
  TorchCheckpoint w(kDir + "/edsr_x3.pt");
  const Tensor x = read_f32(kDir + "/edsr_x3.in.f32", shape_of(c["in_shape"]));
  const Tensor a = run_upscaler(build_torch_upscaler(w, 1.0f), x);
  const Tensor b = run_upscaler(load_upscaler(kDir + "/edsr_x3.pt"), x);
  double diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) diff = std::max(diff, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  EXPECT_GT(diff, 1e-2);
  EXPECT_THROW(build_torch_upscaler(w, 0.0f), std::invalid_argument);
}

// The EDSR fixture with some tensors hidden or replaced: what a truncated or foreign checkpoint is.
class EditedSource final : public WeightSource {
 public:
  EditedSource(const std::string& path, std::string hide, std::string shrink)
      : inner_(path), hide_(std::move(hide)), shrink_(std::move(shrink)) {
    for (const TensorInfo& t : inner_.tensors())
      if (t.name != hide_) infos_.push_back(t);
  }
  std::string format() const override { return "torch"; }
  std::string path() const override { return inner_.path(); }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Tensor get(const std::string& name) const override {
    const Tensor t = inner_.get(name);
    return name == shrink_ ? t.slice(1, 0, 1).contiguous() : t;  // one input channel too few
  }
  json metadata() const override { return inner_.metadata(); }

 private:
  TorchCheckpoint inner_;
  std::string hide_, shrink_;
  std::vector<TensorInfo> infos_;
};

TEST(UpscalerTorch, BadCheckpointsNameTheProblem) {
  auto message = [](const WeightSource& w) {
    try {
      build_torch_upscaler(w);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string edsr = kDir + "/edsr_x2.pt";
  EXPECT_EQ(message(EditedSource(edsr, "", "")), "no error");
  EXPECT_NE(message(EditedSource(edsr, "body.1.body.2.weight", "")).find("body.1.body.2.weight: missing"), std::string::npos);
  EXPECT_NE(message(EditedSource(edsr, "tail.0.0.weight", "")).find("tail.0.0.weight"), std::string::npos);
  EXPECT_NE(message(EditedSource(edsr, "", "body.0.body.2.weight")).find("body.0.body.2.weight: shape"), std::string::npos);
  EXPECT_NE(message(EditedSource(edsr, "head.0.weight", "")).find("not an ESPCN"), std::string::npos);
  EXPECT_NE(message(EditedSource(kDir + "/espcn_x3.pt", "", "last_part.0.weight")).find("last_part.0.weight"),
            std::string::npos);

  try {
    load_upscaler(kDir + "/missing.pt");
    FAIL() << "a missing file loaded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("missing.pt"), std::string::npos) << e.what();
  }
  // A same-stem JSON with a non-numeric res_scale is refused by name.
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "xdna_sr_bad.pt";
  std::filesystem::copy_file(edsr, tmp, std::filesystem::copy_options::overwrite_existing);
  std::ofstream(std::filesystem::path(tmp).replace_extension(".json")) << R"({"res_scale": "big"})";
  try {
    load_upscaler(tmp.string());
    ADD_FAILURE() << "bad res_scale accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("res_scale"), std::string::npos) << e.what();
  }
  std::filesystem::remove(tmp);
  std::filesystem::remove(std::filesystem::path(tmp).replace_extension(".json"));
}

// TF.js layers-model reader on the hand-written fixture (scripts/make_tfjs_fixture.py) and on
// malformed variants of it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "weights/tfjs.h"

namespace fs = std::filesystem;
using namespace xdna;
using nlohmann::json;

namespace {

const std::string kTiny = std::string(XDNA_FIXTURE_DIR) + "/tfjs/tiny";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses `text` against the fixture's shard directory and returns the error message ("" if none).
std::string error_of(const std::string& text, const std::string& dir = kTiny) {
  try {
    parse_tfjs_model(text, dir, "bad/model.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Tfjs, ReadsTopologyAndWeights) {
  const TfjsModel m = load_tfjs_model(kTiny + "/model.json");
  EXPECT_EQ(m.format, "layers-model");
  ASSERT_EQ(m.layers.size(), 7u);
  EXPECT_EQ(m.layers[1].class_name, "Conv2D");
  EXPECT_EQ(m.layers[2].inputs, (std::vector<std::string>{"c1", "LR"}));
  EXPECT_EQ(m.layers[4].class_name, "PixelShuffle2x");
  EXPECT_EQ(m.input_layers, std::vector<std::string>{"LR"});
  EXPECT_EQ(m.output_layers, std::vector<std::string>{"SR"});
  EXPECT_EQ(m.weight("c1/kernel").shape(), (Shape{3, 3, 3, 8}));
  EXPECT_EQ(m.weight("c2/kernel").shape(), (Shape{2, 2, 11, 12}));
  EXPECT_THROW(m.weight("nope/kernel"), std::invalid_argument);

  const json want = json::parse(slurp(kTiny + "/expected.json"));
  // uint8 quantized kernel: q * scale + min, in f32.
  EXPECT_FLOAT_EQ(m.weight("c2/kernel").data<float>()[0], want["c2_kernel_first"].get<double>());
  EXPECT_FLOAT_EQ(m.weight("c2/kernel").data<float>()[0],
                  want["c2_q_first"].get<int>() * 0.0025f + -0.3f);
  // float16 bias widened exactly; float32 bias as stored.
  for (int i = 0; i < 12; ++i) EXPECT_EQ(m.weight("c2/bias").data<float>()[i], want["c2_bias"][i].get<double>());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m.weight("c1/bias").data<float>()[i], float(want["c1_bias"][i].get<double>()));
}

TEST(Tfjs, MalformedModelJsonNamesTheField) {
  const json good = json::parse(slurp(kTiny + "/model.json"));
  EXPECT_EQ(error_of(good.dump()), "");
  EXPECT_NE(error_of("{not json").find("bad/model.json: (document): not a JSON object"), std::string::npos);

  json j = good;
  j.erase("weightsManifest");
  EXPECT_NE(error_of(j.dump()).find("weightsManifest"), std::string::npos);

  j = good;
  j["format"] = "graph-model";
  EXPECT_NE(error_of(j.dump()).find("format"), std::string::npos);

  j = good;
  j["weightsManifest"][0]["weights"][0]["shape"] = {3, 3, 3, 9};  // more bytes than the shard has
  EXPECT_NE(error_of(j.dump()).find("but the shards hold"), std::string::npos);

  j = good;
  j["weightsManifest"][0]["weights"][0]["shape"] = {3, 3, 3, 7};  // fewer: bytes left over
  EXPECT_NE(error_of(j.dump()).find("but the weights use"), std::string::npos);

  j = good;
  j["weightsManifest"][0]["weights"][2]["quantization"]["dtype"] = "int4";
  EXPECT_NE(error_of(j.dump()).find("unsupported quantization 'int4'"), std::string::npos);

  j = good;
  j["weightsManifest"][0]["weights"][2]["quantization"].erase("scale");
  EXPECT_NE(error_of(j.dump()).find("quantization.scale: missing"), std::string::npos);

  j = good;
  j["weightsManifest"][0]["weights"][1]["dtype"] = "complex64";
  EXPECT_NE(error_of(j.dump()).find("complex64"), std::string::npos);

  j = good;
  j["weightsManifest"][0]["paths"][0] = "../../etc/passwd";
  EXPECT_NE(error_of(j.dump()).find("not a file next to model.json"), std::string::npos);

  j = good;
  j["weightsManifest"][0]["paths"][0] = "missing.bin";
  EXPECT_NE(error_of(j.dump()).find("cannot open"), std::string::npos);

  j = good;
  j["modelTopology"]["model_config"]["config"]["layers"][3]["inbound_nodes"][0][0][0] = "ghost";
  EXPECT_NE(error_of(j.dump()).find("unknown layer 'ghost'"), std::string::npos);

  j = good;
  j["modelTopology"]["model_config"]["config"]["layers"][3]["inbound_nodes"][0][0] = "cat";
  EXPECT_NE(error_of(j.dump()).find("inbound_nodes"), std::string::npos);

  j = good;
  j["modelTopology"]["model_config"]["config"]["layers"][1].erase("class_name");
  EXPECT_NE(error_of(j.dump()).find("layers[1].class_name: missing"), std::string::npos);
}

TEST(Tfjs, TruncatedShardIsAnError) {
  const fs::path dir = fs::temp_directory_path() / ("xdna_tfjs_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string shard = slurp(kTiny + "/group1-shard1of1.bin");
  std::ofstream(dir / "group1-shard1of1.bin", std::ios::binary) << shard.substr(0, shard.size() - 3);
  const std::string err = error_of(slurp(kTiny + "/model.json"), dir.string());
  fs::remove_all(dir);
  EXPECT_NE(err.find("weight 'c2/bias'"), std::string::npos) << err;
}

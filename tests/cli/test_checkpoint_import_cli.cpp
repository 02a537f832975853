// `npu checkpoint import` (CTranslate2 Whisper -> model directory) and `npu checkpoint info` on a
// model.bin, end to end on the tiny fixture (tests/fixtures/ct2, scripts/make_ct2_fixtures.py).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "weights/baked.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kCt2 = std::string(XDNA_FIXTURE_DIR) + "/ct2/whisper_f16";

using Result = xdna::test::ShellResult;  // out: stdout and stderr together

Result npu(const std::string& args) { return xdna::test::run_shell("'" XDNA_NPU_BINARY "' " + args + " 2>&1"); }

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("xdna_ct2_cli_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(CheckpointImportCli, WritesBakedConfigAndTokenizer) {
  TempDir tmp;
  const fs::path out = tmp.path / "model";
  const Result r = npu("checkpoint import '" + kCt2 + "' --out '" + out.string() +
                       "' --precision bf16");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("WhisperSpec"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(out / "tokenizer.json"));
  std::ifstream in(out / "config.json");
  EXPECT_EQ(json::parse(in)["encoder_layers"], 2);
  xdna::BakedModel baked((out / "model.baked").string());
  EXPECT_EQ(baked.get("model.encoder.layers.0.fc1.weight").dtype(), xdna::DType::BF16);
  EXPECT_EQ(baked.get("model.encoder.layers.0.fc1.bias").dtype(), xdna::DType::F32);
}

TEST(CheckpointImportCli, InfoReadsModelBinAndErrorsAreClear) {
  const Result info = npu("checkpoint info '" + kCt2 + "/model.bin'");
  ASSERT_EQ(info.rc, 0) << info.out;
  EXPECT_NE(info.out.find("encoder/layer_1/self_attention/linear_0/weight"), std::string::npos);
  EXPECT_NE(info.out.find("ctranslate2"), std::string::npos);

  TempDir tmp;
  const Result bad = npu("checkpoint import '" + tmp.path.string() + "' --out '" +
                         (tmp.path / "o").string() + "'");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("no model.bin"), std::string::npos) << bad.out;
}

}  // namespace

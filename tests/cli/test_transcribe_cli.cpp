// `npu transcribe` end to end: model resolution and its errors (no model needed), and, with
// whisper-tiny.en in the default store and Debian's pocketsphinx-testdata installed, a LibriVox
// clip in several formats, --output-dir, and a missing file among good ones.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "models/model_store.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kRealModel = "whisper-tiny.en";
const fs::path kClip = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0930.wav";
constexpr const char* kClipText = "he might even have been made amiable himself";

using xdna::Manifest;

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string normalise(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '\'') out += static_cast<char>(std::tolower(c));
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

class TranscribeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xdna-transcribe-cli-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(store());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path store() const { return dir_ / "models"; }

  void add_manifest(const std::string& name, const std::string& family) const {
    fs::create_directories(store() / name);
    Manifest m;
    m.name = name;
    m.family = family;
    m.format = "safetensors";
    m.precision = "f32";
    std::ofstream(store() / name / "manifest.json") << xdna::manifest_to_json(m).dump();
  }
  // The real model linked into this test's store; false when it has not been pulled.
  bool link_real_model() const {
    const fs::path real = fs::path(xdna::default_store_dir()) / kRealModel;
    if (!fs::exists(real / "manifest.json") || !fs::exists(kClip)) return false;
    fs::create_directory_symlink(real, store() / kRealModel);
    return true;
  }
  Result npu(const std::string& args) const {
    const fs::path err = dir_ / "stderr.txt";
    const std::string cmd = "'" XDNA_NPU_BINARY "' transcribe --store '" + store().string() + "' " + args + " 2>'" +
                            err.string() + "'";
    const xdna::test::ShellResult run = xdna::test::run_shell(cmd);
    return {run.rc, run.out, slurp(err)};
  }
  fs::path dir_;
};

TEST_F(TranscribeCli, NoSpeechModelListsWhatCanBePulled) {
  const Result r = npu("clip.wav");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("speech models in the store: none"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(kRealModel), std::string::npos) << r.err;  // pullable
}

TEST_F(TranscribeCli, UnknownAndWrongModels) {
  add_manifest("some-llm", "llama");
  add_manifest("my-whisper", "whisper");
  Result r = npu("--model no-such-model clip.wav");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("'no-such-model'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("my-whisper"), std::string::npos) << r.err;  // what is available
  r = npu("--model some-llm clip.wav");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("not a speech model"), std::string::npos) << r.err;
}

TEST_F(TranscribeCli, BadOptionsAreRefused) {
  EXPECT_NE(npu("--format tsv clip.wav").rc, 0);
  EXPECT_NE(npu("--task dance clip.wav").rc, 0);
  EXPECT_NE(npu("--temperature 2 clip.wav").rc, 0);
  EXPECT_NE(npu("").rc, 0);  // no FILE
}

TEST_F(TranscribeCli, TranscribesTheClip) {
  if (!link_real_model()) GTEST_SKIP() << kRealModel << " not pulled or " << kClip << " absent";
  Result r = npu("--model " + std::string(kRealModel) + " '" + kClip.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(normalise(r.out), kClipText) << r.out;
  EXPECT_EQ(r.out.back(), '\n');

  r = npu("--format verbose_json --beam-size 1 '" + kClip.string() + "'");  // default model: tiny.en
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["language"], "english");
  EXPECT_EQ(normalise(j["text"]), kClipText);
  ASSERT_FALSE(j["segments"].empty());

  const fs::path out = dir_ / "subs";
  r = npu("--format srt --output-dir '" + out.string() + "' '" + kClip.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const std::string srt = slurp(out / (kClip.stem().string() + ".srt"));
  EXPECT_EQ(srt.rfind("1\n00:00:00,000 --> ", 0), 0u) << srt;
}

TEST_F(TranscribeCli, OneBadFileDoesNotStopTheOthers) {
  if (!link_real_model()) GTEST_SKIP() << kRealModel << " not pulled or " << kClip << " absent";
  std::ofstream(dir_ / "notes.txt") << "not audio";
  const Result r = npu("--format json '" + (dir_ / "missing.wav").string() + "' '" + (dir_ / "notes.txt").string() +
                       "' '" + kClip.string() + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("missing.wav"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("notes.txt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 of 3"), std::string::npos) << r.err;
  const json j = json::parse(r.out);  // one line: the good file
  EXPECT_EQ(j["file"], kClip.string());
  EXPECT_EQ(normalise(j["text"]), kClipText);
}

}  // namespace

// `npu model import` and `npu transcribe` with a conformer model: NeMo 3.0's tiny random-weight
// Parakeet CTC archive imported into a temporary store, then transcribed by store name; the text
// is what NeMo itself gives for the clip (tests/fixtures/conformer/e2e/reference.json).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace fs = std::filesystem;
using xdna::test::run_shell;

namespace {

const std::string kNpu = XDNA_NPU_BINARY;
const std::string kFixtures = XDNA_FIXTURE_DIR;

struct TempStore {
  fs::path path;
  TempStore() {
    char tmpl[] = "/tmp/xdna-cli-conformer-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempStore() { fs::remove_all(path); }
};

TEST(CliConformer, ImportThenTranscribeByName) {
  TempStore store;
  const std::string s = " --store " + store.path.string();
  const std::string archive = kFixtures + "/conformer/archives/parakeet_tdt_bpe.nemo";
  auto r = run_shell(kNpu + " model import " + archive + " --name tiny-tdt" + s + " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("imported tiny-tdt (parakeet nemo, tdt head"), std::string::npos) << r.out;

  r = run_shell(kNpu + " model ls --no-server" + s + " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("tiny-tdt"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parakeet"), std::string::npos) << r.out;

  std::ifstream f(kFixtures + "/conformer/e2e/reference.json");
  const std::string want =
      nlohmann::json::parse(f)["nemo 3.0.0"]["parakeet_tdt_bpe.nemo:speech16k.wav"]["text"].get<std::string>();
  r = run_shell(kNpu + " transcribe --no-server --model tiny-tdt" + s + " " + kFixtures + "/audio/speech16k.wav");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, want + "\n");

  // Whisper-only options are refused for a conformer, naming the option.
  r = run_shell(kNpu + " transcribe --no-server --model tiny-tdt --language de" + s + " " + kFixtures +
                "/audio/speech16k.wav 2>&1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("language 'de'"), std::string::npos) << r.out;
}

TEST(CliConformer, ImportRefusesWhatItCannotLoad) {
  TempStore store;
  const std::string s = " --store " + store.path.string();
  auto r = run_shell(kNpu + " model import " + kFixtures + "/audio/speech16k.wav --name x" + s + " 2>&1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("is not a model import takes"), std::string::npos) << r.out;
  // A truncated archive: the loader's error, and nothing lands in the store.
  const fs::path bad = store.path / "bad.nemo";
  {
    std::ifstream in(kFixtures + "/conformer/archives/parakeet_ctc_bpe.nemo", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  r = run_shell(kNpu + " model import " + bad.string() + " --name broken" + s + " 2>&1");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_FALSE(fs::exists(store.path / "broken"));
  r = run_shell(kNpu + " model import " + kFixtures + "/conformer/archives/parakeet_ctc_bpe.nemo --name ../up" + s +
                " 2>&1");
  EXPECT_NE(r.rc, 0) << r.out;
}

}  // namespace

// /v1/audio/translations and /v1/audio/transcriptions with the multilingual whisper-base from the
// default store on the German espeak-ng clip of tests/fixtures/transcribe/multilingual/ (made by
// scripts/make_multilingual_fixtures.py): the server in-process on a free loopback port, queried
// with httplib's multipart client. Skipped when whisper-base is not in the store (and under ASan).
#include <gtest/gtest.h>
#include <httplib.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "../encoder_test_util.h"
#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

constexpr const char* kModel = "whisper-base";
const fs::path kClip = fs::path(XDNA_FIXTURE_DIR) / "transcribe/multilingual/de.opus";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Lower-case words; anything but ASCII letters, digits, the apostrophe and non-ASCII bytes splits.
std::set<std::string> words(const std::string& text) {
  std::string s;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    s += (std::isalnum(u) || c == '\'' || u >= 0x80) ? static_cast<char>(std::tolower(u)) : ' ';
  }
  std::istringstream in(s);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

class AudioTranslationsApi : public test::ServerSuite<AudioTranslationsApi> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-audio-tr-api");
    const fs::path store = dir_ / "models";
    fs::create_directories(store);
    const fs::path real = fs::path(default_store_dir()) / kModel;
    if (fs::exists(real / "manifest.json")) fs::create_directory_symlink(real, store / kModel);
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    server_ = std::make_unique<test::RunningServer>(opts);
  }
  void SetUp() override {
    if (XDNA_UNDER_ASAN) GTEST_SKIP() << "skipped under AddressSanitizer (74M-parameter model)";
    if (!fs::exists(dir_ / "models" / kModel))
      GTEST_SKIP() << kModel << " not in " << default_store_dir() << " (npu model pull whisper-base)";
    ServerSuite::SetUp();
    client_->set_read_timeout(300, 0);
  }
  json post(const std::string& path, const std::vector<std::pair<std::string, std::string>>& fields) {
    httplib::MultipartFormDataItems items = {{"file", read_file(kClip), "de.opus", "audio/ogg"},
                                             {"model", kModel, "", ""}};
    for (const auto& [k, v] : fields) items.push_back({k, v, "", ""});
    const auto r = client_->Post(path.c_str(), items);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }

};

// faster-whisper 1.2.1 (int8 and f32) translates the clip as "Today it seems like the sun, and we
// are going to ... the park. In the evening we are going to take a ...".
TEST_F(AudioTranslationsApi, GermanIntoEnglish) {
  const json j = post("/v1/audio/translations", {{"response_format", "verbose_json"}});
  std::printf("translation: %s\n", j.dump().c_str());
  EXPECT_EQ(j["task"], "translate");
  EXPECT_EQ(j["language"], "german");
  const std::set<std::string> w = words(j["text"]);
  for (const char* want : {"today", "sun", "park", "evening"}) EXPECT_TRUE(w.count(want)) << want << ": " << j["text"];
  for (const char* german : {"heute", "sonne", "abend"}) EXPECT_FALSE(w.count(german)) << german << ": " << j["text"];
}

TEST_F(AudioTranslationsApi, GermanTranscriptionReportsItsLanguage) {
  const json j = post("/v1/audio/transcriptions", {{"response_format", "verbose_json"}});
  std::printf("transcription: %s\n", j.dump().c_str());
  EXPECT_EQ(j["task"], "transcribe");
  EXPECT_EQ(j["language"], "german");
  EXPECT_NEAR(j["duration"].get<double>(), 7.47, 0.05);
  ASSERT_GE(j["segments"].size(), 1u);
  const std::set<std::string> w = words(j["text"]);
  for (const char* want : {"heute", "scheint", "sonne", "park", "abend", "zusammen"})
    EXPECT_TRUE(w.count(want)) << want << ": " << j["text"];
}

}  // namespace

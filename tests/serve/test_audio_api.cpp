// POST /v1/audio/transcriptions and /v1/audio/translations end to end: the server in-process on a
// free loopback port with a temp store, queried with httplib's multipart client. The bad-input
// cases need no model and always run; the transcription cases use whisper-tiny.en from the
// default store and a LibriVox clip of Debian's pocketsphinx-testdata, and skip without them.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "models/model_store.h"
#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

constexpr const char* kRealModel = "whisper-tiny.en";
const fs::path kClip = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0930.wav";
constexpr const char* kClipText = "he might even have been made amiable himself";

void add_manifest(const fs::path& store, const std::string& name, const std::string& family) {
  test::add_store_model(store, name, family, "ctranslate2", "f16");
}

// A valid 16-bit PCM mono WAV of `seconds` of a tone at 16 kHz.
std::string tone_wav(double seconds) { return test::tone_wav(static_cast<uint32_t>(seconds * 16000)); }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Lower case, punctuation and hyphens as spaces, single spaces: "Ill-disposed." -> "ill disposed".
std::string normalise(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool word = std::isalnum(static_cast<unsigned char>(c)) || c == '\'';
    if (word) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

class AudioApi : public test::ServerSuite<AudioApi> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-audio-api");
    const fs::path store = dir_ / "models";
    add_manifest(store, "fake-whisper", "whisper");  // listed, never loaded by these tests
    add_manifest(store, "some-bert", "bert");
    // A conformer as `npu model import` stores it: NeMo 3.0's tiny random-weight Parakeet CTC.
    ModelStore(store.string())
        .import_local("tiny-parakeet", "parakeet", "nemo",
                      std::string(XDNA_FIXTURE_DIR) + "/conformer/archives/parakeet_ctc_bpe.nemo");
    const fs::path real = fs::path(default_store_dir()) / kRealModel;
    if (fs::exists(real / "manifest.json")) fs::create_directory_symlink(real, store / kRealModel);
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    opts.max_audio_bytes = 256 << 10;  // small, so the 413 cases stay cheap
    server_ = std::make_unique<test::RunningServer>(opts);
  }
  bool have_real_model() const { return fs::exists(dir_ / "models" / kRealModel) && fs::exists(kClip); }

  httplib::Result post(const std::string& path, const httplib::MultipartFormDataItems& items) {
    return client_->Post(path.c_str(), items);
  }
  // file + model + extra fields.
  httplib::Result transcribe(const std::string& audio, const std::string& model,
                             const std::vector<std::pair<std::string, std::string>>& fields = {},
                             const std::string& path = "/v1/audio/transcriptions") {
    httplib::MultipartFormDataItems items = {{"file", audio, "clip.wav", "audio/wav"}, {"model", model, "", ""}};
    for (const auto& [k, v] : fields) items.push_back({k, v, "", ""});
    return post(path, items);
  }
  // A 4xx response's error object, checked for the OpenAI shape.
  json error(const httplib::Result& r, int status, const std::string& param) {
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    const json j = json::parse(r->body);
    EXPECT_TRUE(j["error"]["message"].is_string()) << r->body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
    if (param.empty()) EXPECT_TRUE(j["error"]["param"].is_null()) << r->body;
    else EXPECT_EQ(j["error"]["param"], param) << r->body;
    return j["error"];
  }
};

TEST_F(AudioApi, SpeechModelsAreListed) {
  const auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  bool found = false;
  const json models = json::parse(r->body);
  for (const json& m : models["data"]) found = found || m["id"] == "fake-whisper";
  EXPECT_TRUE(found) << r->body;
}

// A conformer from the store through the same endpoint: the text NeMo 3.0 gives for the same clip
// (tests/fixtures/conformer/e2e), segments in verbose_json, Whisper-only fields refused.
TEST_F(AudioApi, ConformerModel) {
  const std::string clip = read_file(std::string(XDNA_FIXTURE_DIR) + "/audio/speech16k.wav");
  std::ifstream f(std::string(XDNA_FIXTURE_DIR) + "/conformer/e2e/reference.json");
  const json ref = json::parse(f)["nemo 3.0.0"]["parakeet_ctc_bpe.nemo:speech16k.wav"];
  httplib::Result r = transcribe(clip, "tiny-parakeet");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["text"], ref["text"]);
  r = transcribe(clip, "tiny-parakeet", {{"response_format", "verbose_json"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json v = json::parse(r->body);
  EXPECT_NEAR(v["duration"].get<double>(), 2.9136, 1e-3);
  ASSERT_TRUE(v["segments"].is_array());
  EXPECT_FALSE(v["segments"].empty());
  error(transcribe(clip, "tiny-parakeet", {{"language", "de"}}), 400, "");
  error(transcribe(clip, "tiny-parakeet", {}, "/v1/audio/translations"), 400, "");
  const httplib::Result models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_NE(models->body.find("tiny-parakeet"), std::string::npos);
}

TEST_F(AudioApi, NotMultipart) {
  const auto r = client_->Post("/v1/audio/transcriptions", R"({"model": "x"})", "application/json");
  EXPECT_NE(error(r, 400, "")["message"].get<std::string>().find("multipart"), std::string::npos);
}

TEST_F(AudioApi, MissingFileAndModel) {
  EXPECT_EQ(error(post("/v1/audio/transcriptions", {{"model", kRealModel, "", ""}}), 400, "file")["code"],
            "missing_required_parameter");
  EXPECT_EQ(error(post("/v1/audio/transcriptions", {{"file", tone_wav(0.5), "a.wav", "audio/wav"}}), 400,
                  "model")["code"],
            "missing_required_parameter");
}

TEST_F(AudioApi, EmptyAndNonAudioFiles) {
  EXPECT_EQ(error(transcribe("", "fake-whisper"), 400, "file")["code"], "invalid_file");
  const json e = error(transcribe("this is plain text, not audio at all", "fake-whisper"), 400, "file");
  EXPECT_EQ(e["code"], "invalid_file");
  EXPECT_NE(e["message"].get<std::string>().find("clip.wav"), std::string::npos) << e;  // names the upload
  std::string truncated = tone_wav(1.0).substr(0, 30);  // a WAV header cut short
  EXPECT_EQ(error(transcribe(truncated, "fake-whisper"), 400, "file")["code"], "invalid_file");
}

TEST_F(AudioApi, BadFields) {
  const std::string wav = tone_wav(0.5);
  const json f = error(transcribe(wav, "fake-whisper", {{"response_format", "tsv"}}), 400, "response_format");
  EXPECT_NE(f["message"].get<std::string>().find("verbose_json"), std::string::npos) << f;
  for (const char* t : {"hot", "-0.1", "1.5", "nan", ""})
    error(transcribe(wav, "fake-whisper", {{"temperature", t}}), 400, "temperature");
  error(transcribe(wav, "fake-whisper", {{"timestamp_granularities[]", "word"}}), 400, "timestamp_granularities");
  // Word timestamps come in verbose_json only (OpenAI's rule); unknown granularities are refused.
  for (const char* format : {"json", "text", "srt", "vtt"}) {
    const json w = error(transcribe(wav, "fake-whisper", {{"response_format", format}, {"timestamp_granularities[]", "word"}}),
                         400, "timestamp_granularities");
    EXPECT_NE(w["message"].get<std::string>().find("verbose_json"), std::string::npos) << w;
  }
  error(transcribe(wav, "fake-whisper", {{"response_format", "verbose_json"}, {"timestamp_granularities[]", "char"}}), 400,
        "timestamp_granularities");
  error(transcribe(wav, "fake-whisper", {{"language", "en"}}, "/v1/audio/translations"), 400, "language");
}

TEST_F(AudioApi, UnknownAndWrongModels) {
  const std::string wav = tone_wav(0.5);
  for (const char* m : {"no-such-model", "../etc/passwd", "a/b"})
    EXPECT_EQ(error(transcribe(wav, m), 404, "model")["code"], "model_not_found") << m;
  EXPECT_EQ(error(transcribe(wav, "some-bert"), 400, "model")["code"], "model_not_supported");
}

TEST_F(AudioApi, UploadOverTheLimit) {
  // Over the audio limit: the route's 413 names the file.
  const json e = error(transcribe(std::string(300 << 10, 'x'), "fake-whisper"), 413, "file");
  EXPECT_EQ(e["code"], "request_too_large");
  // Over the server's body limit (audio limit + 1 MiB): refused before the body is read.
  const auto r = transcribe(std::string(1400 << 10, 'x'), "fake-whisper");
  if (r) {  // httplib may close the connection before reading the body: also a refusal
    EXPECT_EQ(r->status, 413) << r->body;
  }
  const auto h = client_->Get("/health");  // still serving
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST_F(AudioApi, TranscribesAllFormats) {
  if (!have_real_model()) GTEST_SKIP() << kRealModel << " not in " << default_store_dir() << " or " << kClip << " absent";
  const std::string clip = read_file(kClip);
  {
    const auto r = transcribe(clip, kRealModel);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(r->get_header_value_count("X-Npu-Backend"), 1u);  // from the run's report
    EXPECT_EQ(r->get_header_value("X-Npu-Backend"), "host");
    const json j = json::parse(r->body);
    EXPECT_EQ(normalise(j["text"]), kClipText) << j;
  }
  {
    const auto r = transcribe(clip, kRealModel, {{"response_format", "verbose_json"}, {"timestamp_granularities[]", "segment"},
                                                 {"temperature", "0"}, {"language", "en"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["task"], "transcribe");
    EXPECT_EQ(j["language"], "english");
    EXPECT_NEAR(j["duration"].get<double>(), 3.29, 0.02);
    ASSERT_GE(j["segments"].size(), 1u) << j;
    const json& s = j["segments"][0];
    EXPECT_EQ(s["id"], 0);
    EXPECT_GE(s["start"].get<double>(), 0.0);
    EXPECT_GT(s["end"].get<double>(), s["start"].get<double>());
    EXPECT_LE(j["segments"].back()["end"].get<double>(), 3.8);
    EXPECT_FALSE(s["tokens"].empty());
    EXPECT_EQ(normalise(j["text"]), kClipText);
  }
  for (const auto& [format, prefix] : std::vector<std::pair<std::string, std::string>>{
           {"srt", "1\n00:00:00,000 --> 00:00:0"}, {"text", ""}}) {  // vtt: test_transcript_format
    const auto r = transcribe(clip, kRealModel, {{"response_format", format}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; charset=utf-8");
    EXPECT_EQ(r->body.compare(0, prefix.size(), prefix), 0) << format << ": " << r->body;
    if (format == "text") EXPECT_EQ(normalise(r->body), kClipText) << r->body;
    else EXPECT_NE(normalise(r->body).find("made amiable himself"), std::string::npos) << format << ": " << r->body;
  }
}

TEST_F(AudioApi, WordTimestamps) {
  if (!have_real_model()) GTEST_SKIP() << kRealModel << " not in " << default_store_dir() << " or " << kClip << " absent";
  const std::string clip = read_file(kClip);
  const auto check_words = [](const json& words, const json& text) {
    ASSERT_TRUE(words.is_array());
    ASSERT_GE(words.size(), 5u) << words;
    std::string joined;
    double last_start = -1;
    for (const json& w : words) {
      joined += w["word"].get<std::string>() + " ";
      EXPECT_EQ(w["word"].get<std::string>().front() == ' ', false) << w;  // OpenAI's words are stripped
      EXPECT_GE(w["start"].get<double>(), last_start) << w;
      EXPECT_GE(w["end"].get<double>(), w["start"].get<double>()) << w;
      EXPECT_LE(w["end"].get<double>(), 3.8) << w;
      EXPECT_GT(w["probability"].get<double>(), 0.0) << w;
      last_start = w["start"].get<double>();
    }
    EXPECT_EQ(normalise(joined), normalise(text.get<std::string>()));
  };
  {  // word only: top-level words, no segments (as OpenAI)
    const auto r = transcribe(clip, kRealModel, {{"response_format", "verbose_json"}, {"timestamp_granularities[]", "word"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_FALSE(j.contains("segments")) << j;
    EXPECT_EQ(normalise(j["text"]), kClipText) << j;
    check_words(j["words"], j["text"]);
  }
  {  // both: words and segments, each segment with its own words
    const auto r = transcribe(clip, kRealModel, {{"response_format", "verbose_json"}, {"timestamp_granularities[]", "word"},
                                                 {"timestamp_granularities[]", "segment"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    check_words(j["words"], j["text"]);
    ASSERT_GE(j["segments"].size(), 1u) << j;
    size_t n = 0;
    for (const json& s : j["segments"]) {
      ASSERT_TRUE(s.contains("words")) << s;
      n += s["words"].size();
    }
    EXPECT_EQ(n, j["words"].size());
  }
}

TEST_F(AudioApi, EnglishOnlyModelRefusesOtherLanguagesAndTranslation) {
  if (!have_real_model()) GTEST_SKIP() << kRealModel << " not in " << default_store_dir();
  const std::string wav = tone_wav(0.5);
  error(transcribe(wav, kRealModel, {{"language", "de"}}), 400, "");
  error(transcribe(wav, kRealModel, {}, "/v1/audio/translations"), 400, "");
  const auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

}  // namespace

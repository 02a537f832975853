// The multilingual Whisper base from the model store on espeak-ng clips in German, French,
// Spanish and Italian (scripts/make_multilingual_fixtures.py -> tests/fixtures/transcribe/
// multilingual/), against faster-whisper 1.2.1 at the same precision: language detection,
// transcription with the language detected, translation into English, an explicit language, an
// unknown language. Skipped when whisper-base is not in the store or its precision has no fixture.
//
// Text rule: lower-case ASCII, keep a-z, 0-9, the apostrophe and every non-ASCII byte (UTF-8
// letters such as "é"), anything else becomes a space, spaces collapse. Word error rate =
// word-level edit distance / reference words, faster-whisper's text as the reference.
// Bounds: transcription <= 20% per language (the engine's int8 differs from CTranslate2's int8 in
// scales and rounding, so a word or two may differ on these synthetic voices); translation (German
// and Spanish): all ASCII, at least two common English function words, at least half of
// faster-whisper's content words (4+ letters, not a function word) present, and over 60% word
// error against the source-language text (so an untranslated transcript fails).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../encoder_test_util.h"
#include "models/model_store.h"
#include "pipeline/audio.h"
#include "pipeline/transcribe.h"

namespace xdna {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/transcribe/multilingual/";
const std::vector<std::string> kLanguages = {"de", "fr", "es", "it"};

std::string model_dir() { return default_store_dir() + "/whisper-base"; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

// The fixture for the store's precision, or null when the model or the fixture is missing.
const nlohmann::json& reference() {
  static const nlohmann::json ref = [] {
    if (!fs::exists(model_dir() + "/manifest.json")) return nlohmann::json();
    const std::string precision = read_json(model_dir() + "/manifest.json").value("precision", "");
    const nlohmann::json all = read_json(kDir + "whisper-base.json");
    return all["precisions"].contains(precision) ? all["precisions"][precision] : nlohmann::json();
  }();
  return ref;
}

#define SKIP_WITHOUT_MODEL()                                                                  \
  if (XDNA_UNDER_ASAN) GTEST_SKIP() << "skipped under AddressSanitizer (74M-parameter model)"; \
  if (reference().is_null())                                                                  \
  GTEST_SKIP() << "no whisper-base in " << default_store_dir()                                \
               << " at a precision with a fixture (npu model pull whisper-base: int8)"

std::vector<std::string> words(const std::string& text) {
  std::string s;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    const char l = static_cast<char>(std::tolower(u));
    const bool keep = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '\'' || u >= 0x80;
    s += keep ? l : ' ';
  }
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

double word_error_rate(const std::string& reference, const std::string& hypothesis) {
  const std::vector<std::string> r = words(reference), h = words(hypothesis);
  std::vector<size_t> prev(h.size() + 1), cur(h.size() + 1);
  for (size_t j = 0; j <= h.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= r.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= h.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] == h[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return r.empty() ? (h.empty() ? 0.0 : 1.0) : static_cast<double>(prev[h.size()]) / r.size();
}

const std::set<std::string> kEnglishFunctionWords = {
    "the", "a", "an", "and", "is", "are", "we", "it", "in", "of", "to", "on", "at", "with",
    "for", "she", "he", "they", "that", "this", "there", "going", "have", "like", "from", "near"};

// Fraction of the reference's content words (4+ letters, not function words) found in `text`.
double content_words_shared(const std::string& reference, const std::string& text) {
  const std::vector<std::string> have = words(text);
  int total = 0, found = 0;
  for (const std::string& w : words(reference)) {
    if (w.size() < 4 || kEnglishFunctionWords.count(w)) continue;
    ++total;
    found += std::find(have.begin(), have.end(), w) != have.end();
  }
  return total == 0 ? 1.0 : static_cast<double>(found) / total;
}

bool looks_english(const std::string& text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  int function_words = 0;
  for (const std::string& w : words(text)) function_words += kEnglishFunctionWords.count(w) > 0;
  return function_words >= 2;
}

TEST(TranscribeMultilingual, TextRules) {
  EXPECT_EQ(words("Le train, pour Paris-Nord!"), (std::vector<std::string>{"le", "train", "pour", "paris", "nord"}));
  EXPECT_EQ(words("près de la fenêtre."), (std::vector<std::string>{"près", "de", "la", "fenêtre"}));
  EXPECT_DOUBLE_EQ(word_error_rate("a b c d", "a x c"), 0.5);  // one substitution, one deletion
  EXPECT_DOUBLE_EQ(word_error_rate("a b", "a b"), 0.0);
  EXPECT_DOUBLE_EQ(content_words_shared("Today the sun shines in the park.", "the sun in a park"), 1.0 / 3);
  EXPECT_TRUE(looks_english("We go to the park."));
  EXPECT_FALSE(looks_english("Wir gehen in den Park."));
  EXPECT_FALSE(looks_english("près de la fenêtre and the"));
}

const Transcriber& transcriber() {
  static const Transcriber t = Transcriber::load(model_dir());
  return t;
}

const std::vector<float>& samples(const std::string& lang) {
  static std::map<std::string, std::vector<float>> cache;
  auto it = cache.find(lang);
  if (it == cache.end()) it = cache.emplace(lang, load_audio(kDir + lang + ".opus")).first;
  return it->second;
}

// One run per clip and task, shared by the tests (the encoder is the slow part).
const Transcript& run(const std::string& lang, const std::string& task) {
  static std::map<std::string, Transcript> cache;
  const std::string key = lang + "/" + task;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  TranscribeOptions o;
  o.task = task;
  if (task == "translate") o.language = lang;  // detection is checked on the transcribe runs
  const auto t0 = std::chrono::steady_clock::now();
  Transcript t = transcriber().transcribe(samples(lang), o);
  std::printf("%s %s (%.1f s audio, %.1f s): [%s %.3f] %s\n", lang.c_str(), task.c_str(), t.duration,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              t.language.c_str(), t.language_probability, t.text.c_str());
  return cache.emplace(key, std::move(t)).first->second;
}

// detect_language itself on the German clip; the transcribe runs below detect every clip's
// language through it (the encoder dominates the test's time, so each clip is detected once).
TEST(TranscribeMultilingual, DetectLanguageAgreesWithFasterWhisper) {
  SKIP_WITHOUT_MODEL();
  const nlohmann::json& want = reference()["de"];
  const Tensor mel = log_mel_spectrogram(samples("de"), 80, kWhisperChunkSamples);
  const auto probs = transcriber().detect_language(mel.slice(1, 0, kWhisperChunkFrames).contiguous());
  ASSERT_GE(probs.size(), 99u);  // whisper-base knows 99 languages
  std::printf("de: detected %s %.4f, then %s %.4f (faster-whisper %s %.4f)\n", probs[0].first.c_str(),
              probs[0].second, probs[1].first.c_str(), probs[1].second,
              want["language"].get<std::string>().c_str(), want["language_probability"].get<double>());
  EXPECT_EQ(probs[0].first, want["language"].get<std::string>());
  EXPECT_NEAR(probs[0].second, want["language_probability"].get<double>(), 0.15);
  double sum = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    sum += probs[i].second;
    if (i > 0) {
      EXPECT_LE(probs[i].second, probs[i - 1].second);
    }
  }
  EXPECT_NEAR(sum, 1.0, 1e-3);
}

TEST(TranscribeMultilingual, TranscriptionMatchesFasterWhisper) {
  SKIP_WITHOUT_MODEL();
  for (const std::string& lang : kLanguages) {
    const nlohmann::json& want = reference()[lang];
    const Transcript& t = run(lang, "transcribe");
    EXPECT_EQ(t.language, want["language"].get<std::string>()) << "detected";
    EXPECT_EQ(t.language, lang);
    EXPECT_NEAR(t.language_probability, want["language_probability"].get<double>(), 0.15) << lang;
    EXPECT_NEAR(t.duration, want["duration"].get<double>(), 0.05) << lang;
    const double wer = word_error_rate(want["text"], t.text);
    std::printf("%s transcription WER vs faster-whisper: %.3f\n", lang.c_str(), wer);
    EXPECT_LE(wer, 0.20) << lang << "\n  engine: " << t.text << "\n  faster-whisper: " << want["text"];
  }
}

TEST(TranscribeMultilingual, TranslatesIntoEnglish) {
  SKIP_WITHOUT_MODEL();
  // Only where faster-whisper's int8 and f32 translations agree (German, Spanish): its French
  // ones are hallucinations ("... the red red red") and its Italian ones disagree with each other
  // (the model is at its edge there; the engine falls back to temperature 1.0 on Italian).
  for (const std::string lang : {"de", "es"}) {
    const nlohmann::json& want = reference()[lang];
    const Transcript& t = run(lang, "translate");
    EXPECT_EQ(t.language, lang);
    const double shared = content_words_shared(want["translation"], t.text);
    std::printf("%s translation: %.2f of faster-whisper's content words\n", lang.c_str(), shared);
    EXPECT_TRUE(looks_english(t.text)) << lang << ": " << t.text;
    EXPECT_GE(shared, 0.5) << lang << "\n  engine: " << t.text << "\n  faster-whisper: " << want["translation"];
    EXPECT_GT(word_error_rate(want["text"], t.text), 0.6) << "not translated: " << t.text;
  }
}

TEST(TranscribeMultilingual, ExplicitLanguageIsHonoured) {
  SKIP_WITHOUT_MODEL();
  // The translate runs above name their language: no detection, probability 1.
  EXPECT_EQ(run("de", "translate").language_probability, 1.0f);
  // German speech forced to Spanish (greedy at temperature 0 only, to keep it short): "es" reported, and the text is not
  // the German transcript the detected language gives.
  TranscribeOptions o;
  o.language = "ES";
  o.beam_size = 1;
  o.temperatures = {0.0f};  // no fallback ladder: the forced language scores badly by design
  const Transcript es = transcriber().transcribe(samples("de"), o);
  std::printf("de forced to es: %s\n", es.text.c_str());
  EXPECT_EQ(es.language, "es");
  EXPECT_EQ(es.language_probability, 1.0f);
  EXPECT_GT(word_error_rate(run("de", "transcribe").text, es.text), 0.3);
}

TEST(TranscribeMultilingual, UnknownLanguageIsRejected) {
  SKIP_WITHOUT_MODEL();
  TranscribeOptions o;
  for (const char* code : {"xx", "german", "d"}) {
    o.language = code;
    try {
      transcriber().transcribe(std::vector<float>(16000, 0.0f), o);
      ADD_FAILURE() << code << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("unknown language '") + code + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace xdna

// Word-level timestamps (pipeline/whisper_timing.h, WhisperModel::cross_attention_scores,
// TranscribeOptions::word_timestamps) against openai-whisper: fixtures written by
// scripts/make_word_timestamp_fixtures.py into tests/fixtures/word_timestamps/.
//
// Agreement rule for the real model (whisper-tiny.en from the store, skipped without it): greedy
// decoding at temperature 0 gives the same tokens as openai-whisper on the same weights, the same
// words, and word start/end within 0.02 s (one DTW frame) for at least 95% of the word times.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_store.h"
#include "models/whisper.h"
#include "pipeline/audio.h"
#include "pipeline/transcribe.h"
#include "pipeline/whisper_timing.h"

namespace xdna {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/word_timestamps/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

const nlohmann::json& units() {
  static const nlohmann::json j = read_json(kDir + "units.json");
  return j;
}

// ---- median filter and DTW ---------------------------------------------------------------------

TEST(WhisperTiming, MedianFilterHandChecked) {
  // Reflect padding: [1 5 2 8 3] -> [5 1 | 1 5 2 8 3 | 8 3] ... medians of 3: 5 2 5 3 8.
  EXPECT_EQ(whisper::median_filter({1, 5, 2, 8, 3}, 1, 5, 3), (std::vector<float>{5, 2, 5, 3, 8}));
  // Two rows filter independently.
  EXPECT_EQ(whisper::median_filter({1, 5, 2, 8, 3, 0, 0, 9, 0, 0}, 2, 5, 3),
            (std::vector<float>{5, 2, 5, 3, 8, 0, 0, 0, 0, 0}));
  // Rows no longer than width / 2 come back unchanged (upstream skips them).
  EXPECT_EQ(whisper::median_filter({4, 1}, 1, 2, 5), (std::vector<float>{4, 1}));
  EXPECT_THROW(whisper::median_filter({1, 2, 3}, 1, 3, 2), std::invalid_argument);
  EXPECT_THROW(whisper::median_filter({1, 2, 3}, 2, 3, 3), std::invalid_argument);
}

TEST(WhisperTiming, MedianFilterMatchesUpstream) {
  const auto& u = units();
  std::vector<float> x;
  for (const auto& row : u["median_input"])
    for (float v : row) x.push_back(v);
  const int64_t rows = static_cast<int64_t>(u["median_input"].size()), cols = static_cast<int64_t>(x.size()) / rows;
  const std::vector<float> got = whisper::median_filter(x, rows, cols, u["median_width"].get<int>());
  size_t i = 0;
  for (const auto& row : u["median_output"])
    for (float v : row) EXPECT_EQ(got[i++], v) << "element " << i - 1;
}

TEST(WhisperTiming, DtwHandChecked) {
  // cost [[0 1 1], [1 0 0]]: diagonal to (1, 1), then left along the cheap second row.
  const whisper::DtwPath p = whisper::dtw({0, 1, 1, 1, 0, 0}, 2, 3);
  EXPECT_EQ(p.text, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(p.time, (std::vector<int64_t>{0, 1, 2}));
  // A single column: straight down.
  const whisper::DtwPath q = whisper::dtw({3, 2, 1}, 3, 1);
  EXPECT_EQ(q.text, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(q.time, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_THROW(whisper::dtw({1, 2, 3}, 2, 2), std::invalid_argument);
  EXPECT_THROW(whisper::dtw({}, 0, 0), std::invalid_argument);
}

TEST(WhisperTiming, DtwMatchesUpstream) {
  const auto& u = units();
  std::vector<double> x;
  for (const auto& row : u["dtw_input"])
    for (double v : row) x.push_back(v);
  const int64_t rows = static_cast<int64_t>(u["dtw_input"].size()), cols = static_cast<int64_t>(x.size()) / rows;
  const whisper::DtwPath p = whisper::dtw(x, rows, cols);
  EXPECT_EQ(p.text, u["dtw_text"].get<std::vector<int64_t>>());
  EXPECT_EQ(p.time, u["dtw_time"].get<std::vector<int64_t>>());
}

// ---- word splitting and punctuation ------------------------------------------------------------

whisper::DecodeFn table_decoder(std::map<int32_t, std::string> table) {
  return [table](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += table.at(id);
    return s;
  };
}

TEST(WhisperTiming, SplitsWordsOnSpacesAndPunctuation) {
  const auto decode = table_decoder({{1, " Hello"}, {2, ","}, {3, " wor"}, {4, "ld"}, {5, "!"}, {9, "<|endoftext|>"}});
  std::vector<std::string> words;
  std::vector<std::vector<int32_t>> tokens;
  whisper::split_to_word_tokens({1, 2, 3, 4, 5, 9}, 9, "en", decode, words, tokens);
  EXPECT_EQ(words, (std::vector<std::string>{" Hello", ",", " world", "!", "<|endoftext|>"}));
  EXPECT_EQ(tokens, (std::vector<std::vector<int32_t>>{{1}, {2}, {3, 4}, {5}, {9}}));
}

TEST(WhisperTiming, SplitsCjkPerCharacterAcrossTokens) {
  // 你 = E4 BD A0 cut over two tokens; 好 whole.
  const auto decode = table_decoder({{1, "\xE4\xBD"}, {2, "\xA0"}, {3, "\xE5\xA5\xBD"}, {9, "<|endoftext|>"}});
  std::vector<std::string> words;
  std::vector<std::vector<int32_t>> tokens;
  whisper::split_to_word_tokens({1, 2, 3, 9}, 9, "zh", decode, words, tokens);
  EXPECT_EQ(words, (std::vector<std::string>{"\xE4\xBD\xA0", "\xE5\xA5\xBD", "<|endoftext|>"}));
  EXPECT_EQ(tokens, (std::vector<std::vector<int32_t>>{{1, 2}, {3}, {9}}));
}

TEST(WhisperTiming, LossyUtf8) {
  EXPECT_EQ(whisper::utf8_to_codepoints_lossy("a\xE4\xBD"), (std::u32string{U'a', U'\uFFFD'}));
  EXPECT_EQ(whisper::utf8_to_codepoints_lossy("\xA0x"), (std::u32string{U'\uFFFD', U'x'}));
  EXPECT_EQ(whisper::utf8_to_codepoints_lossy("\xE4\xBD\xA0"), (std::u32string{U'\u4F60'}));
}

std::vector<whisper::WordTiming> timings(const std::vector<std::string>& words) {
  std::vector<whisper::WordTiming> out;
  int32_t id = 1;
  for (const auto& w : words) out.push_back({w, {id++}, 0, 0, 1});
  return out;
}

TEST(WhisperTiming, MergesPunctuation) {
  TranscribeOptions o;
  auto a = timings({" \"", "Hi", ",", " there", "."});
  whisper::merge_punctuations(a, o.prepend_punctuations, o.append_punctuations);
  std::vector<std::string> words;
  for (const auto& w : a) words.push_back(w.word);
  EXPECT_EQ(words, (std::vector<std::string>{"", " \"Hi,", "", " there.", ""}));
  EXPECT_EQ(a[1].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(a[3].tokens, (std::vector<int32_t>{4, 5}));
}

TEST(WhisperTiming, SegmentTimesMoveOntoWords) {
  TranscribeOptions o;
  std::vector<TranscriptSegment> segs(1);
  segs[0].seek = 100;  // the window starts at 1.0 s
  segs[0].start = 1.0;
  segs[0].end = 2.0;
  segs[0].tokens = {1, 2, 50};  // 50: a timestamp (>= eot 9)
  auto a = timings({" a", " b"});
  a[0].start = 0.1, a[0].end = 0.2, a[1].start = 0.2, a[1].end = 0.42;
  double last_speech = 0.9;
  whisper::add_word_timestamps(segs, a, 9, o.prepend_punctuations, o.append_punctuations, last_speech);
  ASSERT_EQ(segs[0].words.size(), 2u);
  EXPECT_EQ(segs[0].words[0].word, " a");
  EXPECT_DOUBLE_EQ(segs[0].words[0].start, 1.1);
  EXPECT_DOUBLE_EQ(segs[0].words[1].end, 1.42);
  EXPECT_DOUBLE_EQ(segs[0].start, 1.1);  // moved onto the first word
  EXPECT_DOUBLE_EQ(segs[0].end, 1.42);   // and the last
  EXPECT_DOUBLE_EQ(last_speech, 1.42);
}

TEST(WhisperTiming, FormatsWords) {
  Transcript t;
  t.text = " Hi there.";
  t.language = "en";
  t.word_timestamps = true;
  t.segments.resize(1);
  t.segments[0].start = 0.5;
  t.segments[0].end = 1.25;
  t.segments[0].text = " Hi there.";
  t.segments[0].words = {{" Hi", 0.5, 0.75, 0.5f}, {" there.", 0.75, 1.25, 0.25f}};
  const auto verbose = nlohmann::json::parse(format_transcript(t, "verbose_json"));
  EXPECT_EQ(verbose["words"], nlohmann::json::parse(R"([{"word": "Hi", "start": 0.5, "end": 0.75, "probability": 0.5},
      {"word": "there.", "start": 0.75, "end": 1.25, "probability": 0.25}])"));
  EXPECT_EQ(verbose["segments"][0]["words"][1]["word"], " there.");  // openai-whisper's: space kept
  EXPECT_FALSE(nlohmann::json::parse(format_transcript(t, "verbose_json", "transcribe", false)).contains("segments"));
  EXPECT_EQ(nlohmann::json::parse(format_transcript(t, "json"))["words"].size(), 2u);
  t.word_timestamps = false;  // without: the formats are as before
  EXPECT_FALSE(nlohmann::json::parse(format_transcript(t, "verbose_json")).contains("words"));
  EXPECT_FALSE(nlohmann::json::parse(format_transcript(t, "verbose_json"))["segments"][0].contains("words"));
  EXPECT_EQ(format_transcript(t, "json"), "{\"text\":\"Hi there.\"}\n");
}

// ---- the model's cross-attention scores, against transformers ----------------------------------

TEST(WhisperTiming, CrossAttentionScoresMatchTransformers) {
  const std::string dir = std::string(XDNA_FIXTURE_DIR) + "/whisper/";
  const auto model = WhisperModel::load(dir + "tiny-random");
  const auto ref = open_weights(dir + "reference.safetensors");
  const WhisperSpec& s = model->spec();
  const Tensor features = model->encode(ref->get("mel"));
  const auto& u = units();
  const std::vector<int32_t> tokens = u["cross_tokens"].get<std::vector<int32_t>>();
  std::vector<std::pair<int64_t, int64_t>> heads;
  for (int64_t l = 0; l < s.decoder_layers; ++l)
    for (int64_t h = 0; h < s.decoder_heads; ++h) heads.emplace_back(l, h);
  Tensor logits;
  const Tensor scores = model->cross_attention_scores(features, tokens, heads, &logits);
  const int64_t T = static_cast<int64_t>(tokens.size()), S = s.n_audio_ctx;
  ASSERT_EQ(scores.shape(), (Shape{static_cast<int64_t>(heads.size()), T, S}));
  ASSERT_EQ(logits.shape(), (Shape{T, s.vocab}));
  double worst = 0;
  for (size_t i = 0; i < heads.size(); ++i)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = scores.data<float>() + (static_cast<int64_t>(i) * T + t) * S;
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < S; ++j) m = std::max(m, static_cast<double>(row[j]));
      for (int64_t j = 0; j < S; ++j) sum += std::exp(row[j] - m);
      const auto& want = u["cross_attentions"][heads[i].first][heads[i].second][t];
      for (int64_t j = 0; j < S; ++j)
        worst = std::max(worst, std::abs(std::exp(row[j] - m) / sum - want[j].get<double>()));
    }
  EXPECT_LT(worst, 1e-5) << "max abs error of the softmaxed scores";
  double logit_err = 0, logit_max = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < s.vocab; ++v) {
      const double want = u["cross_logits"][t][v].get<double>();
      logit_err = std::max(logit_err, std::abs(logits.data<float>()[t * s.vocab + v] - want));
      logit_max = std::max(logit_max, std::abs(want));
    }
  EXPECT_LT(logit_err, 1e-4 * logit_max);

  EXPECT_THROW(model->cross_attention_scores(features, tokens, {{s.decoder_layers, 0}}), std::invalid_argument);
  EXPECT_THROW(model->cross_attention_scores(features, tokens, {{0, s.decoder_heads}}), std::invalid_argument);
  EXPECT_THROW(model->cross_attention_scores(features, {}, heads), std::invalid_argument);
  EXPECT_THROW(model->cross_attention_scores(features, {static_cast<int32_t>(s.vocab)}, heads), std::invalid_argument);
}

TEST(WhisperTiming, AlignmentHeadsFromConfig) {
  nlohmann::json c = read_json(std::string(XDNA_FIXTURE_DIR) + "/whisper/tiny-random/config.json");
  EXPECT_TRUE(WhisperSpec::from_hf_config(c).alignment_heads.empty());
  c["alignment_heads"] = {{1, 0}, {1, 3}};
  const auto heads = WhisperSpec::from_hf_config(c).alignment_heads;
  EXPECT_EQ(heads, (std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {1, 3}}));
  c["alignment_heads"] = {{9, 0}};  // beyond the 2 decoder layers
  EXPECT_THROW(WhisperSpec::from_hf_config(c), std::runtime_error);
  c["alignment_heads"] = {1, 0};  // not pairs
  EXPECT_THROW(WhisperSpec::from_hf_config(c), std::runtime_error);
}

// ---- the real model against openai-whisper -----------------------------------------------------

std::string model_dir() { return default_store_dir() + "/whisper-tiny.en"; }
bool have_model() { return fs::exists(model_dir() + "/tokenizer.json") && fs::exists(model_dir() + "/model.baked"); }

const Transcriber& transcriber() {
  static Transcriber t = Transcriber::load(model_dir());
  return t;
}

TranscribeOptions word_options() {
  TranscribeOptions o;
  o.language = "en";
  o.beam_size = 1;
  o.temperatures = {0.0f};
  o.word_timestamps = true;
  return o;
}

void expect_matches_upstream(const std::string& clip, const std::vector<float>& samples) {
  const nlohmann::json want = read_json(kDir + "whisper-tiny.en.json")["clips"][clip];
  ASSERT_EQ(static_cast<int64_t>(samples.size()), want["samples"].get<int64_t>()) << clip;
  const Transcript t = transcriber().transcribe(samples, word_options());
  ASSERT_TRUE(t.word_timestamps);
  ASSERT_EQ(t.segments.size(), want["segments"].size()) << clip << ": " << t.text;
  int64_t times = 0, close = 0;
  for (size_t i = 0; i < t.segments.size(); ++i) {
    const TranscriptSegment& got = t.segments[i];
    const nlohmann::json& seg = want["segments"][i];
    ASSERT_EQ(got.tokens, seg["tokens"].get<std::vector<int32_t>>()) << clip << " segment " << i;
    ASSERT_EQ(got.words.size(), seg["words"].size()) << clip << " segment " << i;
    EXPECT_NEAR(got.start, seg["start"].get<double>(), 0.021) << clip << " segment " << i;
    EXPECT_NEAR(got.end, seg["end"].get<double>(), 0.021) << clip << " segment " << i;
    for (size_t k = 0; k < got.words.size(); ++k) {
      const nlohmann::json& w = seg["words"][k];
      EXPECT_EQ(got.words[k].word, w["word"].get<std::string>()) << clip << " segment " << i << " word " << k;
      EXPECT_NEAR(got.words[k].probability, w["probability"].get<double>(), 0.02) << got.words[k].word;
      for (const auto& [mine, theirs] : {std::pair{got.words[k].start, w["start"].get<double>()},
                                         std::pair{got.words[k].end, w["end"].get<double>()}}) {
        ++times;
        close += std::abs(mine - theirs) <= 0.02 + 1e-9;
        EXPECT_NEAR(mine, theirs, 0.2) << clip << " word " << got.words[k].word;  // never far off
      }
    }
  }
  EXPECT_GT(times, 0);
  EXPECT_GE(static_cast<double>(close), 0.95 * static_cast<double>(times))
      << clip << ": " << close << " of " << times << " word times within 0.02 s";
  std::printf("[ word times ] %s: %lld of %lld within 0.02 s of openai-whisper\n", clip.c_str(),
              static_cast<long long>(close), static_cast<long long>(times));
}

#define SKIP_WITHOUT_MODEL() \
  if (!have_model()) GTEST_SKIP() << "no " << model_dir() << " (npu model pull whisper-tiny.en)"

TEST(WhisperTimingReal, SpeechClipMatchesOpenaiWhisper) {
  SKIP_WITHOUT_MODEL();
  expect_matches_upstream("speech16k.wav", load_audio(std::string(XDNA_FIXTURE_DIR) + "/audio/speech16k.wav"));
}

TEST(WhisperTimingReal, LibrivoxClipMatchesOpenaiWhisper) {
  SKIP_WITHOUT_MODEL();
  expect_matches_upstream("librivox_0870.mp3", load_audio(std::string(XDNA_FIXTURE_DIR) + "/audio/librivox_0870.mp3"));
}

// Two windows: the second starts where the first window's last word ended.
TEST(WhisperTimingReal, LongAudioSeeksOnWordsSlow) {
  SKIP_WITHOUT_MODEL();
  const std::vector<float> one = load_audio(std::string(XDNA_FIXTURE_DIR) + "/audio/librivox_0870.mp3");
  std::vector<float> five;
  for (int i = 0; i < 5; ++i) five.insert(five.end(), one.begin(), one.end());
  expect_matches_upstream("librivox_x5", five);
}

TEST(WhisperTimingReal, NoAlignmentHeadsIsAClearError) {
  SKIP_WITHOUT_MODEL();
  WhisperSpec spec = transcriber().model().spec();
  spec.alignment_heads.clear();
  std::shared_ptr<const WeightSource> weights = open_weights(model_dir() + "/model.baked");
  const Transcriber bare(std::make_shared<WhisperModel>(spec, weights),
                         Tokenizer::from_file(model_dir() + "/tokenizer.json"));
  try {
    bare.transcribe(std::vector<float>(16000, 0.0f), word_options());
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("alignment heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xdna

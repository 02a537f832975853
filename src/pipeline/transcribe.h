// Speech to text with a Whisper model, as openai-whisper's transcribe() does it: log-mel of the
// whole file, 30-s windows, language detection, greedy or beam-search decoding with Whisper's
// logit rules (timestamp pairing, suppressed tokens, blank suppression at the start), temperature
// fallback when a window's compression ratio or average log-probability fails its threshold,
// seeking on the last timestamp for long audio, and the previous window's text as the prompt.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "models/whisper.h"
#include "pipeline/tokenizer.h"

namespace xdna {

// The special tokens of one Whisper vocabulary (.en and multilingual differ), read from the
// tokenizer by their text ("<|startoftranscript|>", "<|0.00|>", ...).
struct WhisperTokens {
  int32_t eot = -1, sot = -1, translate = -1, transcribe = -1, sot_prev = -1, sot_lm = -1;
  int32_t no_speech = -1, no_timestamps = -1, timestamp_begin = -1;
  std::vector<int32_t> languages;       // ids of <|en|>, <|zh|>, ... in vocabulary order
  std::vector<std::string> language_codes;  // "en", "zh", ... same order
  static WhisperTokens from_tokenizer(const Tokenizer& tok);  // throws naming a missing token
};

struct TranscribeOptions {
  std::string task = "transcribe";  // or "translate"
  std::string language;             // "" = detect (multilingual models); "en" for .en models
  std::vector<float> temperatures = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};  // fallback ladder
  int beam_size = 5;         // at temperature 0; <= 1 = greedy
  int best_of = 5;           // samples at temperature > 0
  float patience = 1.0f;
  float length_penalty = 0.0f;  // 0 = openai-whisper's default (divide by length)
  float compression_ratio_threshold = 2.4f;  // <= 0 disables
  float logprob_threshold = -1.0f;           // set to -INFINITY to disable
  float no_speech_threshold = 0.6f;
  bool condition_on_previous_text = true;
  std::string initial_prompt;
  bool timestamps = true;        // false = <|notimestamps|>, one segment per window
  // Word-level timestamps (openai-whisper's word_timestamps=True): each segment gets its words,
  // and segment start/end move onto them. Needs the model's alignment heads.
  bool word_timestamps = false;
  std::string prepend_punctuations = "\"'\u201c\u00bf([{-";  // joined to the next word
  std::string append_punctuations =
      "\"'.\u3002,\uff0c!\uff01?\uff1f:\uff1a\u201d)]}\u3001";  // joined to the previous word
  uint64_t seed = 0;             // for sampling at temperature > 0
  // Called after each window with (seconds done, seconds total); may be empty.
  std::function<void(double, double)> progress;
  std::vector<Backend*> backends;  // empty = host
};

struct TranscriptWord {
  std::string word;  // with its leading space
  double start = 0, end = 0;  // seconds, rounded to 10 ms as upstream
  float probability = 0;
};

struct TranscriptSegment {
  int64_t id = 0;
  int64_t seek = 0;  // mel frame where its window started
  double start = 0, end = 0;  // seconds
  std::string text;
  std::vector<int32_t> tokens;
  float temperature = 0, avg_logprob = 0, compression_ratio = 0, no_speech_prob = 0;
  std::vector<TranscriptWord> words;  // with word_timestamps only
};

struct Transcript {
  std::string text;
  std::string language;
  float language_probability = 0;
  double duration = 0;  // seconds of audio
  bool word_timestamps = false;  // segments carry words (formats then include them)
  std::vector<TranscriptSegment> segments;
  // Timing of this run (host wall clock): encoder ms per window, decoder ms per token.
  double encode_ms = 0, decode_ms = 0;
  int64_t windows = 0, decoded_tokens = 0;
  RunReport report;  // where the ops ran
};

// zlib-compressed size ratio of the text's UTF-8 bytes, as openai-whisper's compression_ratio.
float compression_ratio(const std::string& text);

class Transcriber {
 public:
  Transcriber(std::shared_ptr<const WhisperModel> model, Tokenizer tokenizer);
  // A model directory from the store, or an HF checkpoint directory (tokenizer.json beside it).
  static Transcriber load(const std::string& path);

  const WhisperModel& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const WhisperTokens& tokens() const { return tokens_; }

  // 16 kHz mono samples -> transcript. Throws std::invalid_argument for an unknown language or
  // task, or a language/translate request an English-only model cannot serve.
  Transcript transcribe(const std::vector<float>& samples, const TranscribeOptions& options) const;
  // Language probabilities of a mel window [n_mels, 3000] (multilingual models): best code first.
  std::vector<std::pair<std::string, float>> detect_language(const Tensor& mel) const;

 private:
  std::shared_ptr<const WhisperModel> model_;
  Tokenizer tokenizer_;
  WhisperTokens tokens_;
};

// Output formats (openai-whisper's writers / OpenAI's response_format): "text" (the text and a
// newline), "json" ({"text": ...}), "verbose_json" (task, language, duration, text, segments with
// id/seek/start/end/text/tokens/temperature/avg_logprob/compression_ratio/no_speech_prob), "srt",
// "vtt". Throws std::invalid_argument listing the formats for any other name.
// With word timestamps (t.word_timestamps), json and verbose_json also carry "words" (all words,
// OpenAI's shape: text stripped), and each verbose_json segment its "words" (openai-whisper's:
// leading space kept); every word has start, end (s) and probability. include_segments = false
// leaves verbose_json's "segments" out (OpenAI's timestamp_granularities[]=word alone).
std::string format_transcript(const Transcript& t, const std::string& format,
                              const std::string& task = "transcribe", bool include_segments = true);

}  // namespace xdna

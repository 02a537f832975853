// Whisper's decoding rules as plain functions over callbacks, so that they run (and are tested)
// without a model: one 30-s window's decode (greedy, best-of sampling or beam search, with
// openai-whisper's logit filters), the temperature fallback around it, the split of a window's
// tokens into timestamped segments, and the seek loop over a whole file. Transcriber
// (transcribe.cpp) binds the callbacks to a WhisperModel and a Tokenizer.
//
// Follows openai-whisper's whisper/decoding.py and whisper/transcribe.py (see docs/transcribe.md).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "pipeline/transcribe.h"

namespace xdna::whisper {

// What the decoder needs from the model, for the window last encoded.
struct WindowModel {
  // Encodes mel frames [seek, seek + frames) (zero-padded to 30 s). Called once per window.
  std::function<void(int64_t seek, int64_t frames)> encode;
  // A fresh decoding state with one beam over the encoded window (each fallback try starts one).
  std::function<void()> start;
  // Feeds tokens[b] to beam b (same length for all); logits [beams, vocab] f32 of the last token.
  std::function<Tensor(const std::vector<std::vector<int32_t>>&)> step;
  // Beam i continues what beam source[i] held; the state then has source.size() beams.
  std::function<void(const std::vector<int64_t>&)> reorder;
  // Text of token ids below eot (segment text, compression ratio).
  std::function<std::string(const std::vector<int32_t>&)> text;
  // Optional (word timestamps): gives the window's segments their words and moves their
  // start/end, before empty segments are cleared; seek and frames as encode()'s.
  std::function<void(std::vector<TranscriptSegment>&, int64_t seek, int64_t frames)> words;
};

struct WindowOptions {
  float temperature = 0;
  int beam_size = 5;          // at temperature 0; <= 1 = greedy
  int best_of = 5;            // independent samples at temperature > 0
  float patience = 1.0f;
  float length_penalty = 0;   // 0 = rank by sum_logprob / length, else ((5 + len) / 6)^penalty
  bool timestamps = true;
  int max_initial_timestamp_index = 50;  // 1.0 s / 0.02 s; < 0 = no limit
  int sample_len = 224;                  // n_text_ctx / 2
  int n_text_ctx = 448;
  std::vector<int32_t> suppress_tokens;  // always -inf (non-speech symbols + special tokens)
  std::vector<int32_t> blank_tokens;     // -inf at the first sampled position (" " and eot)
  uint64_t seed = 0;
};

struct WindowResult {
  std::vector<int32_t> tokens;  // sampled tokens, eot excluded
  std::string text;
  float sum_logprob = 0, avg_logprob = 0, no_speech_prob = 0, temperature = 0;
  float compression_ratio = 0;
};

// openai-whisper's default suppress list (suppress_tokens "-1"): the vocabulary's non-speech
// symbols ("[", "(", "♪" ...: tokens that start speaker tags and annotations; " -" and " '") plus
// transcribe, translate, sot, sot_prev, sot_lm and no_speech. Sorted. (Defined in transcribe.cpp.)
std::vector<int32_t> suppress_tokens(const Tokenizer& tok, const WhisperTokens& t);

// Prompt and task tokens before the first sampled one: [<|startofprev|>, last 223 prompt tokens]
// (when the prompt is not empty), then the sot sequence (sot, and for multilingual models the
// language and task tokens), then <|notimestamps|> when timestamps are off.
std::vector<int32_t> initial_tokens(const std::vector<int32_t>& sot_sequence,
                                    const std::vector<int32_t>& prompt, const WhisperTokens& t,
                                    bool timestamps, int n_text_ctx = 448);

// openai-whisper's logit filters for one sequence: `sampled` are the tokens sampled so far.
void apply_logit_filters(float* logits, int64_t vocab, const std::vector<int32_t>& sampled,
                         const WhisperTokens& t, const WindowOptions& o);

// One decode of the window (the model was encoded; this calls start()). The sequence with the best
// length-normalised log-probability wins (among best_of samples, or beam_size finished beams).
// no_speech_prob is the probability of <|nospeech|> in the logits at the sot position.
WindowResult decode_window(const std::vector<int32_t>& initial, const WhisperTokens& t,
                           const WindowOptions& o, WindowModel& m);

// The fallback rule of transcribe.py: too repetitive (compression ratio above its threshold) or
// too unlikely (avg_logprob below its threshold), unless it is silence (no_speech_prob above its
// threshold and avg_logprob below the log-prob threshold).
bool needs_fallback(const WindowResult& r, const TranscribeOptions& o);
// A window skipped as silence: no_speech_prob above threshold and avg_logprob not above the
// log-prob threshold.
bool is_silence(const WindowResult& r, const TranscribeOptions& o);

// decode_window at each temperature of the ladder until needs_fallback() is false (the last
// try's result is kept otherwise).
WindowResult decode_with_fallback(const std::vector<int32_t>& initial, const WhisperTokens& t,
                                  const TranscribeOptions& options, WindowOptions base,
                                  WindowModel& m);

// A window's tokens cut into segments. Consecutive timestamp tokens close one segment and open
// the next; times are in timestamp units (0.02 s) from the window start.
struct SegmentSpan {
  int64_t begin = 0, end = 0;  // token range [begin, end) in the window's tokens
  double start_ts = 0, end_ts = 0;
};
struct WindowSegments {
  std::vector<SegmentSpan> spans;
  // Frames the seek moves by: to the last timestamp pair, or the whole window when the tokens end
  // in a single timestamp (or hold no timestamp pair).
  int64_t seek_frames = 0;
  bool single_timestamp_ending = false;  // the tokens end in text then one timestamp
};
// segment_frames: mel frames of content in the window (<= 3000); the last span of a window with
// no timestamp pair spans to the last timestamp, or the whole window when there is none.
WindowSegments split_segments(const std::vector<int32_t>& tokens, const WhisperTokens& t,
                              int64_t segment_frames);

// The seek loop of transcribe.py over content_frames mel frames (mel frames of 10 ms): windows of
// up to 3000 frames, decoded with fallback, split into segments (with m.words: given their words,
// and the seek moved to the last word's end unless the window ends in a single timestamp, as
// upstream does with word_timestamps), prompt carried over. Fills
// segments and `all_tokens` (every segment's tokens, in order, after the initial prompt's).
struct SeekResult {
  std::vector<TranscriptSegment> segments;
  std::vector<int32_t> all_tokens;  // starts with the initial prompt's tokens
  size_t initial_prompt_tokens = 0;
  int64_t windows = 0, decoded_tokens = 0;
};
SeekResult transcribe_frames(int64_t content_frames, const std::vector<int32_t>& sot_sequence,
                             const std::vector<int32_t>& initial_prompt_tokens,
                             const WhisperTokens& t, const TranscribeOptions& options,
                             const WindowOptions& base, WindowModel& m);

}  // namespace xdna::whisper

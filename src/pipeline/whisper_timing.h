// Word-level timestamps for Whisper, as openai-whisper's whisper/timing.py computes them: the
// cross-attention of the model's alignment heads over the decoded tokens (softmax over the
// window's frames, normalised per frame across tokens, median-filtered along time, averaged over
// heads), dynamic time warping of tokens against audio frames, words cut where the tokenizer's
// word splitting says (spaces and punctuation; per character for zh/ja/th/lo/my/yue), punctuation
// merged into its neighbour word, and the duration clamps for words at sentence and segment
// boundaries, which also move each segment's start and end onto its words.
//
// Pure functions over plain arrays; Transcriber (transcribe.cpp) runs the model forward
// (WhisperModel::cross_attention_scores) and binds them.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "pipeline/transcribe.h"

namespace xdna::whisper {

// One word of the alignment, in seconds from the window start.
struct WordTiming {
  std::string word;  // with its leading space, as decoded
  std::vector<int32_t> tokens;
  double start = 0, end = 0;
  float probability = 0;  // mean probability of its tokens
};

// openai-whisper's median_filter over each row of x [rows, cols] (odd width; reflect padding).
// A row no longer than width / 2 is returned unchanged, as upstream.
std::vector<float> median_filter(const std::vector<float>& x, int64_t rows, int64_t cols, int width);

// Dynamic time warping of a cost matrix x [rows, cols] (row-major), as upstream's dtw_cpu: the
// path from (0, 0) to (rows - 1, cols - 1), with ties resolved as upstream (diagonal only when
// strictly cheapest, then up, else left). Returns the path's (text, time) index pairs in order.
struct DtwPath {
  std::vector<int64_t> text, time;
};
DtwPath dtw(const std::vector<double>& x, int64_t rows, int64_t cols);

// UTF-8 text with each invalid or truncated sequence replaced by U+FFFD (Python's
// errors="replace"), as code points.
std::u32string utf8_to_codepoints_lossy(const std::string& s);

// Tokenizer.split_to_word_tokens: words (decoded text, leading space kept) and their tokens.
// `decode` decodes ids with special tokens shown; `eot` is the first special id; `language` picks
// the per-character split for languages written without spaces.
using DecodeFn = std::function<std::string(const std::vector<int32_t>&)>;
void split_to_word_tokens(const std::vector<int32_t>& tokens, int32_t eot, const std::string& language,
                          const DecodeFn& decode, std::vector<std::string>& words,
                          std::vector<std::vector<int32_t>>& word_tokens);

// find_alignment after the model forward. scores [heads, tokens, n_audio_ctx]: the alignment
// heads' cross-attention scores (before softmax) over the sequence
// [sot_sequence..., <|notimestamps|>, text_tokens..., eot]; text_probs[i]: probability of
// text_tokens[i] where the model predicted it; num_frames: mel frames of content in the window.
std::vector<WordTiming> find_alignment(const Tensor& scores, int64_t sot_len, const std::vector<int32_t>& text_tokens,
                                       const std::vector<float>& text_probs, int64_t num_frames, int32_t eot,
                                       const std::string& language, const DecodeFn& decode,
                                       int medfilt_width = 7);

// merge_punctuations: a word made of a prepend symbol (after a space) joins the next word; an
// append symbol joins the previous word. Merged-away words are left with empty text and tokens.
void merge_punctuations(std::vector<WordTiming>& alignment, const std::string& prepended,
                        const std::string& appended);

// add_word_timestamps after find_alignment: clamps long words at sentence boundaries, merges
// punctuation, hands the words to the window's segments (seek gives the window's time offset),
// clamps the first words after a pause, and moves each segment's start/end onto its words (or
// the words onto the segment's timestamps when a word runs long). last_speech_timestamp is
// upstream's running end of speech (seconds), read and updated.
// (eot: the first special id; a segment's text tokens are those below it.)
void add_word_timestamps(std::vector<TranscriptSegment>& segments, std::vector<WordTiming> alignment,
                         int32_t eot, const std::string& prepended, const std::string& appended,
                         double& last_speech_timestamp);

// utils.get_end: the end of the last word of the last segment with words, else the last
// segment's end; false when there are no segments.
bool segments_end(const std::vector<TranscriptSegment>& segments, double& end);

}  // namespace xdna::whisper

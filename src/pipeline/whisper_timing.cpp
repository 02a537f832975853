// Word timestamps (see whisper_timing.h), following openai-whisper's whisper/timing.py step by
// step so that the same tokens and attention give the same words and times.
#include "pipeline/whisper_timing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "pipeline/audio.h"

namespace xdna::whisper {

namespace {

constexpr double kTokensPerSecond = 50;  // encoder positions per second (20 ms each)

// Python's `needle in haystack` for strings: a substring test, true for an empty needle.
bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Python's round(x, 2) (half to even on the binary value, close enough for 20-ms times).
double round2(double x) { return std::nearbyint(x * 100.0) / 100.0; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Tokenizer.split_tokens_on_unicode: a word ends where the decoded tokens so far hold no
// replacement character of their own (one the full text does not also have there).
void split_on_unicode(const std::vector<int32_t>& tokens, const DecodeFn& decode, std::vector<std::string>& words,
                      std::vector<std::vector<int32_t>>& word_tokens) {
  const std::u32string full = utf8_to_codepoints_lossy(decode(tokens));
  std::vector<int32_t> current;
  size_t offset = 0;
  for (int32_t token : tokens) {
    current.push_back(token);
    const std::string text = decode(current);
    const std::u32string decoded = utf8_to_codepoints_lossy(text);
    const size_t bad = decoded.find(U'\uFFFD');
    if (bad == std::u32string::npos || (offset + bad < full.size() && full[offset + bad] == U'\uFFFD')) {
      std::string clean;  // the word as Python holds it: invalid bytes already replaced
      for (char32_t c : decoded) {
        if (c < 0x80) {
          clean += static_cast<char>(c);
        } else if (c < 0x800) {
          clean += static_cast<char>(0xC0 | (c >> 6));
          clean += static_cast<char>(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
          clean += static_cast<char>(0xE0 | (c >> 12));
          clean += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
          clean += static_cast<char>(0x80 | (c & 0x3F));
        } else {
          clean += static_cast<char>(0xF0 | (c >> 18));
          clean += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
          clean += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
          clean += static_cast<char>(0x80 | (c & 0x3F));
        }
      }
      words.push_back(clean);
      word_tokens.push_back(current);
      current.clear();
      offset += decoded.size();
    }
  }
}

}  // namespace

std::u32string utf8_to_codepoints_lossy(const std::string& s) {
  std::u32string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    int len = 0;
    char32_t cp = 0, min = 0;
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      out.push_back(U'\uFFFD');  // not a lead byte
      ++i;
      continue;
    }
    // Consume the valid continuation bytes; a sequence cut short is one replacement character.
    int k = 1;
    while (k < len && i + k < n && (p[i + k] & 0xC0) == 0x80) {
      cp = (cp << 6) | (p[i + k] & 0x3F);
      ++k;
    }
    if (k == len && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF))
      out.push_back(cp);
    else
      out.push_back(U'\uFFFD');
    i += k;
  }
  return out;
}

std::vector<float> median_filter(const std::vector<float>& x, int64_t rows, int64_t cols, int width) {
  if (width <= 0 || width % 2 == 0)
    throw std::invalid_argument("median_filter: width must be a positive odd number, got " + std::to_string(width));
  if (rows < 0 || cols < 0 || static_cast<int64_t>(x.size()) != rows * cols)
    throw std::invalid_argument("median_filter: " + std::to_string(x.size()) + " values are not " +
                                std::to_string(rows) + " x " + std::to_string(cols));
  const int64_t pad = width / 2;
  if (cols <= pad) return x;  // upstream: reflect padding needs pad < length
  std::vector<float> out(x.size()), window(static_cast<size_t>(width));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t k = 0; k < width; ++k) {
        int64_t j = c - pad + k;
        if (j < 0) j = -j;                         // reflect (edge not repeated)
        if (j >= cols) j = 2 * (cols - 1) - j;
        window[k] = row[j];
      }
      std::nth_element(window.begin(), window.begin() + pad, window.end());
      out[r * cols + c] = window[pad];
    }
  }
  return out;
}

DtwPath dtw(const std::vector<double>& x, int64_t N, int64_t M) {
  if (N <= 0 || M <= 0 || static_cast<int64_t>(x.size()) != N * M)
    throw std::invalid_argument("dtw: " + std::to_string(x.size()) + " costs are not a " + std::to_string(N) + " x " +
                                std::to_string(M) + " matrix (both > 0)");
  // Upstream keeps the accumulated cost in float32 and the trace as 0 (diagonal), 1 (up), 2 (left).
  const int64_t W = M + 1;
  std::vector<float> cost(static_cast<size_t>((N + 1) * W), std::numeric_limits<float>::infinity());
  std::vector<int8_t> trace(static_cast<size_t>((N + 1) * W), -1);
  cost[0] = 0;
  for (int64_t j = 1; j <= M; ++j)
    for (int64_t i = 1; i <= N; ++i) {
      const float c0 = cost[(i - 1) * W + j - 1], c1 = cost[(i - 1) * W + j], c2 = cost[i * W + j - 1];
      float c;
      int8_t t;
      if (c0 < c1 && c0 < c2) c = c0, t = 0;
      else if (c1 < c0 && c1 < c2) c = c1, t = 1;
      else c = c2, t = 2;
      cost[i * W + j] = static_cast<float>(x[(i - 1) * M + j - 1] + static_cast<double>(c));
      trace[i * W + j] = t;
    }
  for (int64_t j = 0; j <= M; ++j) trace[j] = 2;      // first row: move left
  for (int64_t i = 0; i <= N; ++i) trace[i * W] = 1;  // first column: move up
  DtwPath path;
  int64_t i = N, j = M;
  while (i > 0 || j > 0) {
    path.text.push_back(i - 1);
    path.time.push_back(j - 1);
    switch (trace[i * W + j]) {
      case 0: --i, --j; break;
      case 1: --i; break;
      default: --j; break;
    }
  }
  std::reverse(path.text.begin(), path.text.end());
  std::reverse(path.time.begin(), path.time.end());
  return path;
}

void split_to_word_tokens(const std::vector<int32_t>& tokens, int32_t eot, const std::string& language,
                          const DecodeFn& decode, std::vector<std::string>& words,
                          std::vector<std::vector<int32_t>>& word_tokens) {
  words.clear();
  word_tokens.clear();
  for (const char* l : {"zh", "ja", "th", "lo", "my", "yue"})
    if (language == l) return split_on_unicode(tokens, decode, words, word_tokens);
  std::vector<std::string> subwords;
  std::vector<std::vector<int32_t>> subword_tokens;
  split_on_unicode(tokens, decode, subwords, subword_tokens);
  static const std::string punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";  // string.punctuation
  for (size_t i = 0; i < subwords.size(); ++i) {
    const bool special = subword_tokens[i][0] >= eot;
    const bool with_space = !subwords[i].empty() && subwords[i][0] == ' ';
    const bool is_punctuation = contains(punctuation, strip(subwords[i]));
    if (special || with_space || is_punctuation || words.empty()) {
      words.push_back(subwords[i]);
      word_tokens.push_back(subword_tokens[i]);
    } else {
      words.back() += subwords[i];
      word_tokens.back().insert(word_tokens.back().end(), subword_tokens[i].begin(), subword_tokens[i].end());
    }
  }
}

std::vector<WordTiming> find_alignment(const Tensor& scores, int64_t sot_len, const std::vector<int32_t>& text_tokens,
                                       const std::vector<float>& text_probs, int64_t num_frames, int32_t eot,
                                       const std::string& language, const DecodeFn& decode, int medfilt_width) {
  if (text_tokens.empty()) return {};
  const int64_t n_text = static_cast<int64_t>(text_tokens.size());
  const int64_t T = sot_len + 1 + n_text + 1;  // sot sequence, <|notimestamps|>, text, eot
  if (!scores.defined() || scores.ndim() != 3 || scores.dim(1) != T || scores.dtype() != DType::F32)
    throw std::invalid_argument("find_alignment: scores must be f32 [heads, " + std::to_string(T) + " tokens, frames]");
  if (static_cast<int64_t>(text_probs.size()) != n_text)
    throw std::invalid_argument("find_alignment: " + std::to_string(text_probs.size()) + " probabilities for " +
                                std::to_string(n_text) + " text tokens");
  const int64_t n_heads = scores.dim(0), S = scores.dim(2);
  const int64_t F = std::min(num_frames / 2, S);  // encoder positions of content
  if (n_heads == 0 || F <= 0) throw std::invalid_argument("find_alignment: no alignment heads or no audio frames");
  const float* src = scores.data<float>();

  // Per head: softmax over frames, then each frame normalised across tokens (mean 0, std 1,
  // biased), then a median filter along frames; the heads averaged.
  std::vector<float> matrix(static_cast<size_t>(T * F), 0.0f), w(static_cast<size_t>(T * F));
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      const float* row = src + (h * T + t) * S;
      float* out = w.data() + t * F;
      const float m = *std::max_element(row, row + F);
      float sum = 0;
      for (int64_t f = 0; f < F; ++f) sum += out[f] = std::exp(row[f] - m);
      for (int64_t f = 0; f < F; ++f) out[f] /= sum;
    }
    for (int64_t f = 0; f < F; ++f) {
      double mean = 0, var = 0;
      for (int64_t t = 0; t < T; ++t) mean += w[t * F + f];
      mean /= static_cast<double>(T);
      for (int64_t t = 0; t < T; ++t) var += (w[t * F + f] - mean) * (w[t * F + f] - mean);
      const float std_dev = static_cast<float>(std::sqrt(var / static_cast<double>(T)));
      for (int64_t t = 0; t < T; ++t) w[t * F + f] = (w[t * F + f] - static_cast<float>(mean)) / std_dev;
    }
    const std::vector<float> filtered = median_filter(w, T, F, medfilt_width);
    for (size_t i = 0; i < matrix.size(); ++i) matrix[i] += filtered[i];
  }
  // Rows from <|notimestamps|> through the last text token (sot sequence and eot dropped).
  const int64_t N = n_text + 1;
  std::vector<double> cost(static_cast<size_t>(N * F));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t f = 0; f < F; ++f)
      cost[r * F + f] = -static_cast<double>(matrix[(sot_len + r) * F + f] / static_cast<float>(n_heads));
  const DtwPath path = dtw(cost, N, F);

  std::vector<int32_t> with_eot = text_tokens;
  with_eot.push_back(eot);
  std::vector<std::string> words;
  std::vector<std::vector<int32_t>> word_tokens;
  split_to_word_tokens(with_eot, eot, language, decode, words, word_tokens);
  if (word_tokens.size() <= 1) return {};
  std::vector<size_t> boundaries = {0};
  for (size_t i = 0; i + 1 < word_tokens.size(); ++i) boundaries.push_back(boundaries.back() + word_tokens[i].size());

  // The time where the path first reaches each token row.
  std::vector<double> jump_times;
  for (size_t k = 0; k < path.text.size(); ++k)
    if (k == 0 || path.text[k] != path.text[k - 1]) jump_times.push_back(static_cast<double>(path.time[k]) / kTokensPerSecond);
  std::vector<WordTiming> out;
  for (size_t i = 0; i + 1 < boundaries.size(); ++i) {
    const size_t a = boundaries[i], b = boundaries[i + 1];
    if (b >= jump_times.size() || b > text_probs.size()) break;  // cannot happen for a full path
    WordTiming wt;
    wt.word = words[i];
    wt.tokens = word_tokens[i];
    wt.start = jump_times[a];
    wt.end = jump_times[b];
    double p = 0;
    for (size_t k = a; k < b; ++k) p += text_probs[k];
    wt.probability = b > a ? static_cast<float>(p / static_cast<double>(b - a)) : NAN;
    out.push_back(std::move(wt));
  }
  return out;
}

void merge_punctuations(std::vector<WordTiming>& alignment, const std::string& prepended,
                        const std::string& appended) {
  const int64_t n = static_cast<int64_t>(alignment.size());
  // Prepended symbols join the following word (scanning backwards).
  for (int64_t i = n - 2, j = n - 1; i >= 0; --i) {
    WordTiming& previous = alignment[i];
    WordTiming& following = alignment[j];
    if (!previous.word.empty() && previous.word[0] == ' ' && contains(prepended, strip(previous.word))) {
      following.word = previous.word + following.word;
      following.tokens.insert(following.tokens.begin(), previous.tokens.begin(), previous.tokens.end());
      previous.word.clear();
      previous.tokens.clear();
    } else {
      j = i;
    }
  }
  // Appended symbols join the previous word (scanning forwards).
  for (int64_t i = 0, j = 1; j < n; ++j) {
    WordTiming& previous = alignment[i];
    WordTiming& following = alignment[j];
    if ((previous.word.empty() || previous.word.back() != ' ') && contains(appended, following.word)) {
      previous.word += following.word;
      previous.tokens.insert(previous.tokens.end(), following.tokens.begin(), following.tokens.end());
      following.word.clear();
      following.tokens.clear();
    } else {
      i = j;
    }
  }
}

bool segments_end(const std::vector<TranscriptSegment>& segments, double& end) {
  for (auto s = segments.rbegin(); s != segments.rend(); ++s)
    if (!s->words.empty()) {
      end = s->words.back().end;
      return true;
    }
  if (segments.empty()) return false;
  end = segments.back().end;
  return true;
}

void add_word_timestamps(std::vector<TranscriptSegment>& segments, std::vector<WordTiming> alignment,
                         int32_t eot, const std::string& prepended, const std::string& appended,
                         double& last_speech_timestamp) {
  if (segments.empty()) return;
  std::vector<double> durations;
  for (const WordTiming& w : alignment)
    if (w.end - w.start != 0) durations.push_back(w.end - w.start);
  const double median_duration = std::min(0.7, durations.empty() ? 0.0 : median(durations));
  const double max_duration = median_duration * 2;

  // Words at sentence boundaries are at most twice the median word duration.
  if (!durations.empty()) {
    const std::string sentence_end_marks = ".\u3002!\uff01?\uff1f";
    for (size_t i = 1; i < alignment.size(); ++i) {
      if (alignment[i].end - alignment[i].start <= max_duration) continue;
      if (contains(sentence_end_marks, alignment[i].word))
        alignment[i].end = alignment[i].start + max_duration;
      else if (contains(sentence_end_marks, alignment[i - 1].word))
        alignment[i].start = alignment[i].end - max_duration;
    }
  }
  merge_punctuations(alignment, prepended, appended);

  const double time_offset = static_cast<double>(segments[0].seek) * kWhisperHop / kWhisperSampleRate;
  size_t word_index = 0;
  for (TranscriptSegment& segment : segments) {
    size_t text_tokens = 0;
    for (int32_t id : segment.tokens) text_tokens += id < eot ? 1 : 0;
    size_t saved_tokens = 0;
    std::vector<TranscriptWord> words;
    while (word_index < alignment.size() && saved_tokens < text_tokens) {
      const WordTiming& timing = alignment[word_index];
      if (!timing.word.empty())
        words.push_back({timing.word, round2(time_offset + timing.start), round2(time_offset + timing.end),
                         timing.probability});
      saved_tokens += timing.tokens.size();
      ++word_index;
    }
    if (!words.empty()) {
      // The first and second word after a pause are at most twice the median word duration.
      if (words[0].end - last_speech_timestamp > median_duration * 4 &&
          (words[0].end - words[0].start > max_duration ||
           (words.size() > 1 && words[1].end - words[0].start > max_duration * 2))) {
        if (words.size() > 1 && words[1].end - words[1].start > max_duration) {
          const double boundary = std::max(words[1].end / 2, words[1].end - max_duration);
          words[0].end = words[1].start = boundary;
        }
        words[0].start = std::max(0.0, words[0].end - max_duration);
      }
      // The segment's start timestamp wins over a first word that runs long.
      if (segment.start < words[0].end && segment.start - 0.5 > words[0].start)
        words[0].start = std::max(0.0, std::min(words[0].end - median_duration, segment.start));
      else
        segment.start = words[0].start;
      // Likewise its end timestamp over a last word that runs long.
      if (segment.end > words.back().start && segment.end + 0.5 < words.back().end)
        words.back().end = std::max(words.back().start + median_duration, segment.end);
      else
        segment.end = words.back().end;
      last_speech_timestamp = segment.end;
    }
    segment.words = std::move(words);
  }
}

}  // namespace xdna::whisper

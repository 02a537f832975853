// Whisper window decoding, fallback, segment split and seek loop (see whisper_decoding.h).
#include "pipeline/whisper_decoding.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include "pipeline/audio.h"
#include "pipeline/whisper_timing.h"

namespace xdna {

float compression_ratio(const std::string& text) {
  if (text.empty()) return 0.0f;  // zlib.compress(b"") is 8 bytes: 0 / 8
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::vector<Bytef> out(size);
  int rc = compress2(out.data(), &size, reinterpret_cast<const Bytef*>(text.data()),
                     static_cast<uLong>(text.size()), Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) throw std::runtime_error("compression_ratio: zlib compress2 failed");
  return static_cast<float>(text.size()) / static_cast<float>(size);
}

namespace whisper {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kFramesPerTimestamp = 2;  // 3000 mel frames / 1500 encoder positions
constexpr double kSecondsPerFrame = 0.01;   // hop 160 at 16 kHz

void mask(float* logits, int64_t vocab, int64_t begin, int64_t end) {
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, vocab);
  for (int64_t i = begin; i < end; ++i) logits[i] = kNegInf;
}

float log_sum_exp(const float* x, int64_t n) {
  float m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  if (m == kNegInf) return kNegInf;
  double s = 0;  // float exp (the hot loop: every beam, every step, the whole vocabulary)
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return m + static_cast<float>(std::log(s));
}

float log_sum_exp(const std::vector<float>& x) {
  return log_sum_exp(x.data(), static_cast<int64_t>(x.size()));
}

// The k largest entries, best first, lower id first on ties (one pass, no sort of the vocabulary).
std::vector<std::pair<float, int32_t>> top_k(const std::vector<float>& x, size_t k) {
  std::vector<std::pair<float, int32_t>> top;
  top.reserve(k + 1);
  for (size_t i = 0; i < x.size(); ++i) {
    if (top.size() == k && !(x[i] > top.back().first)) continue;
    auto at = std::find_if(top.begin(), top.end(), [&](const auto& e) { return x[i] > e.first; });
    top.insert(at, {x[i], static_cast<int32_t>(i)});
    if (top.size() > k) top.pop_back();
  }
  return top;
}

int32_t argmax(const std::vector<float>& x) {
  return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());  // first max
}

// A draw from softmax(logits / temperature).
int32_t sample(const std::vector<float>& logits, float temperature, std::mt19937_64& rng) {
  float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> cum(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != kNegInf) total += std::exp(static_cast<double>(logits[i] - m) / temperature);
    cum[i] = total;
  }
  // Top 53 bits of the generator (uniform_real_distribution differs between standard libraries).
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  auto it = std::upper_bound(cum.begin(), cum.end(), u);
  if (it == cum.end()) --it;
  while (logits[it - cum.begin()] == kNegInf && it != cum.begin()) --it;  // u hit a flat step
  return static_cast<int32_t>(it - cum.begin());
}

std::vector<float> row_of(const Tensor& logits, int64_t r) {
  const int64_t vocab = logits.dim(1);
  const float* p = logits.data<float>() + r * vocab;
  return std::vector<float>(p, p + vocab);
}

Tensor checked_step(WindowModel& m, const std::vector<std::vector<int32_t>>& tokens) {
  Tensor logits = m.step(tokens);
  if (logits.ndim() != 2 || logits.dim(0) != static_cast<int64_t>(tokens.size()) ||
      logits.dtype() != DType::F32 || !logits.is_contiguous())
    throw std::runtime_error("whisper decode: step returned logits " + shape_str(logits.shape()) +
                             ", expected contiguous f32 [" + std::to_string(tokens.size()) +
                             ", vocab]");
  return logits;
}

float length_score(float sum_logprob, size_t length, float length_penalty) {
  double penalty = length_penalty == 0 ? static_cast<double>(std::max<size_t>(length, 1))
                                       : std::pow((5.0 + length) / 6.0, length_penalty);
  return static_cast<float>(sum_logprob / penalty);
}

struct Candidate {
  std::vector<int32_t> tokens;  // eot excluded
  float sum_logprob = 0;
};

WindowResult pick_best(const std::vector<Candidate>& candidates, const WindowOptions& o) {
  size_t best = 0;
  float best_score = kNegInf;
  for (size_t i = 0; i < candidates.size(); ++i) {
    float s = length_score(candidates[i].sum_logprob, candidates[i].tokens.size(), o.length_penalty);
    if (i == 0 || s > best_score) best = i, best_score = s;
  }
  WindowResult r;
  r.tokens = candidates[best].tokens;
  r.sum_logprob = candidates[best].sum_logprob;
  r.avg_logprob = r.sum_logprob / static_cast<float>(r.tokens.size() + 1);
  r.temperature = o.temperature;
  return r;
}

// Greedy (n = 1 at temperature 0) or n independent samples at temperature > 0. Finished
// sequences are dropped from the model's batch.
std::vector<Candidate> sample_sequences(Tensor logits, int n, size_t initial_len,
                                        const WhisperTokens& t, const WindowOptions& o,
                                        WindowModel& m) {
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<int32_t>> seqs(n);
  std::vector<float> sums(n, 0.0f);
  std::vector<int> live(n);  // live[r] = sequence fed as beam r
  for (int i = 0; i < n; ++i) live[i] = i;
  bool replicated = n > 1;  // the prompt ran once: one logits row serves every sequence
  if (n > 1) m.reorder(std::vector<int64_t>(n, 0));
  for (int step = 0; step < o.sample_len; ++step) {
    std::vector<int> next_live;
    std::vector<int64_t> keep;
    for (size_t r = 0; r < live.size(); ++r) {
      const int s = live[r];
      std::vector<float> x = row_of(logits, replicated ? 0 : static_cast<int64_t>(r));
      apply_logit_filters(x.data(), static_cast<int64_t>(x.size()), seqs[s], t, o);
      int32_t token = o.temperature > 0 ? sample(x, o.temperature, rng) : argmax(x);
      sums[s] += x[token] - log_sum_exp(x);
      seqs[s].push_back(token);
      if (token != t.eot) next_live.push_back(s), keep.push_back(static_cast<int64_t>(r));
    }
    replicated = false;
    if (next_live.empty() || initial_len + step + 1 > static_cast<size_t>(o.n_text_ctx) ||
        step + 1 == o.sample_len)
      break;
    if (next_live.size() != live.size()) m.reorder(keep);
    live = next_live;
    std::vector<std::vector<int32_t>> feed;
    for (int s : live) feed.push_back({seqs[s].back()});
    logits = checked_step(m, feed);
  }
  std::vector<Candidate> out(n);
  for (int s = 0; s < n; ++s) {
    auto eot = std::find(seqs[s].begin(), seqs[s].end(), t.eot);
    out[s].tokens.assign(seqs[s].begin(), eot);
    out[s].sum_logprob = sums[s];
  }
  return out;
}

// openai-whisper's BeamSearchDecoder for one audio: keeps beam_size live beams, collects finished
// ones until round(beam_size * patience) are done, tops up with the best live beams.
std::vector<Candidate> beam_search(Tensor logits, size_t initial_len, const WhisperTokens& t,
                                   const WindowOptions& o, WindowModel& m) {
  const int beams = o.beam_size;
  const size_t max_candidates =
      static_cast<size_t>(std::max(1L, std::lround(beams * o.patience)));
  std::vector<std::vector<int32_t>> live = {{}};  // one beam until the first step fans out
  std::vector<float> scores = {0.0f};
  std::vector<Candidate> finished;
  for (int step = 0; step < o.sample_len; ++step) {
    struct Next {
      float score;
      int64_t source;
      int32_t token;
    };
    std::vector<Next> next;
    for (size_t r = 0; r < live.size(); ++r) {
      std::vector<float> x = row_of(logits, static_cast<int64_t>(r));
      apply_logit_filters(x.data(), static_cast<int64_t>(x.size()), live[r], t, o);
      const float lse = log_sum_exp(x);
      for (const auto& [logit, id] : top_k(x, static_cast<size_t>(beams + 1)))
        if (logit != kNegInf) next.push_back({scores[r] + (logit - lse), static_cast<int64_t>(r), id});
    }
    std::stable_sort(next.begin(), next.end(),
                     [](const Next& a, const Next& b) { return a.score > b.score; });
    std::vector<std::vector<int32_t>> new_live;
    std::vector<float> new_scores;
    std::vector<int64_t> sources;
    std::vector<Candidate> newly_finished;
    for (const Next& c : next) {
      std::vector<int32_t> seq = live[c.source];
      if (c.token == t.eot) {
        newly_finished.push_back({seq, c.score});
        continue;
      }
      seq.push_back(c.token);
      new_live.push_back(std::move(seq));
      new_scores.push_back(c.score);
      sources.push_back(c.source);
      if (static_cast<int>(new_live.size()) == beams) break;
    }
    for (Candidate& c : newly_finished) {
      if (finished.size() >= max_candidates) break;
      finished.push_back(std::move(c));
    }
    live = std::move(new_live);
    scores = std::move(new_scores);
    if (finished.size() >= max_candidates || live.empty() ||
        initial_len + step + 1 > static_cast<size_t>(o.n_text_ctx) || step + 1 == o.sample_len)
      break;
    m.reorder(sources);
    std::vector<std::vector<int32_t>> feed;
    for (const auto& seq : live) feed.push_back({seq.back()});
    logits = checked_step(m, feed);
  }
  if (finished.size() < static_cast<size_t>(beams)) {  // top up with unfinished beams, best first
    std::vector<size_t> order(live.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    for (size_t i : order) {
      if (finished.size() >= static_cast<size_t>(beams)) break;
      finished.push_back({live[i], scores[i]});
    }
  }
  return finished;
}

std::string trimmed(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<int32_t> text_tokens(const std::vector<int32_t>& tokens, const WhisperTokens& t) {
  std::vector<int32_t> out;
  for (int32_t id : tokens)
    if (id < t.eot) out.push_back(id);
  return out;
}

}  // namespace

std::vector<int32_t> initial_tokens(const std::vector<int32_t>& sot_sequence,
                                    const std::vector<int32_t>& prompt, const WhisperTokens& t,
                                    bool timestamps, int n_text_ctx) {
  std::vector<int32_t> out;
  if (!prompt.empty()) {
    out.push_back(t.sot_prev);
    const size_t keep = std::min(prompt.size(), static_cast<size_t>(n_text_ctx / 2 - 1));
    out.insert(out.end(), prompt.end() - static_cast<std::ptrdiff_t>(keep), prompt.end());
  }
  out.insert(out.end(), sot_sequence.begin(), sot_sequence.end());
  if (!timestamps) out.push_back(t.no_timestamps);
  return out;
}

void apply_logit_filters(float* logits, int64_t vocab, const std::vector<int32_t>& sampled,
                         const WhisperTokens& t, const WindowOptions& o) {
  if (sampled.empty())  // SuppressBlank: no leading space or empty text
    for (int32_t id : o.blank_tokens)
      if (id >= 0 && id < vocab) logits[id] = kNegInf;
  for (int32_t id : o.suppress_tokens)
    if (id >= 0 && id < vocab) logits[id] = kNegInf;
  if (!o.timestamps) return;

  // ApplyTimestampRules.
  const int64_t tb = t.timestamp_begin;
  if (t.no_timestamps >= 0 && t.no_timestamps < vocab) logits[t.no_timestamps] = kNegInf;
  const size_t n = sampled.size();
  const bool last_ts = n >= 1 && sampled[n - 1] >= tb;
  const bool penultimate_ts = n < 2 || sampled[n - 2] >= tb;
  if (last_ts) {
    if (penultimate_ts) mask(logits, vocab, tb, vocab);  // a pair just closed: text (or eot) next
    else mask(logits, vocab, 0, t.eot);                  // an open timestamp: another, or eot
  }
  for (size_t i = n; i-- > 0;) {  // timestamps never go back; a segment has nonzero length
    if (sampled[i] < tb) continue;
    const int64_t last = (last_ts && !penultimate_ts) ? sampled[i] : sampled[i] + 1;
    mask(logits, vocab, tb, last);
    break;
  }
  if (n == 0) {  // the first token is a timestamp, at most max_initial_timestamp in
    mask(logits, vocab, 0, tb);
    if (o.max_initial_timestamp_index >= 0)
      mask(logits, vocab, tb + o.max_initial_timestamp_index + 1, vocab);
  }
  // When all timestamps together outweigh the likeliest text token, a timestamp must come.
  if (tb < vocab) {
    const float ts_mass = log_sum_exp(logits + tb, vocab - tb);
    const float text_max = *std::max_element(logits, logits + tb);
    if (ts_mass > text_max) mask(logits, vocab, 0, tb);
  }
}

WindowResult decode_window(const std::vector<int32_t>& initial, const WhisperTokens& t,
                           const WindowOptions& o, WindowModel& m) {
  auto sot = std::find(initial.begin(), initial.end(), t.sot);
  if (sot == initial.end()) throw std::invalid_argument("whisper decode: initial tokens lack sot");
  m.start();
  // Through sot first: its logits give the no-speech probability (and are what language
  // detection reads); the rest of the sot sequence follows in a second call.
  Tensor logits = checked_step(m, {std::vector<int32_t>(initial.begin(), sot + 1)});
  float no_speech = 0;
  if (t.no_speech >= 0 && t.no_speech < logits.dim(1)) {
    std::vector<float> x = row_of(logits, 0);
    no_speech = std::exp(x[t.no_speech] - log_sum_exp(x));
  }
  if (sot + 1 != initial.end()) logits = checked_step(m, {std::vector<int32_t>(sot + 1, initial.end())});

  std::vector<Candidate> candidates;
  if (o.temperature == 0 && o.beam_size > 1)
    candidates = beam_search(logits, initial.size(), t, o, m);
  else
    candidates = sample_sequences(logits, o.temperature > 0 ? std::max(o.best_of, 1) : 1,
                                  initial.size(), t, o, m);
  WindowResult r = pick_best(candidates, o);
  r.no_speech_prob = no_speech;
  return r;
}

bool needs_fallback(const WindowResult& r, const TranscribeOptions& o) {
  bool fallback = false;
  if (o.compression_ratio_threshold > 0 && r.compression_ratio > o.compression_ratio_threshold)
    fallback = true;  // too repetitive
  if (r.avg_logprob < o.logprob_threshold) fallback = true;  // too unlikely
  if (r.no_speech_prob > o.no_speech_threshold && r.avg_logprob < o.logprob_threshold)
    fallback = false;  // silence: sampling will not help
  return fallback;
}

bool is_silence(const WindowResult& r, const TranscribeOptions& o) {
  return r.no_speech_prob > o.no_speech_threshold && !(r.avg_logprob > o.logprob_threshold);
}

WindowResult decode_with_fallback(const std::vector<int32_t>& initial, const WhisperTokens& t,
                                  const TranscribeOptions& options, WindowOptions base,
                                  WindowModel& m) {
  if (options.temperatures.empty())
    throw std::invalid_argument("transcribe: the temperature list is empty");
  WindowResult r;
  for (size_t i = 0; i < options.temperatures.size(); ++i) {
    WindowOptions o = base;
    o.temperature = options.temperatures[i];
    if (!(o.temperature >= 0))
      throw std::invalid_argument("transcribe: temperature " + std::to_string(o.temperature) +
                                  " is negative");
    o.seed = options.seed + i;
    r = decode_window(initial, t, o, m);
    r.text = trimmed(m.text(text_tokens(r.tokens, t)));
    r.compression_ratio = compression_ratio(r.text);
    if (!needs_fallback(r, options)) break;
  }
  return r;
}

WindowSegments split_segments(const std::vector<int32_t>& tokens, const WhisperTokens& t,
                              int64_t segment_frames) {
  const int64_t tb = t.timestamp_begin;
  const size_t n = tokens.size();
  auto is_ts = [&](size_t i) { return tokens[i] >= tb; };
  const bool single_ending = n >= 2 && !is_ts(n - 2) && is_ts(n - 1);
  std::vector<size_t> slices;
  for (size_t i = 1; i < n; ++i)
    if (is_ts(i - 1) && is_ts(i)) slices.push_back(i);

  WindowSegments out;
  out.single_timestamp_ending = single_ending;
  if (!slices.empty()) {
    if (single_ending) slices.push_back(n);
    size_t last = 0;
    for (size_t s : slices) {
      out.spans.push_back({static_cast<int64_t>(last), static_cast<int64_t>(s),
                           static_cast<double>(tokens[last] - tb),
                           static_cast<double>(tokens[s - 1] - tb)});
      last = s;
    }
    out.seek_frames = single_ending ? segment_frames : (tokens[last - 1] - tb) * kFramesPerTimestamp;
  } else {
    double end = static_cast<double>(segment_frames) / kFramesPerTimestamp;
    for (size_t i = n; i-- > 0;) {
      if (!is_ts(i)) continue;
      if (tokens[i] != tb) end = static_cast<double>(tokens[i] - tb);
      break;
    }
    out.spans.push_back({0, static_cast<int64_t>(n), 0.0, end});
    out.seek_frames = segment_frames;
  }
  return out;
}

SeekResult transcribe_frames(int64_t content_frames, const std::vector<int32_t>& sot_sequence,
                             const std::vector<int32_t>& initial_prompt_tokens,
                             const WhisperTokens& t, const TranscribeOptions& options,
                             const WindowOptions& base, WindowModel& m) {
  SeekResult res;
  res.all_tokens = initial_prompt_tokens;
  res.initial_prompt_tokens = initial_prompt_tokens.size();
  size_t prompt_reset_since = 0;
  const double seconds_per_ts = kFramesPerTimestamp * kSecondsPerFrame;
  int64_t seek = 0;
  while (seek < content_frames) {
    const int64_t segment_frames = std::min(kWhisperChunkFrames, content_frames - seek);
    m.encode(seek, segment_frames);
    ++res.windows;
    std::vector<int32_t> prompt(res.all_tokens.begin() + static_cast<std::ptrdiff_t>(prompt_reset_since),
                                res.all_tokens.end());
    WindowResult r = decode_with_fallback(initial_tokens(sot_sequence, prompt, t, base.timestamps,
                                                         base.n_text_ctx),
                                          t, options, base, m);
    res.decoded_tokens += static_cast<int64_t>(r.tokens.size());
    if (is_silence(r, options)) {
      seek += segment_frames;
    } else {
      const double time_offset = static_cast<double>(seek * kWhisperHop) / kWhisperSampleRate;
      WindowSegments split = split_segments(r.tokens, t, segment_frames);
      std::vector<TranscriptSegment> window;
      for (const SegmentSpan& span : split.spans) {
        TranscriptSegment seg;
        seg.id = static_cast<int64_t>(res.segments.size() + window.size());
        seg.seek = seek;
        seg.start = time_offset + span.start_ts * seconds_per_ts;
        seg.end = time_offset + span.end_ts * seconds_per_ts;
        seg.tokens.assign(r.tokens.begin() + span.begin, r.tokens.begin() + span.end);
        seg.text = m.text(text_tokens(seg.tokens, t));
        seg.temperature = r.temperature;
        seg.avg_logprob = r.avg_logprob;
        seg.compression_ratio = r.compression_ratio;
        seg.no_speech_prob = r.no_speech_prob;
        window.push_back(std::move(seg));
      }
      // A window ending on <|0.00|><|0.00|> would not move: take the whole window instead.
      const int64_t window_seek = seek;
      seek += split.seek_frames > 0 ? split.seek_frames : segment_frames;
      if (m.words) {
        m.words(window, window_seek, segment_frames);
        double last_word_end = 0;
        if (!split.single_timestamp_ending && segments_end(window, last_word_end) && last_word_end > time_offset)
          seek = static_cast<int64_t>(std::nearbyint(last_word_end * 100.0));  // FRAMES_PER_SECOND
      }
      for (TranscriptSegment& seg : window) {
        if (seg.start == seg.end || trimmed(seg.text).empty()) {  // instantaneous or empty
          seg.text.clear();
          seg.tokens.clear();
          seg.words.clear();
        }
        res.all_tokens.insert(res.all_tokens.end(), seg.tokens.begin(), seg.tokens.end());
        res.segments.push_back(std::move(seg));
      }
    }
    if (!options.condition_on_previous_text || r.temperature > 0.5f)
      prompt_reset_since = res.all_tokens.size();
    if (options.progress)
      options.progress(static_cast<double>(std::min(seek, content_frames)) * kSecondsPerFrame,
                       static_cast<double>(content_frames) * kSecondsPerFrame);
  }
  return res;
}

}  // namespace whisper
}  // namespace xdna

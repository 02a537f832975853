#include "pipeline/conformer_transcribe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "pipeline/conformer_features.h"

namespace xdna {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The options only Whisper has: refused rather than ignored.
void check_options(const TranscribeOptions& o) {
  if (o.task != "transcribe") throw std::invalid_argument("task '" + o.task + "': conformer models only transcribe");
  if (!o.language.empty())
    throw std::invalid_argument("language '" + o.language + "': conformer models take no language");
  if (!o.initial_prompt.empty()) throw std::invalid_argument("a prompt: conformer models take no prompt");
  if (o.word_timestamps)
    throw std::invalid_argument("word timestamps: conformer models give segment times only (from their frames)");
  const TranscribeOptions defaults;
  if (o.beam_size != defaults.beam_size && o.beam_size > 1)
    throw std::invalid_argument("beam search: conformer models decode greedily");
  for (float t : o.temperatures)
    if (t != 0.0f && o.temperatures != defaults.temperatures)
      throw std::invalid_argument("temperature " + std::to_string(t) + ": conformer models decode greedily");
}

// Rows [begin, end) of every part, joined: [sum of rows, d_model].
Tensor join_rows(const std::vector<Tensor>& parts, const std::vector<std::pair<int64_t, int64_t>>& spans,
                 int64_t width) {
  int64_t rows = 0;
  for (const auto& [b, e] : spans) rows += e - b;
  Tensor out = Tensor::empty({rows, width});
  float* dst = out.data<float>();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor part = parts[i].contiguous();
    const auto [b, e] = spans[i];
    std::memcpy(dst, part.data<float>() + b * width, static_cast<size_t>((e - b) * width) * sizeof(float));
    dst += (e - b) * width;
  }
  return out;
}

bool ends_sentence(const std::string& piece) {
  return !piece.empty() && (piece.back() == '.' || piece.back() == '?' || piece.back() == '!');
}

}  // namespace

double conformer_frame_seconds(const ConformerConfig& c) {
  return static_cast<double>(c.mel.hop_length) * static_cast<double>(c.subsampling_factor) / c.mel.sample_rate;
}

ConformerTranscriber::ConformerTranscriber(std::shared_ptr<const ConformerModel> model, ConformerChunking chunking)
    : model_(std::move(model)), chunking_(chunking) {
  if (!model_) throw std::invalid_argument("ConformerTranscriber: no model");
  if (!(chunking_.chunk_seconds > 0) || !(chunking_.context_seconds >= 0))
    throw std::invalid_argument("ConformerTranscriber: chunk_seconds must be > 0 and context_seconds >= 0");
}

ConformerTranscriber ConformerTranscriber::load(const std::string& path) {
  return ConformerTranscriber(load_conformer(path));
}

std::vector<TranscriptSegment> conformer_segments(const ConformerModel& model, const std::vector<AsrToken>& tokens) {
  const double frame_s = conformer_frame_seconds(model.config());
  const auto& vocab = model.vocabulary();
  std::vector<TranscriptSegment> segments;
  std::vector<AsrToken> current;
  auto close = [&](int64_t end_frame) {
    if (current.empty()) return;
    TranscriptSegment s;
    s.id = static_cast<int64_t>(segments.size());
    s.seek = current.front().frame;
    s.start = current.front().frame * frame_s;
    s.end = std::max(end_frame, current.back().frame + std::max<int64_t>(current.back().duration, 1)) * frame_s;
    s.text = detokenize(model, current);
    for (const AsrToken& t : current) s.tokens.push_back(t.id);
    segments.push_back(std::move(s));
    current.clear();
  };
  for (const AsrToken& t : tokens) {
    if (!current.empty()) {
      const double gap = (t.frame - current.back().frame) * frame_s;
      const double length = (t.frame - current.front().frame) * frame_s;
      const int32_t prev = current.back().id;
      const bool sentence_end = prev >= 0 && prev < static_cast<int32_t>(vocab.size()) && ends_sentence(vocab[prev]) &&
                                length >= 2.0;
      // A new segment starts at a word start only (a piece with the U+2581 space marker), so no
      // word is split between two segments.
      const bool word_start = t.id >= 0 && t.id < static_cast<int32_t>(vocab.size()) &&
                              vocab[t.id].rfind("\xe2\x96\x81", 0) == 0;
      if (sentence_end || gap >= 1.0 || (length >= 30.0 && word_start)) close(current.back().frame + 1);
    }
    current.push_back(t);
  }
  if (!current.empty()) close(current.back().frame + 1);
  return segments;
}

Transcript ConformerTranscriber::transcribe(const std::vector<float>& samples, const TranscribeOptions& options) const {
  check_options(options);
  const ConformerConfig& c = model_->config();
  const int64_t frame_samples = static_cast<int64_t>(c.mel.hop_length) * c.subsampling_factor;
  const int64_t n = static_cast<int64_t>(samples.size());
  if (n == 0) throw std::invalid_argument("transcribe: the audio is empty");
  // Chunk and context in whole encoder frames, so kept frames line up across chunks.
  const int64_t chunk = std::max<int64_t>(
      1, std::llround(chunking_.chunk_seconds * c.mel.sample_rate / frame_samples)) * frame_samples;
  const int64_t context = std::llround(chunking_.context_seconds * c.mel.sample_rate / frame_samples) * frame_samples;

  Transcript t;
  t.duration = static_cast<double>(n) / c.mel.sample_rate;
  std::vector<Tensor> parts;
  std::vector<std::pair<int64_t, int64_t>> spans;
  const auto t_encode = std::chrono::steady_clock::now();
  if (n <= chunk) {  // one pass, as upstream
    Tensor enc = model_->encode(conformer_log_mel(samples, c.mel), options.backends, &t.report);
    spans.push_back({0, enc.dim(0)});
    parts.push_back(std::move(enc));
    t.windows = 1;
    if (options.progress) options.progress(t.duration, t.duration);
  } else {
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t lo = std::max<int64_t>(0, start - context);
      const int64_t hi = std::min(n, start + chunk + context);
      const std::vector<float> slice(samples.begin() + lo, samples.begin() + hi);
      Tensor enc = model_->encode(conformer_log_mel(slice, c.mel), options.backends, &t.report);
      const int64_t first = (start - lo) / frame_samples;
      const int64_t own = (std::min(n, start + chunk) - start + frame_samples - 1) / frame_samples;
      const int64_t last = std::min(enc.dim(0), first + own);
      if (first < last) {
        spans.push_back({first, last});
        parts.push_back(std::move(enc));
      }
      ++t.windows;
      if (options.progress)
        options.progress(static_cast<double>(std::min(n, start + chunk)) / c.mel.sample_rate, t.duration);
    }
  }
  const Tensor encoded = join_rows(parts, spans, c.d_model);
  t.encode_ms = ms_since(t_encode) / static_cast<double>(std::max<int64_t>(1, t.windows));

  const auto t_decode = std::chrono::steady_clock::now();
  std::vector<AsrToken> tokens = c.head == "ctc" ? ctc_greedy(model_->ctc_log_probs(encoded), c.vocab_size)
                                                 : transducer_greedy(*model_, encoded);
  t.decoded_tokens = static_cast<int64_t>(tokens.size());
  t.decode_ms = ms_since(t_decode) / static_cast<double>(std::max<int64_t>(1, encoded.dim(0)));  // per frame

  t.text = detokenize(*model_, tokens);
  t.segments = options.timestamps ? conformer_segments(*model_, tokens) : std::vector<TranscriptSegment>{};
  if (!options.timestamps && !tokens.empty()) {
    TranscriptSegment s;
    s.start = 0;
    s.end = t.duration;
    s.text = t.text;
    for (const AsrToken& tok : tokens) s.tokens.push_back(tok.id);
    t.segments.push_back(std::move(s));
  }
  for (TranscriptSegment& s : t.segments) s.end = std::min(s.end, t.duration);
  return t;
}

}  // namespace xdna

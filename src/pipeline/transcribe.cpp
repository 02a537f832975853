// Transcriber: audio -> log-mel -> 30-s windows -> WhisperModel, decoded by whisper_decoding.
#include "pipeline/transcribe.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "pipeline/audio.h"
#include "pipeline/whisper_decoding.h"
#include "pipeline/whisper_timing.h"

namespace xdna {
namespace {

int32_t required_token(const Tokenizer& tok, const std::string& text) {
  int32_t id = tok.token_to_id(text);
  if (id < 0) throw std::runtime_error("whisper tokenizer: special token " + text + " is missing");
  return id;
}

// openai-whisper's Tokenizer.non_speech_tokens: symbols that would start speaker tags or
// annotations ("[DAVID]", "♪♪", "(laughs)"), plus " -" and " '" at the start of a word, computed
// from this vocabulary the same way (a symbol counts when it is one token, alone or after a
// space; the musical symbols by their first token).
std::vector<int32_t> non_speech_tokens(const Tokenizer& tok) {
  auto encode = [&](const std::string& s) { return tok.encode(s, false).ids; };
  std::vector<std::string> symbols;
  for (const char* s = "\"#()*+/:;<=>@[\\]^_`{|}~"; *s; ++s) symbols.emplace_back(1, *s);
  for (const char* s : {"「", "」", "『", "』", "<<", ">>", "<<<", ">>>", "--", "---", "-(", "-[",
                        "('", "(\"", "((", "))", "(((", ")))", "[[", "]]", "{{", "}}", "♪♪", "♪♪♪"})
    symbols.emplace_back(s);
  const std::vector<std::string> miscellaneous = {"♩", "♪", "♫", "♬", "♭", "♮", "♯"};
  std::set<int32_t> out;
  for (const char* s : {" -", " '"}) {
    auto ids = encode(s);
    if (!ids.empty()) out.insert(ids[0]);
  }
  for (const auto& s : symbols)
    for (const auto& ids : {encode(s), encode(" " + s)})
      if (ids.size() == 1) out.insert(ids[0]);
  for (const auto& s : miscellaneous)
    for (const auto& ids : {encode(s), encode(" " + s)})
      if (!ids.empty()) out.insert(ids[0]);
  return {out.begin(), out.end()};
}

std::string trimmed(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// mel[:, seek : seek + frames], zero-padded to 3000 frames (openai-whisper's pad_or_trim).
Tensor mel_window(const Tensor& mel, int64_t seek, int64_t frames) {
  const int64_t n_mels = mel.dim(0), total = mel.dim(1);
  Tensor w = Tensor::zeros({n_mels, kWhisperChunkFrames});
  frames = std::min({frames, kWhisperChunkFrames, total - seek});
  const float* src = mel.data<float>();
  float* dst = w.data<float>();
  for (int64_t m = 0; m < n_mels; ++m)
    std::memcpy(dst + m * kWhisperChunkFrames, src + m * total + seek,
                static_cast<size_t>(frames) * sizeof(float));
  return w;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<int32_t> whisper::suppress_tokens(const Tokenizer& tok, const WhisperTokens& t) {
  std::vector<int32_t> ids = non_speech_tokens(tok);
  for (int32_t id : {t.transcribe, t.translate, t.sot, t.sot_prev, t.sot_lm, t.no_speech})
    if (id >= 0) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

WhisperTokens WhisperTokens::from_tokenizer(const Tokenizer& tok) {
  WhisperTokens t;
  t.eot = required_token(tok, "<|endoftext|>");
  t.sot = required_token(tok, "<|startoftranscript|>");
  t.translate = required_token(tok, "<|translate|>");
  t.transcribe = required_token(tok, "<|transcribe|>");
  t.sot_prev = required_token(tok, "<|startofprev|>");
  t.sot_lm = required_token(tok, "<|startoflm|>");
  t.no_timestamps = required_token(tok, "<|notimestamps|>");
  t.no_speech = tok.token_to_id("<|nospeech|>");
  if (t.no_speech < 0) t.no_speech = tok.token_to_id("<|nocaptions|>");  // older vocabularies
  // Timestamps follow the last special token; tokenizer.json files often leave them out.
  t.timestamp_begin = tok.token_to_id("<|0.00|>");
  if (t.timestamp_begin < 0) t.timestamp_begin = t.no_timestamps + 1;
  for (int32_t id = t.sot + 1; id < t.translate; ++id) {
    std::string s = tok.id_to_token(id);
    if (s.size() < 5 || s.compare(0, 2, "<|") != 0 || s.compare(s.size() - 2, 2, "|>") != 0)
      throw std::runtime_error("whisper tokenizer: expected a language token at id " +
                               std::to_string(id) + ", found '" + s + "'");
    t.languages.push_back(id);
    t.language_codes.push_back(s.substr(2, s.size() - 4));
  }
  return t;
}

Transcriber::Transcriber(std::shared_ptr<const WhisperModel> model, Tokenizer tokenizer)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)),
      tokens_(WhisperTokens::from_tokenizer(tokenizer_)) {
  if (!model_) throw std::invalid_argument("Transcriber: no model");
  const int64_t vocab = model_->spec().vocab;
  if (tokens_.timestamp_begin >= vocab)
    throw std::runtime_error("Transcriber: the tokenizer's timestamps start at id " +
                             std::to_string(tokens_.timestamp_begin) +
                             ", beyond the model's vocabulary of " + std::to_string(vocab));
}

Transcriber Transcriber::load(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  fs::path tok = dir / "tokenizer.json";
  if (!fs::exists(tok))
    throw std::runtime_error("Transcriber: no tokenizer.json in " + dir.string());
  return Transcriber(WhisperModel::load(path), Tokenizer::from_file(tok.string()));
}

std::vector<std::pair<std::string, float>> Transcriber::detect_language(const Tensor& mel) const {
  if (!model_->spec().multilingual())
    throw std::invalid_argument("detect_language: the model is English-only");
  Tensor features = model_->encode(mel);
  WhisperDecodeState state = model_->start(features, 1);
  Tensor logits = model_->decode({{tokens_.sot}}, state);
  const float* x = logits.data<float>();
  const int64_t vocab = logits.dim(1);
  std::vector<std::pair<std::string, float>> out;
  float m = -INFINITY;
  for (size_t i = 0; i < tokens_.languages.size(); ++i)
    if (tokens_.languages[i] < vocab) m = std::max(m, x[tokens_.languages[i]]);
  double sum = 0;
  for (size_t i = 0; i < tokens_.languages.size(); ++i) {
    if (tokens_.languages[i] >= vocab) continue;
    float p = std::exp(x[tokens_.languages[i]] - m);
    sum += p;
    out.emplace_back(tokens_.language_codes[i], p);
  }
  for (auto& [code, p] : out) p = static_cast<float>(p / sum);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

Transcript Transcriber::transcribe(const std::vector<float>& samples,
                                   const TranscribeOptions& options) const {
  const WhisperSpec& spec = model_->spec();
  if (options.task != "transcribe" && options.task != "translate")
    throw std::invalid_argument("transcribe: unknown task '" + options.task +
                                "' (transcribe or translate)");
  if (options.beam_size > 1 && options.patience <= 0)
    throw std::invalid_argument("transcribe: patience must be > 0");
  Transcript out;
  out.duration = static_cast<double>(samples.size()) / kWhisperSampleRate;

  // Language (checked before any audio work).
  std::string language = options.language;
  std::transform(language.begin(), language.end(), language.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!spec.multilingual()) {
    if (!language.empty() && language != "en")
      throw std::invalid_argument("transcribe: the model is English-only; language '" +
                                  options.language + "' is not available");
    if (options.task == "translate")
      throw std::invalid_argument("transcribe: the model is English-only and cannot translate");
    language = "en";
    out.language_probability = 1.0f;
  } else if (!language.empty()) {
    out.language_probability = 1.0f;
  }
  auto known = [&](const std::string& code) {
    return std::find(tokens_.language_codes.begin(), tokens_.language_codes.end(), code) !=
           tokens_.language_codes.end();
  };
  if (!language.empty() && !known(language))
    throw std::invalid_argument("transcribe: unknown language '" + options.language + "'");
  Tensor mel = log_mel_spectrogram(samples, static_cast<int>(spec.n_mels), kWhisperChunkSamples);
  const int64_t content_frames = mel.dim(1) - kWhisperChunkFrames;
  if (language.empty()) {
    auto probs = detect_language(mel.slice(1, 0, kWhisperChunkFrames).contiguous());
    language = probs.front().first;
    out.language_probability = probs.front().second;
  }
  auto lang = std::find(tokens_.language_codes.begin(), tokens_.language_codes.end(), language);
  out.language = language;

  std::vector<int32_t> sot_sequence = {tokens_.sot};
  if (spec.multilingual()) {
    sot_sequence.push_back(tokens_.languages[lang - tokens_.language_codes.begin()]);
    sot_sequence.push_back(options.task == "translate" ? tokens_.translate : tokens_.transcribe);
  }
  std::vector<int32_t> prompt_tokens;
  if (!trimmed(options.initial_prompt).empty())
    prompt_tokens = tokenizer_.encode(" " + trimmed(options.initial_prompt), false).ids;

  whisper::WindowOptions base;
  base.beam_size = options.beam_size;
  base.best_of = options.best_of;
  base.patience = options.patience;
  base.length_penalty = options.length_penalty;
  base.timestamps = options.timestamps;
  base.n_text_ctx = static_cast<int>(spec.n_text_ctx);
  base.sample_len = base.n_text_ctx / 2;
  base.max_initial_timestamp_index =
      static_cast<int>(std::lround(1.0 / (static_cast<double>(kWhisperChunkSeconds) / spec.n_audio_ctx)));
  base.suppress_tokens = whisper::suppress_tokens(tokenizer_, tokens_);
  base.blank_tokens = tokenizer_.encode(" ", false).ids;
  base.blank_tokens.push_back(tokens_.eot);

  // The model behind the decoder's callbacks; the op report covers the first window's encode,
  // cross K/V and first decode step (later ones run the same ops).
  Tensor features;
  WhisperDecodeState state;
  double encode_ms = 0, decode_ms = 0;
  int64_t decode_steps = 0;
  whisper::WindowModel m;
  m.encode = [&](int64_t seek, int64_t frames) {
    auto t0 = std::chrono::steady_clock::now();
    features = model_->encode(mel_window(mel, seek, frames), options.backends,
                              out.report.ops.empty() ? &out.report : nullptr);
    encode_ms += ms_since(t0);
  };
  bool first_decode = true;
  m.start = [&] {
    RunReport start_report;
    state = model_->start(features, 1, options.backends, first_decode ? &start_report : nullptr);
    out.report.ops.insert(out.report.ops.end(), start_report.ops.begin(), start_report.ops.end());
  };
  m.step = [&](const std::vector<std::vector<int32_t>>& tokens) {
    auto t0 = std::chrono::steady_clock::now();
    RunReport step_report;
    Tensor logits = model_->decode(tokens, state, options.backends,
                                   first_decode ? &step_report : nullptr);
    if (first_decode) {
      out.report.ops.insert(out.report.ops.end(), step_report.ops.begin(), step_report.ops.end());
      first_decode = false;
    }
    decode_ms += ms_since(t0);
    ++decode_steps;
    return logits;
  };
  m.reorder = [&](const std::vector<int64_t>& source) { model_->reorder(state, source); };
  m.text = [&](const std::vector<int32_t>& ids) { return tokenizer_.decode(ids, true); };
  double last_speech_timestamp = 0;  // upstream's running end of speech, across windows
  if (options.word_timestamps) {
    if (spec.alignment_heads.empty())
      throw std::invalid_argument(
          "transcribe: word timestamps need the model's alignment heads, and this model names none "
          "(\"alignment_heads\" in its config.json or generation_config.json)");
    out.word_timestamps = true;
    m.words = [&](std::vector<TranscriptSegment>& segments, int64_t, int64_t frames) {
      std::vector<int32_t> text;
      for (const TranscriptSegment& seg : segments)
        for (int32_t id : seg.tokens)
          if (id < tokens_.eot) text.push_back(id);
      std::vector<whisper::WordTiming> alignment;
      if (!text.empty()) {  // upstream's find_alignment: one forward over the whole sequence
        std::vector<int32_t> seq = sot_sequence;
        seq.push_back(tokens_.no_timestamps);
        seq.insert(seq.end(), text.begin(), text.end());
        seq.push_back(tokens_.eot);
        Tensor logits;
        const Tensor scores =
            model_->cross_attention_scores(features, seq, spec.alignment_heads, &logits, options.backends);
        // Probability of each text token where it was predicted, over the text vocabulary (< eot).
        const int64_t sot_len = static_cast<int64_t>(sot_sequence.size()), vocab = logits.dim(1);
        std::vector<float> probs;
        for (size_t i = 0; i < text.size(); ++i) {
          const float* row = logits.data<float>() + (sot_len + static_cast<int64_t>(i)) * vocab;
          const float mx = *std::max_element(row, row + tokens_.eot);
          double sum = 0;
          for (int32_t v = 0; v < tokens_.eot; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
          probs.push_back(static_cast<float>(std::exp(static_cast<double>(row[text[i]] - mx)) / sum));
        }
        alignment = whisper::find_alignment(scores, sot_len, text, probs, frames, tokens_.eot, language,
                                            [&](const std::vector<int32_t>& ids) { return tokenizer_.decode(ids, false); });
      }
      whisper::add_word_timestamps(segments, std::move(alignment), tokens_.eot, options.prepend_punctuations,
                                   options.append_punctuations, last_speech_timestamp);
      double end = 0;
      if (whisper::segments_end(segments, end)) last_speech_timestamp = end;
    };
  }

  whisper::SeekResult r = whisper::transcribe_frames(content_frames, sot_sequence, prompt_tokens,
                                                     tokens_, options, base, m);
  std::vector<int32_t> text_ids;
  for (size_t i = r.initial_prompt_tokens; i < r.all_tokens.size(); ++i)
    if (r.all_tokens[i] < tokens_.eot) text_ids.push_back(r.all_tokens[i]);
  out.text = tokenizer_.decode(text_ids, true);
  out.segments = std::move(r.segments);
  out.windows = r.windows;
  out.decoded_tokens = r.decoded_tokens;
  out.encode_ms = r.windows > 0 ? encode_ms / static_cast<double>(r.windows) : 0;
  out.decode_ms = decode_steps > 0 ? decode_ms / static_cast<double>(decode_steps) : 0;
  return out;
}

}  // namespace xdna

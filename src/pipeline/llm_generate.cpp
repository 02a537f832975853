// The generation loop shared by every interface: prefill, then decode one token at a time,
// turning tokens into final text (UTF-8 complete, stop strings held back until decided).
#include <algorithm>
#include <chrono>
#include <span>
#include <stdexcept>

#include "pipeline/llm.h"

namespace xdna {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD: what decode gives for split bytes

// Text that becomes final as tokens arrive. Each step gets the decode of every generated token so
// far (decoding the whole sequence, not token by token, keeps SentencePiece spaces and byte
// fallback right) and releases the part that can no longer change or turn into a stop string.
class TextStream {
 public:
  explicit TextStream(const std::vector<std::string>& stops) : stops_(stops) {
    stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  }

  // The newly final text; `flush` = no more tokens will come. Sets stopped() on a stop string.
  std::string advance(const std::string& text, bool flush) {
    size_t end = text.size();
    // A multi-byte character split across tokens decodes as U+FFFD until its last byte arrives.
    if (!flush)
      while (end >= out_.size() + kReplacement.size() &&
             text.compare(end - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
        end -= kReplacement.size();
    // Text already released is final; decoding more tokens only appends to it. (Should a
    // decoder ever rewrite it, the new text continues from the same byte offset.)
    const size_t from = std::min(out_.size(), end);
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) {
      const size_t p = text.find(s, from);
      if (p != std::string::npos && p + s.size() <= end && p < cut) cut = p;
    }
    if (cut != std::string::npos) {
      stopped_ = true;
      end = cut;
    } else if (!flush) {  // hold back the longest tail that could still grow into a stop string
      for (size_t k = std::min(end - from, max_stop_len()); k > 0; --k) {
        const std::string_view tail(text.data() + end - k, k);
        if (std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) { return s.starts_with(tail); })) {
          end -= k;
          break;
        }
      }
    }
    std::string piece = text.substr(from, end - from);
    out_ += piece;
    return piece;
  }

  bool stopped() const { return stopped_; }
  const std::string& text() const { return out_; }

 private:
  size_t max_stop_len() const {
    size_t n = 0;
    for (const std::string& s : stops_) n = std::max(n, s.size());
    return n;
  }
  std::vector<std::string> stops_;
  std::string out_;
  bool stopped_ = false;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void append_report(RunReport& all, const RunReport& step) {
  all.ops.insert(all.ops.end(), step.ops.begin(), step.ops.end());
}

}  // namespace

GenerateResult generate(const LanguageModel& model, const GenerateRequest& request,
                        const std::function<bool(const GeneratedPiece&)>& on_piece) {
  validate(request.sampling);
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  const int64_t ctx = model.context_length();
  if (prompt_len == 0) throw std::invalid_argument("the prompt is empty: generation needs at least one token");
  if (prompt_len >= ctx)
    throw std::invalid_argument("the prompt is " + std::to_string(prompt_len) + " tokens but the context holds " +
                                std::to_string(ctx) + " (prompt and completion together; at least one "
                                "token must be left for the completion)");
  if (request.max_tokens < 0)
    throw std::invalid_argument("max_tokens " + std::to_string(request.max_tokens) + " is negative");
  const int64_t vocab = model.decoder().spec().vocab_size;
  for (size_t i = 0; i < request.prompt.size(); ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab)
      throw std::invalid_argument("prompt token " + std::to_string(i) + " (id " + std::to_string(request.prompt[i]) +
                                  ") is outside the vocabulary [0, " + std::to_string(vocab) + ")");

  // Generated tokens stop at max_tokens or where prompt + completion fill the context.
  int64_t limit = ctx - prompt_len;
  if (request.max_tokens > 0) limit = std::min(limit, request.max_tokens);

  GenerateResult result;
  result.prompt_tokens = prompt_len;
  const Decoder& decoder = model.decoder();
  const std::vector<int32_t>& stop_ids = model.stop_token_ids();
  DecoderState state = decoder.new_state(ctx);
  Sampler sampler(request.sampling);
  TextStream stream(request.stop);
  std::vector<int32_t> history = request.prompt;  // what the penalties count
  std::vector<int32_t> text_ids;                  // generated tokens that make text (no stop token)

  const auto t0 = std::chrono::steady_clock::now();
  auto t_decode = t0;
  DecoderStep step = decoder.forward(request.prompt, state, /*all_logits=*/false, request.backends);
  append_report(result.report, step.report);
  const auto emit = [&](const GeneratedPiece& p) { return !on_piece || on_piece(p); };
  for (;;) {
    const int64_t rows = step.logits.dim(0), width = step.logits.dim(1);  // the last row: the next token
    const std::span<const float> logits(step.logits.data<float>() + (rows - 1) * width, static_cast<size_t>(width));
    TokenChoice choice = sampler.sample(logits, history);
    if (result.tokens.empty()) {  // the first token ends the prefill phase
      result.prefill_ms = ms_since(t0);
      t_decode = std::chrono::steady_clock::now();
    }
    result.tokens.push_back(choice.id);
    history.push_back(choice.id);
    const bool at_limit = static_cast<int64_t>(result.tokens.size()) >= limit;

    if (std::find(stop_ids.begin(), stop_ids.end(), choice.id) != stop_ids.end()) {
      result.finish_reason = "stop";
      std::string rest = stream.advance(model.tokenizer().decode(text_ids, true), /*flush=*/true);
      if (!rest.empty()) emit({std::move(rest), TokenChoice{}});
      break;
    }
    text_ids.push_back(choice.id);
    if (request.logprobs) result.logprobs.push_back(choice);
    GeneratedPiece piece{stream.advance(model.tokenizer().decode(text_ids, true), at_limit), choice};
    if (at_limit && !stream.stopped()) result.finish_reason = "length";
    if (stream.stopped()) result.finish_reason = "stop";
    if (!emit(piece)) {
      result.finish_reason = "stop";  // the caller cancelled
      break;
    }
    if (!result.finish_reason.empty()) break;
    step = decoder.forward({choice.id}, state, /*all_logits=*/false, request.backends);
    append_report(result.report, step.report);
  }
  result.decode_ms = ms_since(t_decode);
  result.text = stream.text();
  result.completion_tokens = static_cast<int64_t>(result.tokens.size());
  return result;
}

}  // namespace xdna

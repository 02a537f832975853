// The generation loop shared by every interface: prefill, then decode one token at a time,
// turning tokens into final text (UTF-8 complete, stop strings held back until decided).
// GenerationStepper holds one generation's progress; generate() drives one alone.
#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <stdexcept>

#include "pipeline/llm.h"
#include "pipeline/llm_npu_fused.h"

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

struct GenerationStepper::Impl {
  Impl(const LanguageModel& m, const GenerateRequest& r, std::function<bool(const GeneratedPiece&)> cb)
      : model(m), request(r), on_piece(std::move(cb)), sampler(r.sampling), stream(r.stop),
        history(r.prompt), input(r.prompt) {}
  const LanguageModel& model;
  GenerateRequest request;
  std::function<bool(const GeneratedPiece&)> on_piece;
  int64_t limit = 0;  // generated tokens stop here (max_tokens or the context end)
  std::optional<DecoderState> state;
  std::unique_ptr<NpuSimFusedDecode::Sequence> fused;  // the fused decode's KV (request.fused_decode)
  bool released = false, done = false;
  Sampler sampler;
  TextStream stream;
  std::vector<int32_t> history;   // what the penalties count
  std::vector<int32_t> text_ids;  // generated tokens that make text (no stop token)
  std::vector<int32_t> input;     // the next decoder call's tokens
  GenerateResult result;
  std::chrono::steady_clock::time_point t0, t_decode;
};

GenerationStepper::GenerationStepper(const LanguageModel& model, const GenerateRequest& request,
                                     std::function<bool(const GeneratedPiece&)> on_piece) {
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
  impl_ = std::make_unique<Impl>(model, request, std::move(on_piece));
  // Generated tokens stop at max_tokens or where prompt + completion fill the context.
  impl_->limit = ctx - prompt_len;
  if (request.max_tokens > 0) impl_->limit = std::min(impl_->limit, request.max_tokens);
  impl_->result.prompt_tokens = prompt_len;
}

GenerationStepper::~GenerationStepper() = default;
GenerationStepper::GenerationStepper(GenerationStepper&&) noexcept = default;
GenerationStepper& GenerationStepper::operator=(GenerationStepper&&) noexcept = default;

const GenerateRequest& GenerationStepper::request() const { return impl_->request; }
const std::vector<int32_t>& GenerationStepper::next_input() const { return impl_->input; }
bool GenerationStepper::done() const { return impl_->done; }

DecoderState& GenerationStepper::state() {
  Impl& g = *impl_;
  if (g.released) throw std::logic_error("generation: the KV cache was already released");
  if (!g.state) {
    g.state = g.model.decoder().new_state(g.model.context_length());
    g.t0 = std::chrono::steady_clock::now();
  }
  return *g.state;
}

void GenerationStepper::release_state() {
  impl_->state.reset();
  impl_->fused.reset();
  impl_->released = true;
}

bool GenerationStepper::step() {
  Impl& g = *impl_;
  if (g.request.fused_decode && g.request.fused_decode->enabled() && !g.result.tokens.empty()) {
    // A decode token through npu-sim's fused plan; its cache starts from the prefill's K/V.
    if (!g.fused) g.fused = g.request.fused_decode->begin(state());
    RunReport report;
    const std::vector<float> logits = g.request.fused_decode->decode(*g.fused, g.input.at(0), report);
    return advance(logits, report);
  }
  const DecoderStep s = g.model.decoder().forward(g.input, state(), /*all_logits=*/false, g.request.backends);
  const int64_t rows = s.logits.dim(0), width = s.logits.dim(1);  // the last row: the next token
  return advance(std::span<const float>(s.logits.data<float>() + (rows - 1) * width, static_cast<size_t>(width)),
                 s.report);
}

bool GenerationStepper::advance(std::span<const float> logits, const RunReport& report) {
  Impl& g = *impl_;
  if (g.done) throw std::logic_error("generation: advance() after the end");
  append_report(g.result.report, report);
  GenerateResult& result = g.result;
  const auto emit = [&](const GeneratedPiece& p) { return !g.on_piece || g.on_piece(p); };
  TokenChoice choice = g.sampler.sample(logits, g.history);
  if (result.tokens.empty()) {  // the first token ends the prefill phase
    result.prefill_ms = ms_since(g.t0);
    g.t_decode = std::chrono::steady_clock::now();
  }
  result.tokens.push_back(choice.id);
  g.history.push_back(choice.id);
  const bool at_limit = static_cast<int64_t>(result.tokens.size()) >= g.limit;
  g.done = true;  // until the token turns out to continue the generation

  const std::vector<int32_t>& stop_ids = g.model.stop_token_ids();
  if (std::find(stop_ids.begin(), stop_ids.end(), choice.id) != stop_ids.end()) {
    result.finish_reason = "stop";
    std::string rest = g.stream.advance(g.model.tokenizer().decode(g.text_ids, true), /*flush=*/true);
    if (!rest.empty()) emit({std::move(rest), TokenChoice{}});
    return false;
  }
  g.text_ids.push_back(choice.id);
  if (g.request.sampling.logprobs) result.logprobs.push_back(choice);
  const int32_t id = choice.id;
  GeneratedPiece piece{g.stream.advance(g.model.tokenizer().decode(g.text_ids, true), at_limit), std::move(choice)};
  if (at_limit && !g.stream.stopped()) result.finish_reason = "length";
  if (g.stream.stopped()) result.finish_reason = "stop";
  if (!emit(piece)) {
    result.finish_reason = "stop";  // the caller cancelled
    return false;
  }
  if (!result.finish_reason.empty()) return false;
  g.input.assign(1, id);
  g.done = false;
  return true;
}

GenerateResult GenerationStepper::finish() {
  Impl& g = *impl_;
  GenerateResult result = std::move(g.result);
  if (!result.tokens.empty()) result.decode_ms = ms_since(g.t_decode);
  result.text = g.stream.text();
  result.completion_tokens = static_cast<int64_t>(result.tokens.size());
  release_state();
  return result;
}

GenerateResult generate(const LanguageModel& model, const GenerateRequest& request,
                        const std::function<bool(const GeneratedPiece&)>& on_piece) {
  GenerationStepper g(model, request, on_piece);
  while (g.step()) {
  }
  return g.finish();
}

}  // namespace xdna

// The LLM pipeline: Frontend (tokenizer + chat template) -> Decoder -> Head (sampler), and the
// generation loop every interface shares (npu generate, npu chat, /v1/completions,
// /v1/chat/completions).
//
//   auto lm = xdna::LanguageModel::load("model.gguf");     // or an HF dir, or a baked model
//   xdna::GenerateRequest req;
//   req.prompt = lm->tokenizer().encode(lm->render_chat(messages)).ids;
//   auto result = xdna::generate(*lm, req, [](const xdna::GeneratedPiece& p) {
//     fputs(p.text.c_str(), stdout); return true; });
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"
#include "models/decoder.h"
#include "pipeline/chat_template.h"
#include "pipeline/sampler.h"
#include "pipeline/tokenizer.h"

namespace xdna {

class NpuSimFusedDecode;  // llm_npu_fused.h

struct LoadOptions {
  int64_t context_length = 0;        // 0 = model maximum, capped by memory_budget_bytes
  uint64_t memory_budget_bytes = 0;  // for the KV cache; 0 = no cap
  // KV cache element type (f32, f16, bf16); unset = default_kv_dtype.
  std::optional<DType> kv_dtype;
};

// The KV cache type when none is chosen: f16, llama.cpp's default too. It holds half the bytes of
// f32, so decode attention streams half as much per token (K/V are widened in registers: faster
// than f32 from a few hundred positions on, docs/benchmarks-llm.md); logits stay within ~2e-3 of
// max|logit| of an f32 cache. `--kv-type f32` (config kv_type) keeps full precision.
DType default_kv_dtype();

class LanguageModel {
 public:
  // path: a GGUF file, a Hugging Face directory (config.json + safetensors + tokenizer.json
  // [+ tokenizer_config.json for the chat template]) or a baked model directory. Throws
  // std::runtime_error naming the path and what is missing or malformed.
  static std::unique_ptr<LanguageModel> load(const std::string& path, const LoadOptions& opts = {});

  const std::string& name() const { return name_; }
  const Decoder& decoder() const { return *decoder_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  bool has_chat_template() const { return chat_template_ != nullptr; }
  // Renders with the model's own template (bos/eos tokens filled in); throws if it has none.
  std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt = true) const;
  const std::vector<int32_t>& stop_token_ids() const { return stop_ids_; }
  bool add_bos() const { return add_bos_; }  // whether a plain-text prompt gets BOS prepended
  int64_t context_length() const { return context_length_; }

 private:
  LanguageModel() = default;
  std::string name_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::string bos_token_, eos_token_;
  std::vector<int32_t> stop_ids_;
  bool add_bos_ = false;
  int64_t context_length_ = 0;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;        // token ids (BOS included if wanted)
  SamplingParams sampling;
  int64_t max_tokens = 256;           // 0 = until the context is full
  std::vector<std::string> stop;      // stop strings (not included in the output)
  std::vector<Backend*> backends;     // empty = host
  // npu-sim: decode tokens through the fused plan (llm_npu_fused.h) when it is enabled(); the
  // prompt still runs on `backends`. Null = every step on `backends`. Only step() uses it.
  std::shared_ptr<NpuSimFusedDecode> fused_decode;
};

struct GeneratedPiece {
  std::string text;    // new text (UTF-8 complete: bytes of a split character wait for the rest)
  TokenChoice token;   // the token that completed it; id -1 for the final flush of held-back text
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop" (stop token or string) or "length"
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::vector<TokenChoice> logprobs;  // per generated token, when requested
  double prefill_ms = 0, decode_ms = 0;
  RunReport report;  // summed over steps: where each op ran
};

// A model argument as users give it: an existing path as is, else a name in the model store
// (`store_dir`, or the default store when empty; catalog aliases accepted). Throws
// std::runtime_error saying what was tried (and `npu model pull NAME` for a catalog model).
std::string resolve_model_path(const std::string& path_or_name, const std::string& store_dir = "");

// A prompt's token ids: BOS when the model wants one and the text does not already start with it
// (a rendered chat template usually does), then the text's ids with special-token text in it
// ("<|im_start|>", "<bos>") parsed as those tokens.
std::vector<int32_t> encode_prompt(const LanguageModel& model, const std::string& text);

// One generation advanced a token at a time: the sampler, stop tokens and strings, UTF-8
// hold-back, log-probs, max_tokens and the context end of generate(), with each decoder call
// left to whoever drives it. generate() runs one alone (step() until it returns false); the
// server's scheduler runs each prompt alone and the decode steps of many sequences together
// (Decoder::forward_batch), handing each its row of logits (advance()).
//
//   GenerationStepper g(model, request, on_piece);
//   while (g.step()) {}
//   GenerateResult r = g.finish();
class GenerationStepper {
 public:
  // Validates the request, throwing what generate() throws; allocates no KV cache yet.
  GenerationStepper(const LanguageModel& model, const GenerateRequest& request,
                    std::function<bool(const GeneratedPiece&)> on_piece = {});
  ~GenerationStepper();
  GenerationStepper(GenerationStepper&&) noexcept;
  GenerationStepper& operator=(GenerationStepper&&) noexcept;

  const GenerateRequest& request() const;
  // What the next decoder call runs on state(): the prompt first, then the last sampled token.
  const std::vector<int32_t>& next_input() const;
  // The sequence's decoder state. The first call allocates the KV cache and starts the clock
  // (prefill_ms runs from there to the first token). Throws std::logic_error once released.
  DecoderState& state();
  // Takes the logits of the decoder call on next_input() (the last row of [rows, vocab]: the
  // next token), samples, and calls on_piece with the text that became final. Returns false when
  // the generation has ended: a stop token or string, max_tokens, the context end, or on_piece
  // returning false (finish_reason "stop"). `report` (where the step's ops ran) is appended to
  // the result's. Throws std::logic_error when called after the end.
  bool advance(std::span<const float> logits, const RunReport& report);
  // Runs next_input() alone on the model's decoder (request.backends), then advance().
  bool step();
  bool done() const;
  // Frees the KV cache now (a finished or cancelled sequence leaving a batch).
  void release_state();
  // The result, complete once done(); frees the KV cache. Call once.
  GenerateResult finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs prefill then decode until a stop token, a stop string, max_tokens or the context end.
// on_piece is called as text becomes final (a stop string's prefix is held back until it is
// decided); returning false cancels (finish_reason "stop"). Throws std::invalid_argument when the
// prompt does not fit in the context (message states both lengths).
GenerateResult generate(const LanguageModel& model, const GenerateRequest& request,
                        const std::function<bool(const GeneratedPiece&)>& on_piece = {});

}  // namespace xdna

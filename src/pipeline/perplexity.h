// Perplexity of a language model on a text, the way llama.cpp's llama-perplexity measures it:
// the text's tokens are cut into non-overlapping windows of `context` tokens; each window runs
// from an empty KV cache with its first token replaced by BOS (when the model adds BOS), and only
// the second half of the window is scored, so every scored token sees at least context/2 tokens
// of its window. perplexity = exp(mean over scored tokens of -log p(token | window prefix)).
//
//   auto lm = xdna::LanguageModel::load("model.gguf");
//   auto ids = lm->tokenizer().encode(text, false).ids;
//   xdna::PerplexityResult r = xdna::perplexity(*lm, ids, {.context = 512});
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "pipeline/llm.h"

namespace xdna {

struct PerplexityOptions {
  int64_t context = 512;               // window length in tokens (even, >= 2)
  int64_t max_windows = 0;             // 0 = every whole window of the text
  std::vector<Backend*> backends;      // empty = host
  // Called after each window with (windows done, windows in all, perplexity so far).
  std::function<void(int64_t, int64_t, double)> progress;
};

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;                 // nats per scored token
  int64_t text_tokens = 0;             // tokens of the whole text
  int64_t windows = 0;
  int64_t scored_tokens = 0;           // windows x context/2
  std::vector<double> window_nll;      // mean nll of each window's scored half
};

// -log softmax(logits)[target], in double (log-sum-exp with the maximum subtracted).
double token_nll(const float* logits, int64_t vocab, int32_t target);

// Throws std::invalid_argument when context is odd, < 2 or beyond the model's context length, or
// when the text has fewer tokens than one window.
PerplexityResult perplexity(const LanguageModel& model, const std::vector<int32_t>& text_tokens,
                            const PerplexityOptions& opts = {});

}  // namespace xdna

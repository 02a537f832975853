#include "pipeline/perplexity.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace xdna {

double token_nll(const float* logits, int64_t vocab, int32_t target) {
  if (target < 0 || target >= vocab)
    throw std::invalid_argument("perplexity: token id " + std::to_string(target) +
                                " is outside the vocabulary of " + std::to_string(vocab));
  double max = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max = std::max(max, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  return max + std::log(sum) - double(logits[target]);
}

PerplexityResult perplexity(const LanguageModel& model, const std::vector<int32_t>& text_tokens,
                            const PerplexityOptions& opts) {
  const int64_t n = opts.context;
  if (n < 2 || n % 2 != 0)
    throw std::invalid_argument("perplexity: context " + std::to_string(n) + " must be even and >= 2");
  if (n > model.context_length())
    throw std::invalid_argument("perplexity: context " + std::to_string(n) +
                                " exceeds the model's context length of " +
                                std::to_string(model.context_length()));
  const int64_t total = static_cast<int64_t>(text_tokens.size());
  int64_t windows = total / n;
  if (windows == 0)
    throw std::invalid_argument("perplexity: the text has " + std::to_string(total) +
                                " tokens, fewer than one window of " + std::to_string(n));
  if (opts.max_windows > 0) windows = std::min(windows, opts.max_windows);

  const Decoder& dec = model.decoder();
  const int64_t vocab = dec.spec().vocab_size;
  const int32_t bos = dec.spec().bos_token_id;
  const int64_t half = n / 2;
  PerplexityResult r;
  r.text_tokens = total;
  r.windows = windows;
  double sum = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> ids(text_tokens.begin() + w * n, text_tokens.begin() + (w + 1) * n);
    if (model.add_bos() && bos >= 0) ids[0] = bos;
    DecoderState state = dec.new_state(n);
    // First half: only its last row's logits are needed (they predict ids[half]). Second half
    // without its last token: every row's logits (row j predicts ids[half + 1 + j]).
    const Tensor last = dec.forward({ids.begin(), ids.begin() + half}, state, false, opts.backends).logits.contiguous();
    double window_sum = token_nll(last.data<float>() + (last.dim(0) - 1) * vocab, vocab, ids[half]);
    if (half > 1) {
      const Tensor all = dec.forward({ids.begin() + half, ids.end() - 1}, state, true, opts.backends).logits.contiguous();
      const float* rows = all.data<float>();
      for (int64_t j = 0; j + 1 < half; ++j) window_sum += token_nll(rows + j * vocab, vocab, ids[half + 1 + j]);
    }
    r.window_nll.push_back(window_sum / double(half));
    sum += window_sum;
    r.scored_tokens += half;
    if (opts.progress) opts.progress(w + 1, windows, std::exp(sum / double(r.scored_tokens)));
  }
  r.mean_nll = sum / double(r.scored_tokens);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace xdna

// Next-token selection from logits: greedy, temperature, top-k, top-p, min-p, repetition /
// presence / frequency penalties, seeded (same seed and inputs, same tokens), with log-probs.
//
// Order (as in llama.cpp / transformers): penalties on the raw logits -> temperature -> top-k ->
// top-p -> min-p -> draw. temperature == 0 is greedy (argmax after penalties). Log-probs are
// reported from the model's distribution after penalties, before temperature and truncation
// (OpenAI reports the model's log-probs).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace xdna {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF/llama.cpp form: logit > 0 ? /r : *r, for seen tokens
  float presence_penalty = 0.0f;    // OpenAI form: - presence * [count > 0] - frequency * count
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  int32_t top_logprobs = 0;  // 0..20 alternatives to report per token
  // Fill TokenChoice::logprob (a log-softmax over the whole vocabulary every token) and report the
  // chosen tokens in GenerateResult::logprobs. Off with top_logprobs 0 skips the log-softmax
  // (logprob stays 0); the chosen tokens are the same either way.
  bool logprobs = false;
};

// The index of the first largest value (std::max_element's answer for NaN-free input; NaNs are
// never chosen, and 0 when nothing is above -inf), in one pass of AVX-512 or AVX2 (active_isa())
// compares: lanes each keep their first maximum and its index, then merge (largest value, smallest
// index). Greedy decoding needs no softmax, only this.
int32_t first_argmax(std::span<const float> v);

// Throws std::invalid_argument naming the field that is out of range.
void validate(const SamplingParams& p);

struct TokenChoice {
  int32_t id = -1;
  float logprob = 0.0f;                          // of the chosen token
  std::vector<std::pair<int32_t, float>> top;    // top_logprobs alternatives, best first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // history: the ids the penalties count (prompt + generated so far, as the caller chooses).
  TokenChoice sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  void add_top_logprobs(TokenChoice& choice, std::span<const float> adjusted, float log_z) const;
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
  std::vector<float> adjusted_;  // the penalised logits, when there are penalties
};

}  // namespace xdna

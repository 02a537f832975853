// Sampler: penalties on the raw logits, log-probs from those, then temperature -> top-k -> top-p
// -> min-p -> one draw from the kept candidates. The draw uses the top 53 bits of mt19937_64
// (not std::uniform_real_distribution, whose output differs between standard libraries), so a
// seed gives the same tokens everywhere.
#include "pipeline/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/cpu.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define XDNA_ARGMAX_SIMD 1
#endif

namespace xdna {

void validate(const SamplingParams& p) {
  auto bad = [](const char* field, const std::string& rule, double v) {
    throw std::invalid_argument(std::string("sampling parameter ") + field + " = " + std::to_string(v) +
                                " is out of range: " + rule);
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0) bad("temperature", "must be >= 0", p.temperature);
  if (p.top_k < 0) bad("top_k", "must be >= 0 (0 = off)", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) bad("top_p", "must be in (0, 1]", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) bad("min_p", "must be in [0, 1]", p.min_p);
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
    bad("repetition_penalty", "must be > 0 (1 = off)", p.repetition_penalty);
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    bad("presence_penalty", "must be in [-2, 2]", p.presence_penalty);
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    bad("frequency_penalty", "must be in [-2, 2]", p.frequency_penalty);
  if (p.top_logprobs < 0 || p.top_logprobs > 20) bad("top_logprobs", "must be in [0, 20]", p.top_logprobs);
}

namespace {

// The merge every path ends with: of lane maxima `best` (at[j] < 0: the lane saw nothing above
// -inf), the largest value at its smallest index; then the tail x[from, n) in order.
int32_t merge_lanes(const float* best, const int32_t* at, int lanes, const float* x, size_t from, size_t n) {
  int32_t r = -1;
  float m = -INFINITY;
  for (int j = 0; j < lanes; j++)
    if (at[j] >= 0 && (r < 0 || best[j] > m || (best[j] == m && at[j] < r))) m = best[j], r = at[j];
  for (size_t i = from; i < n; i++)  // later indices: only a strictly larger value wins
    if (x[i] > m) m = x[i], r = static_cast<int32_t>(i);
  return r < 0 ? 0 : r;  // every value -inf (or NaN): index 0, as std::max_element
}

int32_t first_argmax_scalar(const float* x, size_t n) {
  constexpr int L = 16;
  float best[L];
  int32_t at[L];
  for (int j = 0; j < L; j++) best[j] = -INFINITY, at[j] = -1;
  size_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; j++)
      if (x[i + j] > best[j]) best[j] = x[i + j], at[j] = static_cast<int32_t>(i + j);
  return merge_lanes(best, at, L, x, i, n);
}

#ifdef XDNA_ARGMAX_SIMD
// 4 accumulators of 16 lanes (64 values a step, independent compare chains). The ordered compare
// (_CMP_GT_OQ) is false for NaN, as `>` is in the scalar path, so NaNs are never chosen.
__attribute__((target("avx512f"))) int32_t first_argmax_avx512(const float* x, size_t n) {
  constexpr int A = 4, W = 16;
  __m512 best[A];
  __m512i at[A], idx[A];
  const __m512i step = _mm512_set1_epi32(A * W);
  for (int a = 0; a < A; a++) {
    best[a] = _mm512_set1_ps(-INFINITY);
    at[a] = _mm512_set1_epi32(-1);
    idx[a] = _mm512_add_epi32(_mm512_set1_epi32(a * W),
                              _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  size_t i = 0;
  for (; i + A * W <= n; i += A * W)
    for (int a = 0; a < A; a++) {
      const __m512 v = _mm512_loadu_ps(x + i + a * W);
      const __mmask16 more = _mm512_cmp_ps_mask(v, best[a], _CMP_GT_OQ);
      best[a] = _mm512_mask_mov_ps(best[a], more, v);
      at[a] = _mm512_mask_mov_epi32(at[a], more, idx[a]);
      idx[a] = _mm512_add_epi32(idx[a], step);
    }
  alignas(64) float b[A * W];
  alignas(64) int32_t t[A * W];
  for (int a = 0; a < A; a++) {
    _mm512_store_ps(b + a * W, best[a]);
    _mm512_store_si512(t + a * W, at[a]);
  }
  return merge_lanes(b, t, A * W, x, i, n);
}

__attribute__((target("avx2"))) int32_t first_argmax_avx2(const float* x, size_t n) {
  constexpr int A = 4, W = 8;
  __m256 best[A];
  __m256i at[A], idx[A];
  const __m256i step = _mm256_set1_epi32(A * W);
  for (int a = 0; a < A; a++) {
    best[a] = _mm256_set1_ps(-INFINITY);
    at[a] = _mm256_set1_epi32(-1);
    idx[a] = _mm256_add_epi32(_mm256_set1_epi32(a * W), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  size_t i = 0;
  for (; i + A * W <= n; i += A * W)
    for (int a = 0; a < A; a++) {
      const __m256 v = _mm256_loadu_ps(x + i + a * W);
      const __m256 more = _mm256_cmp_ps(v, best[a], _CMP_GT_OQ);
      best[a] = _mm256_blendv_ps(best[a], v, more);
      at[a] = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(at[a]), _mm256_castsi256_ps(idx[a]), more));
      idx[a] = _mm256_add_epi32(idx[a], step);
    }
  alignas(32) float b[A * W];
  alignas(32) int32_t t[A * W];
  for (int a = 0; a < A; a++) {
    _mm256_store_ps(b + a * W, best[a]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(t + a * W), at[a]);
  }
  return merge_lanes(b, t, A * W, x, i, n);
}
#endif

}  // namespace

// Every lane keeps the first maximum of the indices it sees, and the merge takes the largest
// value at its smallest index: the first maximum overall, however the indices are dealt to lanes.
int32_t first_argmax(std::span<const float> v) {
#ifdef XDNA_ARGMAX_SIMD
  switch (active_isa()) {
    case Isa::Avx512: return first_argmax_avx512(v.data(), v.size());
    case Isa::Avx2: return first_argmax_avx2(v.data(), v.size());
    case Isa::Scalar: break;
  }
#endif
  return first_argmax_scalar(v.data(), v.size());
}

Sampler::Sampler(const SamplingParams& params) : p_(params), rng_(params.seed) { validate(params); }

namespace {

// Throws unless every logit is finite or -inf (a masked token) and at least one is finite. The
// scan tests the bit patterns with integer ops and no branch, which the compiler vectorises; the
// message's index is looked up only on failure.
void check_logits(std::span<const float> logits) {
  constexpr uint32_t kInf = 0x7f800000u;  // +inf; with the sign bit cleared: |x| == inf
  uint32_t bad = 0, finite = 0;
  for (const float x : logits) {
    const uint32_t bits = std::bit_cast<uint32_t>(x), magnitude = bits & 0x7fffffffu;
    bad |= (magnitude > kInf) | (bits == kInf);  // NaN or +inf
    finite |= magnitude < kInf;
  }
  if (bad)
    for (size_t i = 0; i < logits.size(); i++)
      if (std::isnan(logits[i]) || logits[i] == INFINITY)
        throw std::invalid_argument("sampler: logits[" + std::to_string(i) + "] is " +
                                    (std::isnan(logits[i]) ? "NaN" : "+inf"));
  if (!finite) throw std::invalid_argument("sampler: every logit is -inf");
}

}  // namespace

TokenChoice Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const size_t n = logits.size();
  if (n == 0) throw std::invalid_argument("sampler: logits are empty");
  // -inf masks a token; NaN or +inf means the model output is broken.
  check_logits(logits);

  // Penalties, once per distinct token of the history (count = its occurrences), on a copy of
  // the logits; without penalties the logits are read as they are.
  const bool penalise = p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  std::span<const float> adjusted = logits;
  if (penalise && !history.empty()) {
    adjusted_.assign(logits.begin(), logits.end());
    adjusted = adjusted_;
    std::vector<int32_t> ids(history.begin(), history.end());
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) j++;
      const int32_t id = ids[i];
      if (id < 0 || static_cast<size_t>(id) >= n)
        throw std::invalid_argument("sampler: history token " + std::to_string(id) + " is outside the vocabulary of " +
                                    std::to_string(n));
      float& l = adjusted_[id];
      if (std::isfinite(l)) {
        l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
        l -= static_cast<float>(j - i) * p_.frequency_penalty + p_.presence_penalty;
      }
      i = j;
    }
  }

  // Log-softmax of the penalised logits (the model's distribution, as OpenAI reports it), only
  // when log-probs are reported: nothing below chooses a token from it.
  const size_t argmax = static_cast<size_t>(first_argmax(adjusted));
  const float max_l = adjusted[argmax];
  const bool report = p_.logprobs || p_.top_logprobs > 0;
  float log_z = 0.0f;
  if (report) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += std::exp(static_cast<double>(adjusted[i]) - max_l);
    log_z = max_l + static_cast<float>(std::log(sum));
  }

  TokenChoice choice;
  if (p_.temperature == 0.0f) {
    choice.id = static_cast<int32_t>(argmax);
  } else {
    // Candidates by scaled logit, best first (only as many sorted as top-k needs).
    scratch_.clear();
    for (size_t i = 0; i < n; i++)
      if (std::isfinite(adjusted[i])) scratch_.emplace_back(adjusted[i] / p_.temperature, static_cast<int32_t>(i));
    auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    if (p_.top_k == 0 && p_.top_p >= 1.0f) {
      // No ranking needed: min-p is a threshold on exp(l - l_max); draw in id order.
      float top = -INFINITY;
      for (const auto& c : scratch_) top = std::max(top, c.first);
      double total = 0;
      size_t kept = 0;
      for (const auto& c : scratch_) {
        double pr = std::exp(static_cast<double>(c.first) - top);
        if (pr >= p_.min_p) {
          scratch_[kept++] = {static_cast<float>(pr), c.second};
          total += pr;
        }
      }
      const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
      double acc = 0;
      choice.id = scratch_[kept - 1].second;
      for (size_t i = 0; i < kept; i++) {
        acc += scratch_[i].first;
        if (u < acc) {
          choice.id = scratch_[i].second;
          break;
        }
      }
      if (report) choice.logprob = adjusted[choice.id] - log_z;
      add_top_logprobs(choice, adjusted, log_z);
      return choice;
    }
    size_t keep = scratch_.size();
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) keep = p_.top_k;
    std::partial_sort(scratch_.begin(), scratch_.begin() + keep, scratch_.end(), better);
    scratch_.resize(keep);

    // Probabilities of the kept candidates (top-p works on the renormalised top-k set).
    const float top = scratch_[0].first;
    std::vector<double> prob(keep);
    double total = 0;
    for (size_t i = 0; i < keep; i++) total += prob[i] = std::exp(static_cast<double>(scratch_[i].first) - top);
    if (p_.top_p < 1.0f) {
      double cum = 0;
      size_t k = 0;
      while (k < keep) {
        cum += prob[k++] / total;
        if (cum >= p_.top_p) break;
      }
      keep = k;
    }
    if (p_.min_p > 0.0f) {  // p_i >= min_p * p_max  <=>  exp(l_i - l_max) >= min_p
      size_t k = 1;
      while (k < keep && prob[k] >= p_.min_p) k++;
      keep = k;
    }
    total = 0;
    for (size_t i = 0; i < keep; i++) total += prob[i];
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
    double acc = 0;
    size_t pick = keep - 1;
    for (size_t i = 0; i < keep; i++) {
      acc += prob[i];
      if (u < acc) {
        pick = i;
        break;
      }
    }
    choice.id = scratch_[pick].second;
  }
  if (report) choice.logprob = adjusted[choice.id] - log_z;
  add_top_logprobs(choice, adjusted, log_z);
  return choice;
}

void Sampler::add_top_logprobs(TokenChoice& choice, std::span<const float> adjusted, float log_z) const {
  const size_t n = adjusted.size();
  if (p_.top_logprobs > 0) {
    std::vector<std::pair<float, int32_t>> best;
    best.reserve(n);
    for (size_t i = 0; i < n; i++) best.emplace_back(adjusted[i], static_cast<int32_t>(i));
    const size_t k = std::min<size_t>(p_.top_logprobs, n);
    std::partial_sort(best.begin(), best.begin() + k, best.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (size_t i = 0; i < k; i++) choice.top.emplace_back(best[i].second, best[i].first - log_z);
  }
}

}  // namespace xdna

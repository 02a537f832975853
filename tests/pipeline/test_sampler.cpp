// Sampler: greedy, seeding, the exact candidate sets of top-k / top-p / min-p, temperature's effect
// on the empirical distribution, penalties and log-probs against hand-computed values, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include "core/cpu.h"
#include "pipeline/sampler.h"

using xdna::Sampler;
using xdna::SamplingParams;

namespace {

std::vector<float> log_probs(std::initializer_list<double> p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

std::set<int32_t> drawn(const SamplingParams& p, const std::vector<float>& logits, int n = 3000) {
  Sampler s(p);
  std::set<int32_t> ids;
  for (int i = 0; i < n; i++) ids.insert(s.sample(logits, {}).id);
  return ids;
}

SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 7;
  return p;
}

}  // namespace

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(params(0.0f));
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  EXPECT_EQ(s.sample(logits, {}).id, 1);
  std::vector<float> tie = {3.0f, 1.0f, 3.0f};
  EXPECT_EQ(s.sample(tie, {}).id, 0);  // first of equal maxima
  std::vector<float> masked = {-INFINITY, -5.0f, -INFINITY};
  EXPECT_EQ(s.sample(masked, {}).id, 1);
}

TEST(Sampler, SameSeedSameSequenceOtherSeedDiffers) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); i++) logits[i] = static_cast<float>(std::sin(i * 1.7));
  auto run = [&](uint64_t seed) {
    SamplingParams p = params(1.0f, 0, 0.95f);
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> seq;
    for (int i = 0; i < 200; i++) seq.push_back(s.sample(logits, seq).id);
    return seq;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, TopKKeepsExactlyTheKBest) {
  std::vector<float> logits = {1.0f, 5.0f, 2.0f, 4.0f, 3.0f};
  EXPECT_EQ(drawn(params(1.0f, 2), logits), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(drawn(params(1.0f, 1), logits), (std::set<int32_t>{1}));
  EXPECT_EQ(drawn(params(1.0f, 0), logits), (std::set<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  auto logits = log_probs({0.5, 0.3, 0.15, 0.05});
  EXPECT_EQ(drawn(params(1.0f, 0, 0.45f), logits), (std::set<int32_t>{0}));
  EXPECT_EQ(drawn(params(1.0f, 0, 0.75f), logits), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(drawn(params(1.0f, 0, 0.83f), logits), (std::set<int32_t>{0, 1, 2}));
  // After top-k = 3 the kept probabilities renormalise (0.5/0.95 + 0.3/0.95 = 0.842 >= 0.83).
  EXPECT_EQ(drawn(params(1.0f, 3, 0.83f), logits), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfBest) {
  auto logits = log_probs({0.05, 0.5, 0.3, 0.15});
  EXPECT_EQ(drawn(params(1.0f, 0, 1.0f, 0.25f), logits), (std::set<int32_t>{1, 2, 3}));  // p >= 0.125
  EXPECT_EQ(drawn(params(1.0f, 0, 1.0f, 0.5f), logits), (std::set<int32_t>{1, 2}));      // p >= 0.25
  EXPECT_EQ(drawn(params(1.0f, 2, 1.0f, 0.25f), logits), (std::set<int32_t>{1, 2}));     // with top-k
  EXPECT_EQ(drawn(params(1.0f, 0, 1.0f, 1.0f), logits), (std::set<int32_t>{1}));
}

TEST(Sampler, TemperatureScalesTheDistribution) {
  // Two tokens, logits 0 and 1: P(1) = 1 / (1 + exp(-1 / T)).
  std::vector<float> logits = {0.0f, 1.0f};
  const int n = 20000;
  for (float t : {0.5f, 1.0f, 2.0f}) {
    Sampler s(params(t));
    int ones = 0;
    for (int i = 0; i < n; i++) ones += s.sample(logits, {}).id;
    double expect = 1.0 / (1.0 + std::exp(-1.0 / t));
    double sigma = std::sqrt(expect * (1 - expect) / n);
    EXPECT_NEAR(static_cast<double>(ones) / n, expect, 5 * sigma) << "temperature " << t;
  }
  // Three tokens: chi-square of the counts against softmax(logits / T) (2 degrees of freedom;
  // 13.8 is the 0.999 quantile).
  std::vector<float> three = {0.0f, 0.5f, 1.5f};
  for (float t : {0.7f, 1.5f}) {
    Sampler s(params(t));
    int counts[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) counts[s.sample(three, {}).id]++;
    double z = 0, p[3];
    for (int k = 0; k < 3; k++) z += p[k] = std::exp(three[k] / t);
    double chi2 = 0;
    for (int k = 0; k < 3; k++) {
      double e = n * p[k] / z;
      chi2 += (counts[k] - e) * (counts[k] - e) / e;
    }
    EXPECT_LT(chi2, 13.8) << "temperature " << t;
  }
}

TEST(Sampler, PenaltiesAndLogprobsMatchHandComputedValues) {
  SamplingParams p = params(0.0f);
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.top_logprobs = 4;
  Sampler s(p);
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 2.2f};
  std::vector<int32_t> history = {0, 0, 1, 3};
  // token 0: 2 / 2 - 2 * 0.25 - 0.5 = 0; token 1: -1 * 2 - 0.25 - 0.5 = -2.75;
  // token 2: unseen, 0.5; token 3: 2.2 / 2 - 0.25 - 0.5 = 0.35.
  const double adjusted[4] = {0.0, -2.75, 0.5, 0.35};
  double z = 0;
  for (double a : adjusted) z += std::exp(a);
  auto c = s.sample(logits, history);
  EXPECT_EQ(c.id, 2);  // the penalties moved the argmax from token 3 to token 2
  EXPECT_NEAR(c.logprob, adjusted[2] - std::log(z), 1e-5);
  ASSERT_EQ(c.top.size(), 4u);
  const int order[4] = {2, 3, 0, 1};
  for (int k = 0; k < 4; k++) {
    EXPECT_EQ(c.top[k].first, order[k]);
    EXPECT_NEAR(c.top[k].second, adjusted[order[k]] - std::log(z), 1e-5);
  }
  // Without history nothing changes.
  auto plain = s.sample(logits, {});
  EXPECT_EQ(plain.id, 3);
}

TEST(Sampler, LogprobsAreOfTheModelDistributionNotTheTruncatedOne) {
  SamplingParams p = params(0.5f, 1);
  p.top_logprobs = 2;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0);
  auto c = s.sample(logits, {});
  EXPECT_EQ(c.id, 1);
  EXPECT_NEAR(c.logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(c.top.size(), 2u);
  EXPECT_EQ(c.top[0].first, 1);
  EXPECT_EQ(c.top[1].first, 2);
  EXPECT_GT(c.top[0].second, c.top[1].second);
}

TEST(Sampler, ValidateNamesTheField) {
  auto rejects = [](SamplingParams p, const char* field) {
    try {
      xdna::validate(p);
      ADD_FAILURE() << "accepted bad " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_THROW(Sampler{p}, std::invalid_argument);
  };
  SamplingParams ok;
  EXPECT_NO_THROW(xdna::validate(ok));
  SamplingParams p;
  p = ok; p.temperature = -0.1f; rejects(p, "temperature");
  p = ok; p.temperature = NAN; rejects(p, "temperature");
  p = ok; p.top_k = -1; rejects(p, "top_k");
  p = ok; p.top_p = 0.0f; rejects(p, "top_p");
  p = ok; p.top_p = 1.5f; rejects(p, "top_p");
  p = ok; p.min_p = -0.1f; rejects(p, "min_p");
  p = ok; p.min_p = 1.1f; rejects(p, "min_p");
  p = ok; p.repetition_penalty = 0.0f; rejects(p, "repetition_penalty");
  p = ok; p.presence_penalty = 2.5f; rejects(p, "presence_penalty");
  p = ok; p.frequency_penalty = -3.0f; rejects(p, "frequency_penalty");
  p = ok; p.top_logprobs = 21; rejects(p, "top_logprobs");
}

TEST(Sampler, BadLogitsAndHistoryAreErrors) {
  Sampler s(params(1.0f));
  std::vector<float> nan_logits = {0.0f, 1.0f, NAN};
  try {
    s.sample(nan_logits, {});
    ADD_FAILURE() << "NaN accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("logits[2] is NaN"), std::string::npos) << e.what();
  }
  std::vector<float> inf_logits = {INFINITY, 0.0f};
  EXPECT_THROW(s.sample(inf_logits, {}), std::invalid_argument);
  std::vector<float> all_masked = {-INFINITY, -INFINITY};
  EXPECT_THROW(s.sample(all_masked, {}), std::invalid_argument);
  EXPECT_THROW(s.sample(std::vector<float>{}, {}), std::invalid_argument);
  SamplingParams p = params(1.0f);
  p.repetition_penalty = 1.1f;
  Sampler pen(p);
  std::vector<float> logits = {0.0f, 1.0f};
  std::vector<int32_t> bad_history = {5};
  EXPECT_THROW(pen.sample(logits, bad_history), std::invalid_argument);
}

// The validity scan (vectorised) reports the first NaN or +inf wherever it sits in a long row,
// and -inf (a masked token) alone is not an error while one finite logit remains.
TEST(Sampler, FirstBadLogitIsReportedAnywhere) {
  Sampler s(params(0.0f));
  const auto message = [&](const std::vector<float>& v) {
    try {
      s.sample(v, {});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::vector<float> v(1000, -INFINITY);
  v[640] = 1.0f;
  EXPECT_EQ(message(v), "(accepted)");
  EXPECT_EQ(s.sample(v, {}).id, 640);
  v[999] = NAN;
  EXPECT_NE(message(v).find("logits[999] is NaN"), std::string::npos) << message(v);
  v[517] = INFINITY;
  EXPECT_NE(message(v).find("logits[517] is +inf"), std::string::npos) << message(v);
  v[3] = -NAN;
  EXPECT_NE(message(v).find("logits[3] is NaN"), std::string::npos) << message(v);
  std::vector<float> masked(1000, -INFINITY);
  EXPECT_NE(message(masked).find("every logit is -inf"), std::string::npos);
}

TEST(Sampler, MaskedTokensAreNeverDrawn) {
  std::vector<float> logits = {0.0f, -INFINITY, 0.0f, -INFINITY};
  EXPECT_EQ(drawn(params(1.0f), logits, 500), (std::set<int32_t>{0, 2}));
  EXPECT_EQ(drawn(params(1.0f, 0, 0.9f), logits, 500), (std::set<int32_t>{0, 2}));
}

// first_argmax against std::max_element (the first largest value): every length around the 16-lane
// step, the maximum at every position, ties (several copies of the maximum, in several lanes),
// -inf entries and an all -inf row, and a large random vocabulary.
TEST(Sampler, FirstArgmaxMatchesMaxElement) {
  auto expect = [](const std::vector<float>& v) {
    const auto want = static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
    ASSERT_EQ(xdna::first_argmax(v), want) << "n=" << v.size();
  };
  for (size_t n = 1; n <= 50; n++)
    for (size_t at = 0; at < n; at++) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; i++) v[i] = static_cast<float>((i * 7) % 5) - 10.0f;
      v[at] = 3.0f;
      expect(v);
      if (at + 17 < n) v[at + 17] = 3.0f;  // a later tie in another lane
      if (at >= 5) v[at - 5] = 3.0f;       // an earlier tie
      expect(v);
      v[at] = -INFINITY;
      expect(v);
    }
  expect(std::vector<float>(37, -INFINITY));
  std::vector<float> big(262144);
  uint32_t s = 1;
  for (auto& x : big) x = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) / 65536.0f;
  expect(big);
  big[200000] = big[100] = 1e9f;
  expect(big);
}

// Every instruction-set path (scalar, AVX2, AVX-512: those this CPU has) gives the same index:
// the first maximum (ties across lanes and accumulators, at every offset around the 64-value
// step), NaNs never chosen wherever they sit (before, after, in place of the maximum), and 0 when
// nothing is above -inf.
TEST(Sampler, FirstArgmaxIsTheSameOnEveryIsa) {
  const xdna::Isa best = xdna::active_isa();
  std::vector<xdna::Isa> isas = {xdna::Isa::Scalar};
  if (best >= xdna::Isa::Avx2) isas.push_back(xdna::Isa::Avx2);
  if (best >= xdna::Isa::Avx512) isas.push_back(xdna::Isa::Avx512);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto check = [&](const std::vector<float>& v, int32_t want) {
    for (xdna::Isa isa : isas) {
      xdna::force_isa(isa);
      const int32_t got = xdna::first_argmax(v);
      xdna::force_isa(best);
      ASSERT_EQ(got, want) << xdna::isa_name(isa) << " n=" << v.size();
    }
  };
  for (size_t n : {1, 7, 63, 64, 65, 130, 200}) {
    for (size_t at = 0; at < n; at += (n > 70 ? 3 : 1)) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; i++) v[i] = static_cast<float>((i * 11) % 7) - 10.0f;
      v[at] = 2.0f;
      check(v, static_cast<int32_t>(at));
      if (at + 33 < n) v[at + 33] = 2.0f;  // a later tie in another accumulator
      if (at + 1 < n) v[at + 1] = nan;      // NaN next to the maximum
      if (at >= 3) v[at - 3] = nan;         // and before it
      check(v, static_cast<int32_t>(at));
      v[at] = nan;  // the maximum replaced by NaN: the later tie, else the next largest
      std::vector<float> clean = v;
      for (float& x : clean) if (std::isnan(x)) x = -INFINITY;
      check(v, static_cast<int32_t>(std::max_element(clean.begin(), clean.end()) - clean.begin()));
    }
  }
  check(std::vector<float>(100, nan), 0);
  std::vector<float> masked(100, -INFINITY);
  masked[70] = nan;
  check(masked, 0);
  masked[90] = -1e30f;
  check(masked, 90);
  std::vector<float> zeros(80, 0.0f);
  zeros[5] = -0.0f;  // -0 == +0: the first of them
  check(zeros, 0);
}

// logprobs = false (no log-probs reported) skips the vocabulary log-softmax: the same seed draws
// the same tokens on every sampling path (greedy, min-p only, top-k / top-p, penalties) and the
// logprob is left 0; with it on the logprob is the log-softmax of the penalised logits.
TEST(Sampler, SkippingLogprobsKeepsTheTokens) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); i++) logits[i] = std::sin(0.37f * float(i)) * 4.0f;
  const std::vector<int32_t> history = {3, 5, 5, 998};
  for (SamplingParams p : {params(0.0f), params(0.8f, 0, 1.0f, 0.05f), params(0.8f, 40, 0.95f, 0.05f),
                           params(1.2f, 0, 0.9f)}) {
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.2f;
    p.logprobs = true;
    SamplingParams off = p;
    off.logprobs = false;
    Sampler with(p), without(off);
    for (int i = 0; i < 200; i++) {
      const xdna::TokenChoice a = with.sample(logits, history), b = without.sample(logits, history);
      ASSERT_EQ(a.id, b.id) << "draw " << i << " temperature " << p.temperature;
      EXPECT_EQ(b.logprob, 0.0f);
      EXPECT_LT(a.logprob, 0.0f);
      EXPECT_TRUE(b.top.empty());
    }
  }
  // the reported value: log-softmax of the logits (no penalties here)
  SamplingParams g = params(0.0f);
  g.logprobs = true;
  Sampler s(g);
  const std::vector<float> l = log_probs({0.1, 0.6, 0.3});
  EXPECT_NEAR(s.sample(l, {}).logprob, std::log(0.6), 1e-6);
}

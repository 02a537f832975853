// Decode-shaped attention (a few query rows over a long cache): the key-split, head-grouped path
// must match a plain per-head softmax reference, with GQA, windows, soft-cap and masks, at every
// thread count (the split depends on it).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "host/attention.h"

#include "random_tensor.h"

namespace xdna {
namespace {

using test::random_tensor;

// Straightforward reference: per query row and head, scores over the visible keys, softmax, sum.
std::vector<float> reference(const Tensor& q, const Tensor& k, const Tensor& v, const host::AttentionParams& p,
                             const Tensor* mask) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), S = k.dim(0), Hkv = k.dim(1), Dv = v.dim(2);
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(D));
  std::vector<float> y(T * Hq * Dv, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / (Hq / Hkv), pos = p.q_offset + t;
      std::vector<double> s(S, -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        if (p.causal && j > pos) continue;
        if (p.window > 0 && (pos - j >= p.window || (!p.causal && j - pos >= p.window))) continue;
        double d = 0;
        for (int64_t c = 0; c < D; ++c) d += double(q.data<float>()[(t * Hq + h) * D + c]) * k.data<float>()[(j * Hkv + kh) * D + c];
        d *= scale;
        if (p.softcap > 0) d = p.softcap * std::tanh(d / p.softcap);
        if (mask) d += mask->data<float>()[t * S + j];
        s[j] = d;
        mx = std::max(mx, d);
      }
      if (mx == -INFINITY) continue;
      double sum = 0;
      for (auto& e : s) sum += e = std::exp(e - mx);
      for (int64_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < Dv; ++c)
          y[(t * Hq + h) * Dv + c] += float(s[j] / sum * v.data<float>()[(j * Hkv + kh) * Dv + c]);
    }
  return y;
}

void expect_matches(int64_t T, int64_t Hq, int64_t Hkv, int64_t S, int64_t D, host::AttentionParams p,
                    bool with_mask, std::mt19937& rng) {
  const Tensor q = random_tensor({T, Hq, D}, rng), k = random_tensor({S, Hkv, D}, rng), v = random_tensor({S, Hkv, D}, rng);
  Tensor mask;
  if (with_mask) {
    mask = random_tensor({T, S}, rng);
    for (int64_t j = 0; j < S; j += 3) mask.data<float>()[j] = -std::numeric_limits<float>::infinity();
  }
  const auto want = reference(q, k, v, p, with_mask ? &mask : nullptr);
  const auto got = host::attention(q, k, v, p, with_mask ? &mask : nullptr).to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5) << "T " << T << " Hq " << Hq << " Hkv " << Hkv << " S " << S << " at " << i;
}

TEST(AttentionDecode, KeySplitMatchesReferenceAtEveryThreadCount) {
  const int before = num_threads();
  std::mt19937 rng(7);
  for (int threads : {1, 2, 5}) {
    set_num_threads(threads);
    host::AttentionParams causal;
    causal.causal = true;
    for (int64_t S : {1, 63, 64, 65, 300, 777}) {
      causal.q_offset = S - 1;
      expect_matches(1, 4, 1, S, 64, causal, false, rng);   // MQA: one kv head, split over keys
      expect_matches(1, 8, 2, S, 32, causal, false, rng);   // GQA groups of 4
      expect_matches(1, 3, 3, S, 16, causal, false, rng);   // MHA
    }
    host::AttentionParams local = causal;  // sliding window, several rows at once
    local.window = 100;
    local.q_offset = 400;
    expect_matches(3, 4, 2, 403, 32, local, false, rng);
    host::AttentionParams capped;
    capped.softcap = 5.0f;
    capped.scale = 0.3f;
    expect_matches(2, 4, 1, 250, 32, capped, true, rng);
  }
  set_num_threads(before);
}

// Not causal with a window: a band |p - j| < window (ModernBERT's local layers), through both the
// row path (few rows) and the blocked GEMM path (many rows), including bands wider than S.
TEST(AttentionDecode, BandMatchesReference) {
  std::mt19937 rng(11);
  host::AttentionParams band;
  band.window = 9;
  for (int64_t T : {1, 5, 40, 300}) expect_matches(T, 4, 4, T, 32, band, false, rng);
  band.window = 1000;
  expect_matches(70, 2, 2, 70, 16, band, false, rng);
}

TEST(AttentionDecode, RowThatSeesNoKeyIsZero) {
  std::mt19937 rng(3);
  const Tensor q = random_tensor({1, 2, 16}, rng), kv = random_tensor({200, 1, 16}, rng);
  Tensor mask = Tensor::empty({1, 200});
  for (int64_t j = 0; j < 200; ++j) mask.data<float>()[j] = -std::numeric_limits<float>::infinity();
  for (float y : host::attention(q, kv, kv, {}, &mask).to_vector()) EXPECT_EQ(y, 0.0f);
}

}  // namespace
}  // namespace xdna

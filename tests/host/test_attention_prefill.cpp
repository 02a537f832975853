// Causal attention over many query rows (prefill: the blocked GEMM path, 64 query rows per block)
// against a direct double-precision reference: from position 0 and continuing a cache (q_offset),
// with GQA, a sliding window and a soft-cap (the rows whose visible range starts past the block's).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "host/attention.h"

namespace xdna {
namespace {

Tensor random_tensor(const Shape& s, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(shape_numel(s));
  for (auto& x : v) x = nd(rng);
  return Tensor::from_vector(s, v);
}

std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, const host::AttentionParams& p) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), S = k.dim(0), Hkv = k.dim(1), Dv = v.dim(2);
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  const double scale = p.scale != 0.f ? p.scale : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> y(T * Hq * Dv, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / (Hq / Hkv), pos = p.q_offset + t;
      std::vector<double> s(S, -std::numeric_limits<double>::infinity());
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        if (j > pos || (p.window > 0 && pos - j >= p.window)) continue;
        double d = 0;
        for (int64_t c = 0; c < D; ++c) d += static_cast<double>(qp[(t * Hq + h) * D + c]) * kp[(j * Hkv + kh) * D + c];
        d *= scale;
        if (p.softcap > 0) d = p.softcap * std::tanh(d / p.softcap);
        s[j] = d;
        mx = std::max(mx, d);
      }
      double total = 0;
      for (int64_t j = 0; j < S; ++j) total += s[j] == -std::numeric_limits<double>::infinity() ? 0 : std::exp(s[j] - mx);
      for (int64_t j = 0; j < S; ++j) {
        if (s[j] == -std::numeric_limits<double>::infinity()) continue;
        const double w = std::exp(s[j] - mx) / total;
        for (int64_t c = 0; c < Dv; ++c) y[(t * Hq + h) * Dv + c] += w * vp[(j * Hkv + kh) * Dv + c];
      }
    }
  return y;
}

void expect_matches(int64_t T, int64_t S, const host::AttentionParams& p, std::mt19937& rng) {
  const int64_t Hq = 4, Hkv = 2, D = 32;
  const Tensor q = random_tensor({T, Hq, D}, rng), k = random_tensor({S, Hkv, D}, rng), v = random_tensor({S, Hkv, D}, rng);
  const auto want = reference(q, k, v, p);
  const auto got = host::attention(q, k, v, p).to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5) << "T " << T << " S " << S << " q_offset " << p.q_offset << " window "
                                        << p.window << " softcap " << p.softcap << " at " << i;
}

TEST(AttentionPrefill, CausalBlocksMatchReference) {
  std::mt19937 rng(5);
  host::AttentionParams causal;
  causal.causal = true;
  expect_matches(130, 130, causal, rng);  // three query blocks, the last partial
  causal.q_offset = 37;                   // continuing a cache of 37 positions
  expect_matches(100, 137, causal, rng);
  host::AttentionParams local = causal;   // sliding window: rows whose range starts later
  local.window = 50;
  expect_matches(100, 137, local, rng);
  host::AttentionParams capped;           // soft-cap: every row takes the per-key pass
  capped.causal = true;
  capped.softcap = 5.0f;
  expect_matches(70, 70, capped, rng);
}

}  // namespace
}  // namespace xdna

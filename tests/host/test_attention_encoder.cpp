// Bidirectional (encoder) attention whose heads split evenly over the threads runs per whole head
// (keys and values packed once per head); otherwise (here: fewer heads than threads) it runs the
// per-row-block path. Both must give the same values bit for bit (same GEMM kernels and k order), and match a
// double-precision reference, with GQA and a mask. (A soft-cap always takes the row-block path.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "host/attention.h"

#include "random_tensor.h"

namespace xdna {
namespace {

using test::random_tensor;

// softmax(scale q·k (capped, masked)) · v per row and head, in double.
std::vector<float> reference(const Tensor& q, const Tensor& k, const Tensor& v, float softcap,
                             const Tensor* mask) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), S = k.dim(0), Hkv = k.dim(1), Dv = v.dim(2);
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<float> y(T * Hq * Dv);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / (Hq / Hkv);
      std::vector<double> s(S);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        double d = 0;
        for (int64_t c = 0; c < D; ++c)
          d += double(q.data<float>()[(t * Hq + h) * D + c]) * k.data<float>()[(j * Hkv + kh) * D + c];
        d *= scale;
        if (softcap > 0) d = softcap * std::tanh(d / softcap);
        if (mask) d += mask->data<float>()[t * S + j];
        s[j] = d;
        mx = std::max(mx, d);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t c = 0; c < Dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += s[j] / sum * v.data<float>()[(j * Hkv + kh) * Dv + c];
        y[(t * Hq + h) * Dv + c] = static_cast<float>(acc);
      }
    }
  return y;
}

TEST(AttentionEncoder, PerHeadPathMatchesRowBlocksAndReference) {
  struct Case {
    int64_t T, Hq, Hkv, D;
    float softcap;
    bool mask;
  };
  // 197 rows: ViT-B/16's sequence (balanced blocks 50, 49, 49, 49; the row-block path: 64, 64,
  // 64, 5). Lengths whose last 64-row block has <= 4 rows are left out: matmul runs those few rows
  // as GEMV dots (another summation order), the per-head path as GEMM rows like the others.
  for (const Case c : {Case{197, 4, 4, 64, 0.0f, false}, Case{70, 4, 2, 40, 0.0f, true},
                       Case{120, 4, 1, 32, 0.0f, true}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv);
    std::mt19937 rng(11);
    const Tensor q = random_tensor({c.T, c.Hq, c.D}, rng), k = random_tensor({c.T, c.Hkv, c.D}, rng),
                 v = random_tensor({c.T, c.Hkv, c.D}, rng);
    Tensor mask = Tensor::empty({c.T, c.T});
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = i % 7 == 3 ? -INFINITY : 0.1f * float(i % 5);
    const Tensor* m = c.mask ? &mask : nullptr;
    host::AttentionParams p;
    p.softcap = c.softcap;
    const int before = num_threads();
    set_num_threads(2);  // 4 heads over 2 threads: per-head path
    const std::vector<float> per_head = host::attention(q, k, v, p, m).to_vector();
    set_num_threads(int(c.Hq) + 1);  // fewer heads than threads: row-block path
    const std::vector<float> blocks = host::attention(q, k, v, p, m).to_vector();
    set_num_threads(before);
    EXPECT_EQ(per_head, blocks);
    const std::vector<float> ref = reference(q, k, v, c.softcap, m);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(per_head[i], ref[i], 2e-5) << "at " << i;
  }
}

}  // namespace
}  // namespace xdna

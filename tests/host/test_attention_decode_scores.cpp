// The AVX-512 decode scores kernel (host/attention_decode.h) gives exactly the bits of its defined
// order of arithmetic: per key and query, 16 lane sums built with fused multiply-adds over the
// 16-element chunks of D in order (a last partial chunk with zeros in the missing lanes), then
// reduced in _mm512_reduce_add_ps's order (halves, quarters, pairs, the last two lanes). This pins
// the kernel's results whatever its reduction is made of (it sums several accumulators per
// shuffle), for every query group size it specialises and for the key tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "host/attention_decode.h"
#include "host/kv_cache.h"

#include "random_tensor.h"

namespace xdna {
namespace {

using test::random_tensor;

// q · k (D floats) in the kernel's order, in scalar code.
float ordered_dot(const float* q, const float* k, int64_t D) {
  float lane[16] = {};
  for (int64_t c = 0; c < D; c += 16)
    for (int l = 0; l < 16; ++l)
      if (c + l < D) lane[l] = std::fma(k[c + l], q[c + l], lane[l]);
      else lane[l] = std::fma(0.0f, 0.0f, lane[l]);
  float h[8], qr[4], p[2];
  for (int i = 0; i < 8; ++i) h[i] = lane[i + 8] + lane[i];
  for (int i = 0; i < 4; ++i) qr[i] = h[i + 4] + h[i];
  for (int i = 0; i < 2; ++i) p[i] = qr[i] + qr[i + 2];
  return p[0] + p[1];
}

TEST(AttentionDecodeScores, EqualTheOrderedScalarSumBitForBit) {
  if (active_isa() != Isa::Avx512) GTEST_SKIP() << "AVX-512 kernels";
  std::mt19937 rng(11);
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t G : {1, 2, 3, 4, 5, 8})
      for (int64_t D : {20, 128, 256})
        for (int64_t n : {1, 3, 4, 7, 70, 131}) {  // key tails (blocks of 4) and several 64-key tiles
          const int64_t stride = D + 16;
          const Tensor rows32 = random_tensor({n, stride}, rng);
          Tensor rows = Tensor::empty({n, stride}, dt);
          host::kv_store(rows32.data<float>(), dt, rows.raw(), rows.numel());
          std::vector<float> k(n * stride);  // the values as the kernel sees them
          host::kv_load(rows.raw(), dt, k.data(), rows.numel());
          const Tensor q = random_tensor({G, D}, rng);
          std::vector<const float*> qp;
          for (int64_t g = 0; g < G; ++g) qp.push_back(q.data<float>() + g * D);
          const int64_t ld = n + 3;
          std::vector<float> s(G * ld, -1.0f);
          host::decode_scores_avx512(rows.raw(), dt, stride, n, D, qp.data(), G, s.data(), ld);
          const std::string what = std::string(dtype_name(dt)) + " G " + std::to_string(G) + " D " +
                                   std::to_string(D) + " n " + std::to_string(n);
          for (int64_t g = 0; g < G; ++g)
            for (int64_t j = 0; j < n; ++j) {
              const float want = ordered_dot(qp[g], k.data() + j * stride, D);
              ASSERT_EQ(std::memcmp(&s[g * ld + j], &want, sizeof want), 0)
                  << what << " query " << g << " key " << j << ": " << s[g * ld + j] << " vs " << want;
            }
          for (int64_t g = 0; g < G; ++g)  // nothing past n written
            for (int64_t j = n; j < ld; ++j) ASSERT_EQ(s[g * ld + j], -1.0f) << what;
        }
}

}  // namespace
}  // namespace xdna

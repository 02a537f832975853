// The half-precision KV cache: f32 -> f16 / bf16 conversion at every ISA level equals the scalar
// reference in core/numeric.h (rounding, subnormals, Inf, NaN); attention over an f16 or bf16
// K/V equals attention over f32 K/V holding the same (rounded) values, on the decode row path,
// the folded multi-row path and the GEMM path, at 1 and 2 threads (bit for bit, except the AVX-512
// decode kernels' summation order: see expect_same_as_widened); those kernels read half rows
// exactly as f32 rows; KvCache
// stores in its type and rejects other types; its head-major views read like packed copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "host/attention.h"
#include "host/attention_decode.h"
#include "host/kv_cache.h"

#include "random_tensor.h"

namespace xdna {
namespace {

using test::random_tensor;

// x stored as `dt` (the cache's rounding) and the same values widened back to f32.
Tensor as_half(const Tensor& x, DType dt) {
  Tensor h = Tensor::empty(x.shape(), dt);
  host::kv_store(x.data<float>(), dt, h.raw(), x.numel());
  return h;
}
Tensor widened(const Tensor& h) {
  Tensor f = Tensor::empty(h.shape());
  host::kv_load(h.raw(), h.dtype(), f.data<float>(), h.numel());
  return f;
}

std::vector<Isa> isas() {
  std::vector<Isa> out{Isa::Scalar};
  const auto& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c) out.push_back(Isa::Avx2);
  if (active_isa() == Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

TEST(KvCacheHalf, ConversionMatchesScalarReferenceAtEveryIsa) {
  const Isa before = active_isa();
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, 1e9f, -1e9f, 6e-8f, 3e-5f, 1e-40f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                          1.0f + 1.0f / 256, 3.0e38f};
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 3.0f);
  while (x.size() < 203) x.push_back(d(rng));  // 203: vector bodies and a scalar tail
  const int64_t n = static_cast<int64_t>(x.size());
  for (Isa isa : isas()) {
    force_isa(isa);
    for (DType dt : {DType::F16, DType::BF16}) {
      std::vector<uint16_t> h(n);
      host::kv_store(x.data(), dt, h.data(), n);
      std::vector<float> back(n);
      host::kv_load(h.data(), dt, back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = dt == DType::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        const float want_back = dt == DType::F16 ? f16_to_f32(want) : bf16_to_f32(want);
        if (std::isnan(x[i])) {
          EXPECT_TRUE(std::isnan(back[i])) << isa_name(isa) << " " << dtype_name(dt);
          continue;
        }
        EXPECT_EQ(h[i], want) << isa_name(isa) << " " << dtype_name(dt) << " x=" << x[i];
        EXPECT_EQ(std::memcmp(&back[i], &want_back, 4), 0) << isa_name(isa) << " " << dtype_name(dt) << " x=" << x[i];
      }
    }
  }
  force_isa(before);
}

// attention(q, half k, half v) == attention(q, widened k, widened v): bit for bit on the portable
// loops; with AVX-512 the decode rows of a half cache run host/attention_decode.h's kernels (an f32
// cache keeps the dot / axpy loops), so there they agree to f32 summation-order rounding (1e-5 of
// the largest output; the kernels' own half == f32 identity is tested below).
void expect_same_as_widened(int64_t T, int64_t Hq, int64_t Hkv, int64_t S, int64_t D, host::AttentionParams p,
                            DType dt, std::mt19937& rng) {
  const Tensor q = random_tensor({T, Hq, D}, rng);
  const Tensor kh = as_half(random_tensor({S, Hkv, D}, rng), dt), vh = as_half(random_tensor({S, Hkv, D}, rng), dt);
  const auto want = host::attention(q, widened(kh), widened(vh), p).to_vector();
  const auto got = host::attention(q, kh, vh, p).to_vector();
  ASSERT_EQ(got.size(), want.size());
  const std::string what = std::string(dtype_name(dt)) + " T " + std::to_string(T) + " Hq " + std::to_string(Hq) +
                           " Hkv " + std::to_string(Hkv) + " S " + std::to_string(S) + " D " + std::to_string(D);
  if (active_isa() == Isa::Avx512 && T < 16) {  // 16: attention.cpp's kGemmMinRows
    float big = 1.0f;
    for (float w : want) big = std::max(big, std::abs(w));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * big) << what << " at " << i;
  } else {
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
  }
}

TEST(KvCacheHalf, AttentionOverHalfKvEqualsF32OfTheSameValues) {
  const int before = num_threads();
  const Isa isa_before = active_isa();
  std::mt19937 rng(9);
  for (Isa isa : isas())
  for (int threads : {1, 2}) {
    force_isa(isa);
    set_num_threads(threads);
    for (DType dt : {DType::F16, DType::BF16}) {
      host::AttentionParams causal;
      causal.causal = true;
      for (int64_t S : {1, 31, 32, 33, 300}) {
        causal.q_offset = S - 1;
        expect_same_as_widened(1, 16, 8, S, 128, causal, dt, rng);  // Qwen3's decode shape
        expect_same_as_widened(1, 4, 1, S, 256, causal, dt, rng);   // Gemma 3 270M's
        expect_same_as_widened(1, 3, 3, S, 20, causal, dt, rng);    // a head_dim off the vector width
      }
      host::AttentionParams local = causal;
      local.window = 50;
      local.q_offset = 200;
      expect_same_as_widened(3, 4, 2, 203, 32, local, dt, rng);  // a few rows, sliding window
      expect_same_as_widened(2, 4, 2, 90, 32, {}, dt, rng);      // folded rows (cross-attention)
      causal.q_offset = 0;
      expect_same_as_widened(40, 4, 2, 40, 32, causal, dt, rng);  // prefill: the GEMM path
    }
  }
  set_num_threads(before);
  force_isa(isa_before);
}

// The AVX-512 decode kernels read f16 / bf16 rows exactly as f32 rows of the widened values:
// scores and weighted sums are bit-identical (GQA groups of 1-6, head dims on and off 16 / 64).
TEST(KvCacheHalf, DecodeKernelsOverHalfRowsEqualF32Rows) {
  if (active_isa() != Isa::Avx512) GTEST_SKIP() << "AVX-512 kernels";
  std::mt19937 rng(4);
  for (DType dt : {DType::F16, DType::BF16})
    for (int64_t G : {1, 2, 4, 6})
      for (int64_t D : {20, 64, 128, 256}) {
        const int64_t n = 75, stride = D + 8;  // rows `stride` apart, as in a packed [S, Hkv, D]
        const Tensor rows = as_half(random_tensor({n, stride}, rng), dt), rows32 = widened(rows);
        const Tensor q = random_tensor({G, D}, rng), w = random_tensor({G, n}, rng);
        std::vector<const float*> qp;
        for (int64_t g = 0; g < G; ++g) qp.push_back(q.data<float>() + g * D);
        std::vector<float> s_half(G * n), s_f32(G * n), o_half(G * D, 0.5f), o_f32(G * D, 0.5f);
        host::decode_scores_avx512(rows.raw(), dt, stride, n, D, qp.data(), G, s_half.data(), n);
        host::decode_scores_avx512(rows32.data<float>(), DType::F32, stride, n, D, qp.data(), G, s_f32.data(), n);
        host::decode_wsum_avx512(rows.raw(), dt, stride, n, D, w.data<float>(), n, G, o_half.data());
        host::decode_wsum_avx512(rows32.data<float>(), DType::F32, stride, n, D, w.data<float>(), n, G, o_f32.data());
        const std::string what = std::string(dtype_name(dt)) + " G " + std::to_string(G) + " D " + std::to_string(D);
        EXPECT_EQ(std::memcmp(s_half.data(), s_f32.data(), s_f32.size() * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(o_half.data(), o_f32.data(), o_f32.size() * sizeof(float)), 0) << what;
        // and they compute what they say: a scalar double-precision reference
        for (int64_t g = 0; g < G; ++g) {
          double dot = 0, sum = 0.5;
          for (int64_t d = 0; d < D; ++d) dot += double(qp[g][d]) * rows32.data<float>()[7 * stride + d];
          for (int64_t j = 0; j < n; ++j) sum += double(w.data<float>()[g * n + j]) * rows32.data<float>()[j * stride + 3];
          EXPECT_NEAR(s_f32[g * n + 7], dot, 1e-4 * (1 + std::abs(dot))) << what;
          EXPECT_NEAR(o_f32[g * D + 3], sum, 1e-4 * (1 + std::abs(sum))) << what;
        }
      }
}

TEST(KvCacheHalf, CacheStoresRoundedValuesInItsType) {
  std::mt19937 rng(2);
  host::KvCache c(2, 10, 2, 8, DType::F16);
  EXPECT_EQ(c.dtype(), DType::F16);
  const Tensor k = random_tensor({3, 2, 8}, rng), v = random_tensor({3, 2, 8}, rng);
  c.append(1, k, v);
  ASSERT_EQ(c.keys(1).dtype(), DType::F16);
  ASSERT_EQ(c.keys(1).shape(), (Shape{3, 2, 8}));
  const Tensor kb = widened(c.keys(1).contiguous()), vb = widened(c.values(1).contiguous());
  for (int64_t i = 0; i < k.numel(); ++i) {
    EXPECT_EQ(kb.data<float>()[i], f16_to_f32(f32_to_f16(k.data<float>()[i])));
    EXPECT_EQ(vb.data<float>()[i], f16_to_f32(f32_to_f16(v.data<float>()[i])));
  }
  EXPECT_EQ(c.key_storage(0).nbytes(), 10 * 2 * 8 * 2);
}

TEST(KvCacheHalf, BadTypesAreRejectedByName) {
  EXPECT_EQ(host::kv_dtype_from_name("f32"), DType::F32);
  EXPECT_EQ(host::kv_dtype_from_name("f16"), DType::F16);
  EXPECT_EQ(host::kv_dtype_from_name("bf16"), DType::BF16);
  try {
    host::kv_dtype_from_name("fp8");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'fp8' is not one of f32, f16, bf16"), std::string::npos) << e.what();
  }
  try {
    host::KvCache(1, 4, 1, 8, DType::I8);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("f32, f16 or bf16, not"), std::string::npos) << e.what();
  }
}

// The cache is head-major ([Hkv, max_len, D] behind [S, Hkv, D] views): attention reads the
// strided views in place and gives exactly what it gives on packed copies of them, on the decode
// row path and the GEMM (prefill) path; copy_prefix copies the filled rows of every head.
TEST(KvCacheHalf, HeadMajorViewsReadLikePackedCopies) {
  std::mt19937 rng(3);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    host::KvCache c(1, 64, 2, 16, dt);
    c.append(0, random_tensor({40, 2, 16}, rng), random_tensor({40, 2, 16}, rng));
    ASSERT_FALSE(c.keys(0).is_contiguous());
    for (int64_t T : {1, 40}) {
      const Tensor q = random_tensor({T, 4, 16}, rng);
      host::AttentionParams p;
      p.causal = true;
      p.q_offset = 40 - T;
      const Tensor a = host::attention(q, c.keys(0), c.values(0), p);
      const Tensor b = host::attention(q, c.keys(0).contiguous(), c.values(0).contiguous(), p);
      ASSERT_EQ(a.numel(), b.numel());
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.numel() * sizeof(float)), 0) << dtype_name(dt) << " T " << T;
    }
    host::KvCache copy(1, 48, 2, 16, dt);
    copy.copy_prefix(c, 33);
    EXPECT_EQ(copy.length(0), 33);
    const Tensor want = c.keys(0).slice(0, 0, 33).contiguous(), got = copy.keys(0).contiguous();
    EXPECT_EQ(std::memcmp(want.raw(), got.raw(), want.nbytes()), 0);
    const Tensor wv = c.values(0).slice(0, 0, 33).contiguous(), gv = copy.values(0).contiguous();
    EXPECT_EQ(std::memcmp(wv.raw(), gv.raw(), wv.nbytes()), 0);
    EXPECT_THROW(copy.copy_prefix(c, 41), std::invalid_argument);  // more than the source holds
    EXPECT_THROW(host::KvCache(1, 64, 1, 16, dt).copy_prefix(c, 8), std::invalid_argument);
  }
}

}  // namespace
}  // namespace xdna

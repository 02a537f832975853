// The half-precision KV cache: f32 -> f16 / bf16 conversion at every ISA level equals the scalar
// reference in core/numeric.h (rounding, subnormals, Inf, NaN); attention over an f16 or bf16
// K/V is bit-identical to attention over f32 K/V holding the same (rounded) values, on the
// decode row path, the folded multi-row path and the GEMM path, at 1 and 2 threads; KvCache
// stores in its type and rejects other types; its head-major views read like packed copies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "host/attention.h"
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

// attention(q, half k, half v) == attention(q, widened k, widened v), bit for bit.
void expect_same_as_widened(int64_t T, int64_t Hq, int64_t Hkv, int64_t S, int64_t D, host::AttentionParams p,
                            DType dt, std::mt19937& rng) {
  const Tensor q = random_tensor({T, Hq, D}, rng);
  const Tensor kh = as_half(random_tensor({S, Hkv, D}, rng), dt), vh = as_half(random_tensor({S, Hkv, D}, rng), dt);
  const auto want = host::attention(q, widened(kh), widened(vh), p).to_vector();
  const auto got = host::attention(q, kh, vh, p).to_vector();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << dtype_name(dt) << " T " << T << " Hq " << Hq << " Hkv " << Hkv << " S " << S << " D " << D;
}

TEST(KvCacheHalf, AttentionOverHalfKvEqualsF32OfTheSameValues) {
  const int before = num_threads();
  std::mt19937 rng(9);
  for (int threads : {1, 2}) {
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

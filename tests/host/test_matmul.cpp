// host::matmul against a naive double-accumulation reference on dequantized weights, for every
// weight dtype, GEMV (M <= 4) and GEMM shapes that are not multiples of the block sizes, on every
// instruction-set path this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "core/numeric.h"
#include "host/gemm.h"
#include "host/matmul.h"

using namespace xdna;

namespace {

// Weights plus the values the test itself decodes from their bytes (independent of the kernels).
struct Weights {
  Tensor w;
  std::vector<double> deq;  // [N, K]
};

double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

double bf16_value(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random f16 / bf16 bit patterns with magnitudes in about [1/64, 4].
uint16_t random_half(std::mt19937& rng) {
  return static_cast<uint16_t>(((rng() & 1) << 15) | ((9 + rng() % 8) << 10) | (rng() & 1023));
}
uint16_t random_bf16(std::mt19937& rng) {
  return static_cast<uint16_t>(((rng() & 1) << 15) | ((121 + rng() % 8) << 7) | (rng() & 127));
}

Weights make_weights(DType t, int64_t N, int64_t K, int64_t group, std::mt19937& rng) {
  Weights r;
  r.w = Tensor::empty({N, K}, t);
  r.deq.resize(N * K);
  auto* bytes = reinterpret_cast<uint8_t*>(r.w.raw());
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  switch (t) {
    case DType::F32:
      for (int64_t i = 0; i < N * K; ++i) r.deq[i] = r.w.data<float>()[i] = uni(rng);
      break;
    case DType::F16:
      for (int64_t i = 0; i < N * K; ++i) r.deq[i] = half_value(r.w.data<uint16_t>()[i] = random_half(rng));
      break;
    case DType::BF16:
      for (int64_t i = 0; i < N * K; ++i) r.deq[i] = bf16_value(r.w.data<uint16_t>()[i] = random_bf16(rng));
      break;
    case DType::I8:
    case DType::I4: {
      Tensor sc = Tensor::empty({N, K / group});
      for (int64_t i = 0; i < sc.numel(); ++i) sc.data<float>()[i] = 0.01f + 0.05f * (rng() % 100) / 100.f;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          int q;
          if (t == DType::I8) {
            q = static_cast<int>(rng() % 255) - 127;
            r.w.data<int8_t>()[n * K + k] = static_cast<int8_t>(q);
          } else {
            q = static_cast<int>(rng() % 16) - 8;
            uint8_t& b = bytes[(n * K + k) / 2];
            if (k % 2 == 0) b = static_cast<uint8_t>(q & 15);
            else b = static_cast<uint8_t>(b | ((q & 15) << 4));
          }
          r.deq[n * K + k] = q * static_cast<double>(sc.data<float>()[n * (K / group) + k / group]);
        }
      r.w.set_scales(sc, group);
      break;
    }
    case DType::BFP16:
      for (int64_t b = 0; b < N * K / 8; ++b) {
        uint8_t* blk = bytes + b * 9;
        blk[0] = static_cast<uint8_t>(120 + rng() % 14);
        for (int i = 0; i < 8; ++i) {
          blk[1 + i] = static_cast<uint8_t>(rng());
          r.deq[b * 8 + i] = std::ldexp(static_cast<int8_t>(blk[1 + i]), blk[0] - 133);
        }
      }
      break;
    default: {
      // GGML blocks: random bytes, then sane f16 scale fields; the reference is dequantize_row.
      for (int64_t i = 0; i < r.w.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
      const auto& tr = traits(t);
      const uint16_t d = 0x2000;  // f16 2^-7
      for (int64_t b = 0; b < N * K / tr.block_elems; ++b) {
        uint8_t* blk = bytes + b * tr.block_bytes;
        if (t == DType::Q6_K) {
          std::memcpy(blk + 208, &d, 2);
        } else {
          std::memcpy(blk, &d, 2);
          if (t == DType::Q4_K || t == DType::Q5_K) std::memcpy(blk + 2, &d, 2);
        }
      }
      const std::vector<float> v = r.w.to_vector();
      for (int64_t i = 0; i < N * K; ++i) r.deq[i] = v[i];
      if (t == DType::Q8_0) {  // cross-check the decoder on the simplest format
        for (int64_t i = 0; i < N * K; ++i)
          EXPECT_EQ(r.deq[i], static_cast<int8_t>(bytes[(i / 32) * 34 + 2 + i % 32]) / 128.0);
      }
    }
  }
  return r;
}

struct Case {
  DType dtype;
  int64_t m, n, k, group;
};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) +
         " K=" + std::to_string(c.k) + " isa=" + isa_name(active_isa());
}

void check_case(const Case& c, bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  Weights w = make_weights(c.dtype, c.n, c.k, c.group ? c.group : c.k, rng);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> xv(c.m * c.k), bv(c.n);
  for (auto& v : xv) v = uni(rng);
  for (auto& v : bv) v = uni(rng);
  Tensor x = Tensor::from_vector({c.m, c.k}, xv);
  Tensor bias = Tensor::from_vector({c.n}, bv);
  Tensor y = host::matmul(x, w.w, with_bias ? &bias : nullptr);
  ASSERT_EQ(y.shape(), (Shape{c.m, c.n}));
  // bf16 GEMM and GEMV on AVX512-BF16 round x to bf16 (2^-9 relative); f32 paths only reorder sums.
  const bool bf16_gemv = c.dtype == DType::BF16 && c.m <= 4 && active_isa() == Isa::Avx512 && has_avx512_bf16();
  const bool bf16_products = c.dtype == DType::BF16 && (c.m > 4 || bf16_gemv) && has_avx512_bf16();
  const double rel = bf16_products ? 1.0 / 256 : 2e-5;
  // int8/int4 GEMV with VNNI quantizes x to int8 per block of 32 (scale s = max|x|/127): each x moves
  // by at most s/2, so the result moves by at most Σ|w|·s/2 over each block.
  const int64_t group = c.group ? c.group : c.k;
  // The same holds for bfp16 GEMV with VBMI (K % 64 == 0) and for the GGML GEMVs on AVX2 and AVX-512.
  const bool ggml = c.dtype == DType::Q8_0 || c.dtype == DType::Q4_0 || c.dtype == DType::Q4_K ||
                    c.dtype == DType::Q5_K || c.dtype == DType::Q6_K;
  const bool q8_x = (c.m <= 4 && ((has_avx512_vnni() &&
                    ((c.dtype == DType::I4 && c.k % 128 == 0 && group % 128 == 0) ||
                     (c.dtype == DType::I8 && c.k % 64 == 0 && group % 64 == 0) ||
                     (c.dtype == DType::BFP16 && c.k % 64 == 0 && __builtin_cpu_supports("avx512vbmi")))) ||
                    (ggml && active_isa() >= Isa::Avx2))) ||
                    // The Q8_0 / Q4_0 GEMM on AVX-512 VNNI quantizes x the same way (per block of 32).
                    (c.m > 4 && (c.dtype == DType::Q8_0 || c.dtype == DType::Q4_0) &&
                     active_isa() == Isa::Avx512 && has_avx512_vnni());
  // int8 per-channel GEMM on AVX-512 VNNI quantizes each x row as a whole (s = max|x row|/127).
  const bool q8_rows = c.m > 4 && c.dtype == DType::I8 && group == c.k && active_isa() == Isa::Avx512 &&
                       has_avx512_vnni();
  double max_diff = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = with_bias ? bv[j] : 0.0, mag = std::fabs(ref), qerr = 0;
      for (int64_t k = 0; k < c.k; ++k) {
        const double p = static_cast<double>(xv[i * c.k + k]) * w.deq[j * c.k + k];
        ref += p;
        mag += std::fabs(p);
        if (q8_x) {
          float amax = 0;
          for (int64_t b = k / 32 * 32; b < k / 32 * 32 + 32; ++b) amax = std::max(amax, std::fabs(xv[i * c.k + b]));
          qerr += std::fabs(w.deq[j * c.k + k]) * amax / 127 / 2;
        }
        if (q8_rows) {
          float amax = 0;
          for (int64_t b = 0; b < c.k; ++b) amax = std::max(amax, std::fabs(xv[i * c.k + b]));
          qerr += std::fabs(w.deq[j * c.k + k]) * amax / 127 / 2;
        }
      }
      const double got = y.data<float>()[i * c.n + j];
      ASSERT_NEAR(got, ref, rel * mag + qerr + 1e-6) << describe(c) << " at y[" << i << ", " << j << "]";
      max_diff = std::max(max_diff, std::fabs(got - ref));
      if (q8_x) {
        EXPECT_GT(std::fabs(got - ref), 1e-7);  // the quantized path really ran
      }
    }
  // The row-quantized GEMM really ran (with K this long some x value is rounded).
  if (q8_rows && c.k >= 32) {
    EXPECT_GT(max_diff, 1e-6) << describe(c);
  }
  // The bf16-product GEMV really ran (some x value was rounded to bf16).
  if (bf16_gemv && c.k >= 64) {
    EXPECT_GT(max_diff, 1e-7) << describe(c);
  }
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out = {Isa::Scalar};
  const Isa best = active_isa();
  if (best >= Isa::Avx2) out.push_back(Isa::Avx2);
  if (best >= Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

// Runs fn once per instruction-set level, then restores the best one.
template <typename Fn>
void for_each_isa(Fn fn) {
  const Isa best = active_isa();
  for (Isa isa : available_isas()) {
    force_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    fn();
  }
  force_isa(best);
}

// M = 1 and 3 take the GEMV path, 5 and 37 the GEMM path (37 > one 14-row tile, partial tiles).
void check_dtype(DType t, std::vector<int64_t> ks, int64_t group_div = 0) {
  for_each_isa([&] {
    uint32_t seed = 1;
    for (int64_t k : ks)
      for (int64_t m : {1, 3, 5, 37})
        for (int64_t n : {1, 7, 45}) {
          const int64_t group = group_div ? k / group_div : 0;
          check_case({t, m, n, k, group}, (m + n) % 2 == 0, seed++);
          if (::testing::Test::HasFatalFailure()) return;
        }
  });
}

}  // namespace

TEST(Matmul, F32) { check_dtype(DType::F32, {1, 13, 300}); }
TEST(Matmul, F16) { check_dtype(DType::F16, {1, 13, 300}); }
TEST(Matmul, BF16) { check_dtype(DType::BF16, {1, 13, 300}); }
TEST(Matmul, Int8PerChannel) { check_dtype(DType::I8, {1, 13, 300}); }
TEST(Matmul, Int8PerGroup) { check_dtype(DType::I8, {30, 300}, 3); }  // groups of 10 and 100
TEST(Matmul, Int8Vnni) { check_dtype(DType::I8, {256, 384}); check_dtype(DType::I8, {256}, 4); }
TEST(Matmul, Int4PerGroup) { check_dtype(DType::I4, {4, 36, 300}, 2); }  // groups of 2, 18, 150
TEST(Matmul, Int4PerChannel) { check_dtype(DType::I4, {14, 300}); }
// 640: the int4 row kernel's four-step unrolled loop (512 values) and a one-step tail.
TEST(Matmul, Int4Vnni) { check_dtype(DType::I4, {256, 640}); check_dtype(DType::I4, {256}, 2); }
TEST(Matmul, Bfp16) { check_dtype(DType::BFP16, {8, 72, 264}); }
TEST(Matmul, Bfp16Vnni) { check_dtype(DType::BFP16, {64, 320}); }  // 320: one 128-step and a 64 tail
TEST(Matmul, Q8_0) { check_dtype(DType::Q8_0, {32, 288}); }
TEST(Matmul, Q4_0) { check_dtype(DType::Q4_0, {32, 288}); }  // 288: 9 blocks, odd tails
TEST(Matmul, Q4_K) { check_dtype(DType::Q4_K, {256, 512}); }
TEST(Matmul, Q5_K) { check_dtype(DType::Q5_K, {256, 512}); }
TEST(Matmul, Q6_K) { check_dtype(DType::Q6_K, {256, 512}); }

// Larger than one cache block in every dimension: several KC slices, MC blocks and NC slabs.
TEST(Matmul, F32SpansCacheBlocks) {
  for_each_isa([] {
    if (active_isa() == Isa::Scalar) return;  // same driver; keeps the suite fast
    check_case({DType::F32, 230, 70, 1700, 0}, true, 7);  // 1700: two 768-deep f32 slices + a tail
    check_case({DType::BF16, 230, 70, 515, 0}, true, 8);
    check_case({DType::F32, 6, 2100, 40, 0}, false, 9);
  });
}

TEST(Matmul, SingleThreadMatchesThreaded) {
  std::mt19937 rng(3);
  // 2·M·N·K above host::kGemmSerialFlops, so the threaded run really splits.
  Weights w = make_weights(DType::F32, 270, 300, 300, rng);
  std::vector<float> xv(60 * 300);
  ASSERT_GE(2 * 60 * 270 * 300, host::kGemmSerialFlops);
  for (auto& v : xv) v = static_cast<float>(rng() % 100) / 50.f - 1.f;
  Tensor x = Tensor::from_vector({60, 300}, xv);
  const int before = num_threads();
  set_num_threads(1);
  const std::vector<float> one = host::matmul(x, w.w).to_vector();
  set_num_threads(before > 1 ? before : 2);
  const std::vector<float> many = host::matmul(x, w.w).to_vector();
  set_num_threads(before);
  EXPECT_EQ(one, many);  // threads split whole tiles: identical arithmetic
}

// The weights (and int8 scales) written to a file and mapped read-only, as checkpoints are.
Tensor mapped_copy(const Tensor& w, const std::string& name) {
  const std::string path = ::testing::TempDir() + "xdna_pack_cache_" + name;
  const Tensor sc = w.scales() ? *w.scales() : Tensor();
  const size_t wbytes = static_cast<size_t>(w.nbytes()), sc_off = (wbytes + 63) / 64 * 64;
  std::vector<char> bytes(sc_off + (sc.defined() ? sc.nbytes() : 0));
  std::memcpy(bytes.data(), w.raw(), wbytes);
  if (sc.defined()) std::memcpy(bytes.data() + sc_off, sc.raw(), sc.nbytes());
  FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  auto file = std::make_shared<MappedFile>(path);
  std::remove(path.c_str());  // the mapping stays valid
  Tensor m = Tensor::view(file, 0, w.shape(), w.dtype());
  if (sc.defined()) m.set_scales(Tensor::view(file, sc_off, sc.shape(), DType::F32), w.group_size());
  return m;
}

// Mapped (read-only) weights are packed once and cached; results stay bit-identical to packing
// per call (heap weights are never cached), on every ISA, for the f32 and bf16 kernels.
TEST(Matmul, PackedWeightCacheIsBitIdentical) {
  for_each_isa([] {
    // int8 per channel (group 544) takes the VNNI GEMM on AVX-512, per group (136) the f32 one.
    const std::pair<DType, int64_t> cases[] = {
        {DType::F32, 544}, {DType::BF16, 544}, {DType::I8, 136}, {DType::I8, 544}, {DType::Q4_0, 544}};
    for (auto [t, group] : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " group " + std::to_string(group));
      host::clear_packed_weight_cache();
      std::mt19937 rng(11);
      Weights w = make_weights(t, 45, 544, group, rng);  // 544: KC tails
      std::vector<float> xv(37 * 544);
      std::uniform_real_distribution<float> uni(-1.f, 1.f);
      for (auto& v : xv) v = uni(rng);
      Tensor x = Tensor::from_vector({37, 544}, xv);
      const std::vector<float> heap = host::matmul(x, w.w).to_vector();
      EXPECT_EQ(host::packed_weight_cache_bytes(), 0u);  // writable weights: not cached
      Tensor mw = mapped_copy(w.w, std::string(dtype_name(t)) + std::to_string(group));
      EXPECT_EQ(host::matmul(x, mw).to_vector(), heap);  // packs and caches
      const size_t cached = host::packed_weight_cache_bytes();
      // Q4_0 on AVX-512 VNNI runs the int8 GEMM, which unpacks per call and caches nothing.
      const bool uncached = t == DType::Q4_0 && active_isa() == Isa::Avx512 && has_avx512_vnni();
      if (uncached) EXPECT_EQ(cached, 0u);
      else EXPECT_GE(cached, 45u * 544);
      EXPECT_EQ(host::matmul(x, mw).to_vector(), heap);  // from the cache
      EXPECT_EQ(host::packed_weight_cache_bytes(), cached);
      // A view at another offset (rows 5..44) is other weights: its own entry, still exact.
      const std::vector<float> tail = host::matmul(x, w.w.slice(0, 5, 45)).to_vector();
      EXPECT_EQ(host::matmul(x, mw.slice(0, 5, 45)).to_vector(), tail);
      if (!uncached) {
        EXPECT_GT(host::packed_weight_cache_bytes(), cached);
      }
    }
    host::clear_packed_weight_cache();
  });
}

// A cache entry holds the weight buffer: after the tensor is dropped, a new buffer cannot take
// its address while the entry exists, so the entry can never serve the wrong weights.
TEST(Matmul, PackedWeightCacheHoldsTheBuffer) {
  host::clear_packed_weight_cache();
  std::mt19937 rng(12);
  Weights w = make_weights(DType::F32, 40, 96, 96, rng);
  Tensor x = Tensor::from_vector({16, 96}, std::vector<float>(16 * 96, 0.5f));
  Tensor mw = mapped_copy(w.w, "hold");
  std::weak_ptr<Buffer> alive = mw.buffer();
  host::matmul(x, mw);
  mw = Tensor();
  EXPECT_FALSE(alive.expired());  // the cache keeps the mapping
  host::clear_packed_weight_cache();
  EXPECT_TRUE(alive.expired());
  EXPECT_EQ(host::packed_weight_cache_bytes(), 0u);
}

// A pinned pack (a model that owns its packed weights, e.g. a conformer past the cache bound) is
// used by matmul, is not counted against the bound, and is freed with its last handle.
TEST(Matmul, PinnedPackedWeightsServeMatmulAndDieWithTheHandle) {
  host::clear_packed_weight_cache();
  std::mt19937 rng(13);
  Weights w = make_weights(DType::F32, 40, 96, 96, rng);
  Tensor x = Tensor::from_vector({16, 96}, std::vector<float>(16 * 96, 0.25f));
  const std::vector<float> heap = host::matmul(x, w.w).to_vector();
  EXPECT_EQ(host::pin_packed_weights(w.w), nullptr);  // writable weights are never cached
  Tensor mw = mapped_copy(w.w, "pin");
  std::weak_ptr<Buffer> alive = mw.buffer();
  std::shared_ptr<void> pin = host::pin_packed_weights(mw);
  ASSERT_NE(pin, nullptr);
  EXPECT_EQ(host::packed_weight_cache_bytes(), 0u);  // pinned: outside the bound's count
  EXPECT_EQ(host::matmul(x, mw).to_vector(), heap);
  EXPECT_EQ(host::packed_weight_cache_bytes(), 0u);  // served from the pin, not cached again
  mw = Tensor();
  EXPECT_FALSE(alive.expired());  // the pin holds the mapping
  pin.reset();
  EXPECT_TRUE(alive.expired());
}

TEST(Matmul, EmptyAndBatchedShapes) {
  std::mt19937 rng(4);
  Weights w = make_weights(DType::F32, 5, 3, 3, rng);
  Tensor y0 = host::matmul(Tensor::zeros({0, 3}), w.w);
  EXPECT_EQ(y0.shape(), (Shape{0, 5}));
  // x [2, 3, K] -> y [2, 3, N]; a 1-D x gives a 1-D y.
  Tensor x = Tensor::zeros({2, 3, 3});
  x.data<float>()[3 * 3 + 1] = 1.f;  // x[1, 0, 1]
  Tensor y = host::matmul(x, w.w);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  for (int n = 0; n < 5; ++n) EXPECT_FLOAT_EQ(y.data<float>()[15 + n], static_cast<float>(w.deq[n * 3 + 1]));
  EXPECT_EQ(host::matmul(Tensor::zeros({3}), w.w).shape(), (Shape{5}));
  // K = 0: the output is the bias.
  Tensor bias = Tensor::from_vector({2}, {1.5f, -2.f});
  Tensor yk = host::matmul(Tensor::zeros({6, 0}), Tensor::zeros({2, 0}), &bias);
  EXPECT_EQ(yk.to_vector(), (std::vector<float>{1.5f, -2.f, 1.5f, -2.f, 1.5f, -2.f, 1.5f, -2.f, 1.5f, -2.f, 1.5f, -2.f}));
}

TEST(Matmul, BadShapesAndDtypesThrowNamingShapes) {
  Tensor x = Tensor::zeros({3, 5});
  auto expect_msg = [](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no exception; expected one mentioning " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_msg([&] { host::matmul(x, Tensor::zeros({7, 4})); }, "[3, 5]");
  expect_msg([&] { host::matmul(x, Tensor::zeros({7, 4})); }, "[7, 4]");
  expect_msg([&] { host::matmul(x, Tensor::zeros({5})); }, "[5]");
  expect_msg([&] { host::matmul(Tensor::zeros({3, 5}, DType::F16), Tensor::zeros({2, 5})); }, "f16");
  expect_msg([&] { host::matmul(x, Tensor::zeros({2, 5}, DType::I32)); }, "i32");
  expect_msg([&] { host::matmul(x, Tensor::zeros({2, 5}, DType::I8)); }, "scales");
  Tensor bias = Tensor::zeros({3});
  expect_msg([&] { host::matmul(x, Tensor::zeros({2, 5}), &bias); }, "bias [3]");
  Tensor y = Tensor::zeros({3, 3});
  expect_msg([&] { host::matmul(x, Tensor::zeros({2, 5}), nullptr, y); }, "[3, 2]");
}

// The int8 VNNI GEMM quantizes x per block of 32 values, not per row: one large activation (as
// transformer hidden states have) must only coarsen its own block. Each x value moves by at most
// max|x block|/254, so y moves by at most Σ|w|·that; with one row-wide scale the other values would
// be rounded to steps of 100/127 and this bound would fail by far. K = 300 leaves a partial block.
TEST(Matmul, Int8VnniGemmScalesActivationsPerBlock) {
  if (active_isa() != Isa::Avx512 || !has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  for (const int64_t K : {384, 300}) {
    const int64_t M = 37, N = 45;
    std::mt19937 rng(7);
    Weights w = make_weights(DType::I8, N, K, K, rng);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    std::vector<float> xv(M * K);
    for (auto& v : xv) v = uni(rng);
    for (int64_t i = 0; i < M; ++i) xv[i * K + (i * 37) % K] = 100.f;  // one outlier per row
    const Tensor y = host::matmul(Tensor::from_vector({M, K}, xv), w.w);
    double max_rel = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0, bound = 1e-6;
        for (int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(xv[i * K + k]) * w.deq[j * K + k];
          ref += p;
          float amax = 0;
          for (int64_t b = k / 32 * 32; b < std::min<int64_t>(K, k / 32 * 32 + 32); ++b)
            amax = std::max(amax, std::fabs(xv[i * K + b]));
          bound += std::fabs(w.deq[j * K + k]) * amax / 254 + 2e-5 * std::fabs(p);  // + f32 sums
        }
        const double got = y.data<float>()[i * N + j];
        ASSERT_NEAR(got, ref, bound) << "K=" << K << " y[" << i << ", " << j << "]";
        max_rel = std::max(max_rel, std::fabs(got - ref) / bound);
      }
    EXPECT_GT(max_rel, 0.01) << "x was not quantized at all: the int8 GEMM did not run";
  }
}

// The AVX-512 x quantizers must give exactly what the scalar ones in matmul.cpp give (the GEMV
// error bound is stated for them): per block of 32, s = max|x| / 127, q = nearest-even(x · 127 /
// max|x|). Ties are included on purpose: a block with max|x| = 127 has x · 1 = k + 0.5 exactly.
TEST(Matmul, SimdQuantizeXMatchesScalarBitForBit) {
  if (active_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 quantizer on this CPU";
  const host::IsaKernels& kern = host::avx512_kernels();
  ASSERT_TRUE(kern.quantize_x_s8 && kern.quantize_x_q8);
  const int64_t K = 256;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-3.f, 3.f);
  std::vector<float> x(K);
  for (auto& v : x) v = uni(rng);
  for (int64_t k = 0; k < 32; ++k) x[k] = k == 0 ? 127.f : static_cast<float>(k % 9) - 4.5f;  // ties
  for (int64_t k = 32; k < 64; ++k) x[k] = 0;                                                  // all-zero block
  std::vector<int8_t> ref_q(K);
  std::vector<float> ref_scale(K / 32), ref_sum16(K / 16);
  for (int64_t b = 0; b < K; b += 32) {
    float amax = 0;
    for (int64_t k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float s = amax / 127, inv = amax > 0 ? 127 / amax : 0;
    ref_scale[b / 32] = s;
    for (int64_t j = b; j < b + 32; j += 16) {
      int sum = 0;
      for (int64_t k = j; k < j + 16; ++k) sum += ref_q[k] = static_cast<int8_t>(std::nearbyint(x[k] * inv));
      ref_sum16[j / 16] = s * static_cast<float>(sum);
    }
  }
  EXPECT_EQ(ref_q[1], -4);  // -3.5 -> -4 (nearest even)
  EXPECT_EQ(ref_q[4], 0);   // -0.5 -> 0
  std::vector<int8_t> q(K);
  std::vector<float> scale4(K / 4), sum16(K / 16);
  kern.quantize_x_s8(x.data(), K, q.data(), scale4.data(), sum16.data());
  for (int64_t k = 0; k < K; ++k) ASSERT_EQ(q[k], ref_q[k]) << "q_s8 at " << k;
  for (int64_t j = 0; j < K / 4; ++j) ASSERT_EQ(scale4[j], ref_scale[j / 8]) << "scale4 at " << j;
  for (int64_t j = 0; j < K / 16; ++j) ASSERT_EQ(sum16[j], ref_sum16[j]) << "xsum16 at " << j;
  std::vector<int32_t> corr8(K / 8);
  std::vector<float> scale8(K / 8);
  kern.quantize_x_q8(x.data(), K, q.data(), corr8.data(), scale8.data());
  for (int64_t k = 0; k < K; ++k) ASSERT_EQ(q[k % 2 ? K / 2 + k / 2 : k / 2], ref_q[k]) << "deinterleaved q at " << k;
  for (int64_t j = 0; j < K / 8; ++j) {
    int sum = 0;
    for (int64_t k = 8 * j; k < 8 * j + 8; ++k) sum += ref_q[k];
    ASSERT_EQ(corr8[j], 8 * sum) << "corr8 at " << j;
    ASSERT_EQ(scale8[j], ref_scale[j / 4]) << "scale8 at " << j;
  }
}

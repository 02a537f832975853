// ConstantWeightCache (src/host/conv_weight_cache.h), shared by the conv GEMM's packed weights and
// the Winograd filter transforms: one result per (weights, layout), only for constant weights,
// none kept past the byte limit, and the weight buffer held while cached.
#include <gtest/gtest.h>

#include <memory>

#include "core/buffer.h"
#include "host/conv_weight_cache.h"

using namespace xdna;
using namespace xdna::host;

namespace {

struct Derived {
  std::unique_ptr<HeapBuffer> storage;
  int64_t layout0 = 0;
};

std::shared_ptr<const Derived> make(int64_t layout0, size_t bytes, int* calls) {
  ++*calls;
  auto d = std::make_shared<Derived>();
  d->storage = std::make_unique<HeapBuffer>(bytes);
  d->layout0 = layout0;
  return d;
}

}  // namespace

TEST(ConvWeightCache, OneResultPerWeightsAndLayout) {
  ConstantWeightCache<Derived> cache(1 << 20);
  const Tensor w = Tensor::zeros({8, 4, 3, 3}), other = Tensor::zeros({8, 4, 3, 3});
  int calls = 0;
  auto a = cache.get(w, true, {1, 14}, [&] { return make(1, 1024, &calls); });
  auto b = cache.get(w, true, {1, 14}, [&] { return make(1, 1024, &calls); });
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cache.bytes(), 1024u);
  auto c = cache.get(w, true, {2, 14}, [&] { return make(2, 1024, &calls); });  // another layout
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(c->layout0, 2);
  cache.get(other, true, {1, 14}, [&] { return make(1, 1024, &calls); });  // other weights
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(cache.bytes(), 3072u);
  // The same bytes seen as another shape are other weights.
  cache.get(w.reshape({4, 8, 3, 3}), true, {1, 14}, [&] { return make(1, 1024, &calls); });
  EXPECT_EQ(calls, 4);
}

TEST(ConvWeightCache, ChangingWeightsAndTheLimitAreNotCached) {
  ConstantWeightCache<Derived> cache(4096);
  const Tensor w = Tensor::zeros({2, 2, 3, 3});
  int calls = 0;
  cache.get(w, false, {1, 14}, [&] { return make(1, 1024, &calls); });
  cache.get(w, false, {1, 14}, [&] { return make(1, 1024, &calls); });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.bytes(), 0u);
  auto big = cache.get(w, true, {1, 14}, [&] { return make(1, 8192, &calls); });  // past the limit
  cache.get(w, true, {1, 14}, [&] { return make(1, 8192, &calls); });
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(big->storage->size(), 8192u);
}

TEST(ConvWeightCache, HoldsTheWeightBuffer) {
  ConstantWeightCache<Derived> cache(1 << 20);
  int calls = 0;
  std::weak_ptr<Buffer> held;
  {
    const Tensor w = Tensor::zeros({2, 2, 1, 1});
    held = w.buffer();
    cache.get(w, true, {1, 14}, [&] { return make(1, 64, &calls); });
  }
  EXPECT_FALSE(held.expired());  // its address cannot be reused by other weights while cached
}

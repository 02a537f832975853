// Random f32 tensors for the host kernel tests.
#pragma once

#include <random>

#include "core/tensor.h"

namespace xdna::test {

inline Tensor random_tensor(Shape shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Uniform values in [-1, 1) from a fresh generator seeded with `seed` (conv tests).
inline Tensor uniform_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

}  // namespace xdna::test

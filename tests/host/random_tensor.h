// A tensor of standard-normal f32 values from the caller's generator (host kernel tests).
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

}  // namespace xdna::test

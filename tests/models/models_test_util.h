// What the model tests share: comparing an output tensor with its reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor.h"

namespace mtest {

// max |got - want| / max |want| (shapes must match: a failed expectation otherwise).
inline double rel_err(const xdna::Tensor& got, const xdna::Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  const std::vector<float> a = got.to_vector(), b = want.to_vector();
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace mtest

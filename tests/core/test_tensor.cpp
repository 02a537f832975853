#include <gtest/gtest.h>

#include "core/tensor.h"

using namespace xdna;

TEST(Tensor, ReshapeSliceTranspose) {
  Tensor t = Tensor::empty({2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = float(i);
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  Tensor c = tt.contiguous();
  EXPECT_EQ(c.data<float>()[1], 3.0f);
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.contiguous().data<float>()[2], 4.0f);
  EXPECT_THROW(t.reshape({4, 2}), std::invalid_argument);
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{6}));
}

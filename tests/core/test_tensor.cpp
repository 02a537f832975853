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

TEST(Tensor, SlicingAQuantizedTensorSlicesItsScales) {
  // 4 rows x 8 cols int8, group 4: row r holds value r+1 everywhere, scale (r+1)/127 per group.
  Tensor q = Tensor::empty({4, 8}, DType::I8);
  Tensor s = Tensor::empty({4, 2});
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 8; ++c) q.data<int8_t>()[r * 8 + c] = 127;
    for (int g = 0; g < 2; ++g) s.data<float>()[r * 2 + g] = float(r + 1) / 127.0f + float(g);
  }
  q.set_scales(s, 4);
  std::vector<float> rows = q.slice(0, 2, 4).to_vector();
  ASSERT_EQ(rows.size(), 16u);
  EXPECT_NEAR(rows[0], 3.0f, 1e-5);
  EXPECT_NEAR(rows[4], 3.0f + 127.0f, 1e-3);
  EXPECT_NEAR(rows[8], 4.0f, 1e-5);
  std::vector<float> cols = q.slice(1, 4, 8).to_vector();
  ASSERT_EQ(cols.size(), 16u);
  EXPECT_NEAR(cols[0], 1.0f + 127.0f, 1e-3);
  EXPECT_THROW(q.slice(1, 2, 8), std::invalid_argument);
  EXPECT_THROW(q.set_scales(Tensor::empty({3}), 4), std::invalid_argument);
}

// conv2d's im2col-into-GEMM-panels path against a direct loop: every padding/stride/dilation/group
// combination, positions that do and do not fill a panel, both GEMM instruction sets, and the
// buffer reuse of conv2d_into, the fused epilogue (bias, residual, clamp), the packed-weight cache,
// the transposed tile for few positions, and stride-2 max pooling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/conv.h"
#include "host/conv_kernels.h"
#include "random_tensor.h"

using namespace xdna;
using namespace xdna::host;

namespace {

// The definition, in double.
Tensor direct_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2), Cout = w.dim(0), Kh = w.dim(2), Kw = w.dim(3);
  const int64_t G = p.groups, cin_g = Cin / G, cout_g = Cout / G;
  const int64_t Ho = (H + 2 * p.padding[0] - p.dilation[0] * (Kh - 1) - 1) / p.stride[0] + 1;
  const int64_t Wo = (W + 2 * p.padding[1] - p.dilation[1] * (Kw - 1) - 1) / p.stride[1] + 1;
  Tensor y = Tensor::empty({Cout, Ho, Wo});
  const float *px = x.data<float>(), *pw = w.data<float>();  // not per tap: unoptimised builds call data()
  for (int64_t o = 0; o < Cout; ++o)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double acc = b.data<float>()[o];
        const int64_t g = o / cout_g;
        for (int64_t c = 0; c < cin_g; ++c)
          for (int64_t i = 0; i < Kh; ++i)
            for (int64_t j = 0; j < Kw; ++j) {
              const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
              const int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              acc += double(px[((g * cin_g + c) * H + ih) * W + iw]) * pw[((o * cin_g + c) * Kh + i) * Kw + j];
            }
        y.data<float>()[(o * Ho + oh) * Wo + ow] = float(acc);
      }
  return y;
}

struct Case {
  int64_t cin, cout, h, w, kh, kw, stride, pad, dil, groups;
};

void expect_matches(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "cin " << c.cin << " cout " << c.cout << " " << c.h << "x" << c.w << " k "
                                    << c.kh << "x" << c.kw << " s " << c.stride << " p " << c.pad << " d " << c.dil
                                    << " g " << c.groups);
  const Tensor x = test::uniform_tensor({c.cin, c.h, c.w}, seed);
  const Tensor w = test::uniform_tensor({c.cout, c.cin / c.groups, c.kh, c.kw}, seed + 1);
  const Tensor b = test::uniform_tensor({c.cout}, seed + 2);
  ConvParams p;
  p.stride[0] = p.stride[1] = c.stride;
  p.padding[0] = p.padding[1] = c.pad;
  p.dilation[0] = p.dilation[1] = c.dil;
  p.groups = c.groups;
  const Tensor want = direct_conv(x, w, b, p);
  const Tensor got = conv2d(x, w, &b, p);
  ASSERT_EQ(got.shape(), want.shape());
  const double tol = 1e-5 * double(c.cin / c.groups * c.kh * c.kw);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], tol) << "element " << i;
}

const Case kCases[] = {
    {3, 64, 37, 41, 3, 3, 1, 1, 1, 1},    // SR-style: rows longer than a panel, ragged last panel
    {64, 12, 20, 33, 3, 3, 1, 1, 1, 1},   // few output channels (a partial GEMM row tile)
    {16, 16, 5, 7, 5, 5, 1, 2, 1, 1},     // positions fewer than one panel; padding wider than W
    {8, 8, 19, 70, 1, 1, 1, 0, 1, 1},     // pointwise, rows of 70 (panels cross rows)
    {6, 10, 23, 29, 3, 3, 2, 1, 1, 1},    // strided
    {4, 6, 21, 40, 3, 3, 1, 2, 2, 1},     // dilated
    {8, 12, 17, 35, 3, 3, 1, 1, 1, 4},    // grouped
    {5, 7, 9, 64, 3, 1, 1, 0, 1, 1},      // rectangular kernel, exact panel rows
    {32, 32, 1, 200, 1, 3, 1, 0, 1, 1},   // conv1d shape
};

// Rows of >= 64 outputs: the direct AVX-512 kernel's shapes (conv.cpp use_direct).
// Register tiles of 3, 2 and 1 vectors, ragged last vectors, partial 8-channel blocks, taps that
// reach past both ends of a row, and kernels other than 3x3.
const Case kDirectCases[] = {
    {5, 12, 6, 70, 3, 3, 1, 1, 1, 1},    // 5 vectors = 3 + 2, channels 8 + 4
    {3, 8, 4, 64, 3, 3, 1, 1, 1, 1},     // 4 vectors = 3 + 1, exactly one block
    {4, 9, 5, 100, 5, 5, 1, 2, 1, 1},    // 5x5, padding 2, 7 vectors (ragged), channels 8 + 1
    {6, 3, 3, 81, 3, 3, 1, 0, 1, 1},     // no padding, 3 output channels
    {7, 16, 9, 130, 1, 3, 1, 1, 1, 1},   // 1x3 with padding on every row, 9 vectors
    {64, 64, 3, 96, 3, 3, 1, 1, 1, 1},   // EDSR's body conv, two full tiles per row
    // Stride 2 (the input's columns split by parity): ResNet's 7x7 stem, odd widths, no padding,
    // a 1-wide kernel (one parity only).
    {3, 16, 9, 150, 7, 7, 2, 3, 1, 1},   // the stem's kernel: 75 outputs per row, 5 vectors
    {4, 9, 6, 131, 3, 3, 2, 1, 1, 1},    // EfficientNet's 3x3 stem, odd W, channels 8 + 1
    {2, 8, 7, 141, 5, 5, 2, 2, 1, 1},    // 5x5, odd W
    {3, 8, 8, 135, 3, 3, 2, 0, 1, 1},    // no padding
    {3, 8, 9, 140, 3, 1, 2, 1, 1, 1},    // 3x1: one parity, rows padded
};

}  // namespace

TEST(Conv, MatchesDirectLoop) {
  uint32_t seed = 1;
  for (const Case& c : kCases) expect_matches(c, seed += 10);
}

TEST(Conv, MatchesDirectLoopOnAvx2) {
  if (active_isa() == Isa::Scalar) GTEST_SKIP() << "no AVX2";
  const Isa before = active_isa();
  force_isa(Isa::Avx2);  // NR 16 instead of 32: other panel boundaries
  uint32_t seed = 500;
  for (const Case& c : kCases) expect_matches(c, seed += 10);
  force_isa(before);
}

TEST(Conv, IntoReusesAMatchingBufferOnly) {
  const Tensor x = test::uniform_tensor({4, 9, 11}, 7);
  const Tensor w = test::uniform_tensor({6, 4, 3, 3}, 8);
  ConvParams p;
  p.padding[0] = p.padding[1] = 1;
  const Tensor want = conv2d(x, w, nullptr, p);
  Tensor y = Tensor::empty({6 * 9 * 11});  // right size, other shape: reused and reshaped
  const float* storage = y.data<float>();
  y.data<float>()[5] = 1e9f;  // stale contents must not leak into the result
  conv2d_into(x, w, nullptr, p, y);
  EXPECT_EQ(y.data<float>(), storage);
  EXPECT_EQ(y.shape(), (Shape{6, 9, 11}));
  EXPECT_EQ(y.to_vector(), want.to_vector());
  Tensor small = Tensor::empty({3});  // wrong size: replaced
  conv2d_into(x, w, nullptr, p, small);
  EXPECT_EQ(small.to_vector(), want.to_vector());
  Tensor same = x;  // x's own buffer is never the output
  conv2d_into(x, test::uniform_tensor({4, 4, 1, 1}, 9), nullptr, ConvParams{}, same);
  EXPECT_NE(same.data<float>(), x.data<float>());
}

namespace {

// conv2d_into with an epilogue against conv2d followed by the same arithmetic done separately.
void expect_epilogue_matches(const Case& c, uint32_t seed, bool constant) {
  SCOPED_TRACE(::testing::Message() << "cin " << c.cin << " cout " << c.cout << " k " << c.kh << " g " << c.groups);
  const Tensor x = test::uniform_tensor({c.cin, c.h, c.w}, seed);
  const Tensor w = test::uniform_tensor({c.cout, c.cin / c.groups, c.kh, c.kw}, seed + 1);
  const Tensor b = test::uniform_tensor({c.cout}, seed + 2);
  ConvParams p;
  p.stride[0] = p.stride[1] = c.stride;
  p.padding[0] = p.padding[1] = c.pad;
  p.dilation[0] = p.dilation[1] = c.dil;
  p.groups = c.groups;
  const Tensor plain = conv2d(x, w, &b, p);
  const Tensor res = test::uniform_tensor(plain.shape(), seed + 3);
  ConvEpilogue e;
  e.lo = 0.0f;
  e.hi = 0.75f;
  e.residual = &res;
  e.res_scale = 0.5f;
  e.constant_weights = constant;
  Tensor got;
  conv2d_into(x, w, &b, p, got, e);
  ASSERT_EQ(got.shape(), plain.shape());
  int clamped_low = 0, clamped_high = 0;
  for (int64_t i = 0; i < plain.numel(); ++i) {
    const float want = std::min(std::max(0.5f * plain.data<float>()[i] + res.data<float>()[i], 0.0f), 0.75f);
    ASSERT_NEAR(got.data<float>()[i], want, 1e-6f) << "element " << i;
    clamped_low += want == 0.0f;
    clamped_high += want == 0.75f;
  }
  EXPECT_GT(clamped_low, 0);  // both ends of the clamp were exercised
  EXPECT_GT(clamped_high, 0);
  // ReLU alone, no residual: exactly max(conv + bias, 0).
  ConvEpilogue relu;
  relu.lo = 0.0f;
  relu.constant_weights = constant;
  conv2d_into(x, w, &b, p, got, relu);
  for (int64_t i = 0; i < plain.numel(); ++i)
    ASSERT_EQ(got.data<float>()[i], std::max(plain.data<float>()[i], 0.0f)) << "element " << i;
}

const Case kEpilogueCases[] = {
    {3, 64, 37, 41, 3, 3, 1, 1, 1, 1},    // SR-style
    {40, 30, 13, 17, 1, 1, 1, 0, 1, 1},   // pointwise stride 1 (the plain-copy packing), ragged tiles
    {16, 24, 11, 12, 1, 1, 2, 0, 1, 1},   // pointwise stride 2 (ResNet downsample)
    {8, 12, 17, 35, 3, 3, 1, 1, 1, 4},    // grouped
    {12, 12, 15, 16, 3, 3, 1, 1, 1, 12},  // depthwise
};

}  // namespace

TEST(Conv, EpilogueFusesBiasResidualAndClamp) {
  uint32_t seed = 900;
  for (const Case& c : kEpilogueCases) expect_epilogue_matches(c, seed += 10, false);
}

TEST(Conv, EpilogueFusesBiasResidualAndClampOnAvx2) {
  if (active_isa() == Isa::Scalar) GTEST_SKIP() << "no AVX2";
  const Isa before = active_isa();
  force_isa(Isa::Avx2);
  uint32_t seed = 1900;
  for (const Case& c : kEpilogueCases) expect_epilogue_matches(c, seed += 10, true);
  force_isa(before);
}

TEST(Conv, ConstantWeightsArePackedOnceAndKeyedByIsa) {
  const Tensor x = test::uniform_tensor({5, 10, 12}, 71);
  const Tensor w = test::uniform_tensor({9, 5, 3, 3}, 72);
  ConvParams p;
  p.padding[0] = p.padding[1] = 1;
  const Tensor want = conv2d(x, w, nullptr, p);
  ConvEpilogue e;
  e.constant_weights = true;
  const size_t before = conv_weight_cache_bytes();
  Tensor y;
  conv2d_into(x, w, nullptr, p, y, e);
  const size_t after_first = conv_weight_cache_bytes();
  EXPECT_GT(after_first, before);
  conv2d_into(x, w, nullptr, p, y, e);  // a hit: nothing new cached
  EXPECT_EQ(conv_weight_cache_bytes(), after_first);
  EXPECT_EQ(y.to_vector(), want.to_vector());
  if (active_isa() == Isa::Avx512) {  // another ISA's tile height gets its own packing
    force_isa(Isa::Avx2);
    const Tensor want2 = conv2d(x, w, nullptr, p);
    conv2d_into(x, w, nullptr, p, y, e);
    EXPECT_EQ(y.to_vector(), want2.to_vector());
    force_isa(Isa::Avx512);
  }
}

TEST(Conv, EpilogueRejectsBadResidualAndClamp) {
  const Tensor x = test::uniform_tensor({4, 6, 6}, 81);
  const Tensor w = test::uniform_tensor({3, 4, 1, 1}, 82);
  const Tensor wrong = test::uniform_tensor({3, 6, 5}, 83);
  ConvEpilogue e;
  e.residual = &wrong;
  Tensor y;
  EXPECT_THROW(conv2d_into(x, w, nullptr, ConvParams{}, y, e), std::invalid_argument);
  ConvEpilogue inverted;
  inverted.lo = 1.0f;
  inverted.hi = 0.0f;
  EXPECT_THROW(conv2d_into(x, w, nullptr, ConvParams{}, y, inverted), std::invalid_argument);
  // The output never shares the residual's buffer (the GEMM accumulates into y).
  const Tensor res = test::uniform_tensor({3, 6, 6}, 84);
  const Tensor want = conv2d(x, w, nullptr, ConvParams{});
  ConvEpilogue add;
  add.residual = &res;
  Tensor aliased = res;
  conv2d_into(x, w, nullptr, ConvParams{}, aliased, add);
  EXPECT_NE(aliased.data<float>(), res.data<float>());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(aliased.data<float>()[i], want.data<float>()[i] + res.data<float>()[i], 1e-6f);
}

TEST(Conv, EpilogueAndPackingOnTheScalarPath) {
  const Isa before = active_isa();
  force_isa(Isa::Scalar);  // the generic build of conv_kernels_impl.h and the scalar microkernel
  uint32_t seed = 2900;
  for (const Case& c : kEpilogueCases) expect_epilogue_matches(c, seed += 10, true);
  expect_matches(kCases[0], 2990);
  expect_matches(kCases[3], 2995);
  force_isa(before);
}

TEST(Conv, MatchesDirectLoopOnWideRows) {
  uint32_t seed = 3100;
  for (const Case& c : kDirectCases) expect_matches(c, seed += 10);
  for (const Case& c : kDirectCases) expect_epilogue_matches(c, seed += 10, true);
  if (active_isa() == Isa::Scalar) return;
  const Isa before = active_isa();
  force_isa(Isa::Avx2);  // the same shapes on the GEMM path
  for (const Case& c : kDirectCases) expect_matches(c, seed += 10);
  force_isa(before);
}

// The direct kernel at stride 2 (rows of >= 64 outputs) against the GEMM path (a narrower crop of
// the same input, < 64 outputs): the output columns whose windows lie inside the crop are
// bit-identical, on 1 and 2 threads, with bias and ReLU.
TEST(Conv, StrideTwoDirectIsBitIdenticalToTheGemmPath) {
  struct Crop { int64_t cin, cout, h, w, k, crop; };
  const Crop cases[] = {{3, 64, 13, 230, 7, 120},    // ResNet's stem: 115 outputs per row vs 60
                        {5, 12, 9, 141, 3, 100}};    // a 3x3 stem, odd width
  const int threads_before = num_threads();
  uint32_t seed = 7100;
  for (const Crop& c : cases) {
    SCOPED_TRACE(::testing::Message() << "k " << c.k << " w " << c.w);
    const Tensor x = test::uniform_tensor({c.cin, c.h, c.w}, seed += 10);
    Tensor xc = Tensor::empty({c.cin, c.h, c.crop});
    for (int64_t r = 0; r < c.cin * c.h; ++r)
      std::copy_n(x.data<float>() + r * c.w, c.crop, xc.data<float>() + r * c.crop);
    const Tensor w = test::uniform_tensor({c.cout, c.cin, c.k, c.k}, seed + 1), b = test::uniform_tensor({c.cout}, seed + 2);
    ConvParams p;
    p.stride[0] = p.stride[1] = 2;
    p.padding[0] = p.padding[1] = c.k / 2;
    ConvEpilogue e;
    e.lo = 0.0f;
    for (const int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor y, yc;
      conv2d_into(x, w, &b, p, y, e);
      conv2d_into(xc, w, &b, p, yc, e);
      const int64_t Ho = y.dim(1), Wo = y.dim(2), Wc = yc.dim(2);
      ASSERT_GE(Wo, 64);
      ASSERT_LT(Wc, 64);
      const int64_t same = (c.crop - 1 - (c.k - 1 - c.k / 2)) / 2 + 1;  // columns 2 ow - k/2 + k - 1 < crop
      int64_t compared = 0;
      for (int64_t o = 0; o < c.cout; ++o)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < same; ++ow, ++compared)
            ASSERT_EQ(y.data<float>()[(o * Ho + oh) * Wo + ow], yc.data<float>()[(o * Ho + oh) * Wc + ow])
                << "threads " << threads << " channel " << o << " row " << oh << " column " << ow;
      EXPECT_GT(compared, c.cout * Ho * 40);
    }
  }
  set_num_threads(threads_before);
}

// pixel_shuffle fused into the conv's store (the direct kernel writes r = 2 in place; other r
// and other ISAs shuffle afterwards) gives exactly pixel_shuffle of the unfused result.
TEST(Conv, FusedPixelShuffleEqualsSeparateShuffle) {
  struct Shape4 { int64_t cin, cout, h, w, r; };
  const Shape4 cases[] = {{5, 12, 6, 70, 2},   // ragged last vector and a 4-channel tile
                          {8, 16, 5, 64, 2},   // two full 8-channel tiles
                          {4, 18, 4, 66, 3}};  // r = 3: conv, then a separate shuffle
  const Isa before = active_isa();
  for (const Isa isa : {before, Isa::Avx2}) {
    if (isa != before && before == Isa::Scalar) continue;
    force_isa(isa);
    uint32_t seed = 4100;
    for (const Shape4& s : cases) {
      SCOPED_TRACE(::testing::Message() << "cout " << s.cout << " w " << s.w << " r " << s.r);
      const Tensor x = test::uniform_tensor({s.cin, s.h, s.w}, seed += 10);
      const Tensor w = test::uniform_tensor({s.cout, s.cin, 3, 3}, seed + 1);
      const Tensor b = test::uniform_tensor({s.cout}, seed + 2);
      const Tensor res = test::uniform_tensor({s.cout, s.h, s.w}, seed + 3);
      ConvParams p;
      p.padding[0] = p.padding[1] = 1;
      ConvEpilogue e;
      e.lo = -0.5f;
      e.residual = &res;
      Tensor plain;
      conv2d_into(x, w, &b, p, plain, e);
      const Tensor want = pixel_shuffle(plain, s.r);
      e.pixel_shuffle = s.r;
      Tensor got = Tensor::empty({s.cout * s.h * s.w});  // a reusable buffer of the right size
      conv2d_into(x, w, &b, p, got, e);
      ASSERT_EQ(got.shape(), want.shape());
      for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "element " << i;
    }
  }
  force_isa(before);
  const Tensor x = test::uniform_tensor({2, 4, 64}, 1), w = test::uniform_tensor({6, 2, 3, 3}, 2);
  ConvEpilogue bad;
  bad.pixel_shuffle = 2;  // 6 channels are not groups of 4
  Tensor y;
  EXPECT_THROW(conv2d_into(x, w, nullptr, ConvParams{}, y, bad), std::invalid_argument);
  bad.pixel_shuffle = 0;
  EXPECT_THROW(conv2d_into(x, w, nullptr, ConvParams{}, y, bad), std::invalid_argument);
}

// Few positions and many output channels (ResNet-50's 14x14 and 7x7 stages): conv_few_positions.cpp
// packs all patches once and splits the output channels between threads (conv2d_channel_split).
// Against the definition on 1 and 2 threads, bit-identical between the two (same tiles and K
// slices), with the fused epilogue, on both ISAs.
TEST(Conv, FewPositionsSplitByOutputChannels) {
  const Case cases[] = {
      {64, 130, 7, 7, 3, 3, 1, 1, 1, 1},    // 49 positions: a ragged panel, a partial channel block
      {48, 120, 13, 15, 1, 1, 2, 0, 1, 1},  // pointwise stride 2 (a ResNet downsample)
      {40, 150, 9, 11, 3, 3, 2, 1, 1, 1},   // strided 3x3
      {16, 240, 9, 9, 3, 3, 1, 1, 1, 2},    // grouped: 120 channels per group
      {200, 128, 5, 3, 1, 1, 1, 0, 1, 1},   // pointwise stride 1, 15 positions
  };
  const Isa isa_before = active_isa();
  const int threads_before = num_threads();
  uint32_t seed = 5100;
  for (const Isa isa : {isa_before, Isa::Avx2}) {
    if (isa != isa_before && isa_before == Isa::Scalar) continue;
    force_isa(isa);
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "isa " << isa_name(isa) << " cin " << c.cin << " cout " << c.cout);
      const Tensor x = test::uniform_tensor({c.cin, c.h, c.w}, seed += 10);
      const Tensor w = test::uniform_tensor({c.cout, c.cin / c.groups, c.kh, c.kw}, seed + 1);
      const Tensor b = test::uniform_tensor({c.cout}, seed + 2);
      ConvParams p;
      p.stride[0] = p.stride[1] = c.stride;
      p.padding[0] = p.padding[1] = c.pad;
      p.groups = c.groups;
      set_num_threads(1);
      const Tensor one = conv2d(x, w, &b, p);
      set_num_threads(2);
      const Tensor two = conv2d(x, w, &b, p);
      expect_matches(c, seed + 3);
      expect_epilogue_matches(c, seed + 4, true);
      ASSERT_EQ(one.shape(), two.shape());
      for (int64_t i = 0; i < one.numel(); ++i) ASSERT_EQ(one.data<float>()[i], two.data<float>()[i]) << "element " << i;
    }
  }
  force_isa(isa_before);
  set_num_threads(threads_before);
}

// Few positions and whole 32-channel panels (ResNet-50's 14x14 and 7x7 stages) take the transposed
// tile (conv_few_positions.cpp conv2d_transposed: positions as the microkernel's rows). Each case
// runs twice: with C output channels (transposed) and with C + 1 whose first C weight rows are the
// same (not a whole number of panels: the panel path). The first C channels must be bit-identical,
// on 1 and 2 threads, with the residual / clamp epilogue, and match the definition.
TEST(Conv, TransposedTileIsBitIdenticalToThePanelPath) {
  const Case cases[] = {
      {64, 128, 7, 7, 3, 3, 1, 1, 1, 1},     // 49 positions = 14 + 14 + 14 + 7 rows
      {96, 128, 14, 14, 1, 1, 1, 0, 1, 1},   // 196 positions, pointwise (plain-copy packing)
      {48, 160, 13, 15, 1, 1, 2, 0, 1, 1},   // pointwise stride 2 (a ResNet downsample): 56
      {40, 128, 9, 11, 3, 3, 2, 1, 1, 1},    // strided 3x3: 30 positions
      {16, 256, 9, 9, 3, 3, 1, 1, 1, 2},     // grouped: 128 channels per group
      {300, 128, 5, 3, 3, 3, 1, 1, 1, 1},    // kdim 2700: several K slices
      // AVX-512 gathers the rows of the non-1x1 cases from a padded copy: two 7-wide rows per tile,
      // one 14-wide row, two runs of 14 on 28-wide rows, runs of 14 + 14 + 12 on 40-wide rows,
      // two 6-wide rows (then one), dilation, and stride 3 (packed patches).
      {64, 128, 14, 14, 3, 3, 2, 1, 1, 1},   // ResNet's 3x3 / 2 at 14x14: 7x7 outputs
      {32, 128, 28, 28, 3, 3, 2, 1, 1, 1},   // and at 28x28: 14x14 outputs
      {32, 128, 56, 56, 3, 3, 2, 1, 1, 1},   // and at 56x56: 784 outputs (transposed only when gathered)
      {24, 128, 5, 40, 3, 3, 1, 1, 1, 1},    // 200 positions on 40-wide rows
      {32, 128, 9, 9, 3, 3, 1, 2, 2, 1},     // dilation 2
      {16, 128, 11, 12, 3, 2, 2, 0, 1, 1},   // 3x2, no padding, stride 2: 5 x 6 outputs
      {32, 128, 15, 15, 3, 3, 3, 1, 1, 1},   // stride 3: packed patches
  };
  const Isa isa_before = active_isa();
  const int threads_before = num_threads();
  uint32_t seed = 6100;
  for (const Isa isa : {isa_before, Isa::Avx2}) {
    if (isa != isa_before && isa_before == Isa::Scalar) continue;
    force_isa(isa);
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "isa " << isa_name(isa) << " cin " << c.cin << " " << c.h << "x" << c.w);
      const int64_t cout1 = c.cout + c.groups, cin_g = c.cin / c.groups;  // one more channel per group
      const Tensor x = test::uniform_tensor({c.cin, c.h, c.w}, seed += 10);
      const Tensor w1 = test::uniform_tensor({cout1, cin_g, c.kh, c.kw}, seed + 1);
      const Tensor b1 = test::uniform_tensor({cout1}, seed + 2);
      // w / b: w1 / b1 without each group's last channel.
      Tensor w = Tensor::empty({c.cout, cin_g, c.kh, c.kw}), b = Tensor::empty({c.cout});
      const int64_t per = cin_g * c.kh * c.kw, cg = c.cout / c.groups;
      for (int64_t o = 0; o < c.cout; ++o) {
        const int64_t o1 = o / cg * (cg + 1) + o % cg;
        std::copy_n(w1.data<float>() + o1 * per, per, w.data<float>() + o * per);
        b.data<float>()[o] = b1.data<float>()[o1];
      }
      ConvParams p;
      p.stride[0] = p.stride[1] = c.stride;
      p.padding[0] = p.padding[1] = c.pad;
      p.dilation[0] = p.dilation[1] = c.dil;
      p.groups = c.groups;
      const int64_t Ho = (c.h + 2 * c.pad - c.dil * (c.kh - 1) - 1) / c.stride + 1;
      const int64_t Wo = (c.w + 2 * c.pad - c.dil * (c.kw - 1) - 1) / c.stride + 1;
      const Tensor res = test::uniform_tensor({c.cout, Ho, Wo}, seed + 3), res1 = test::uniform_tensor({cout1, Ho, Wo}, seed + 3);
      Tensor r1 = res1;  // the residual of the C + 1 run: res in the shared channels
      for (int64_t o = 0; o < c.cout; ++o)
        std::copy_n(res.data<float>() + o * Ho * Wo, Ho * Wo,
                    r1.data<float>() + (o / cg * (cg + 1) + o % cg) * Ho * Wo);
      ConvEpilogue e;
      e.lo = -0.5f;
      e.residual = &res;
      e.res_scale = 0.75f;
      ConvEpilogue e1 = e;
      e1.residual = &r1;
      for (const int threads : {1, 2}) {
        set_num_threads(threads);
        Tensor y, y1;
        conv2d_into(x, w, &b, p, y, e);
        conv2d_into(x, w1, &b1, p, y1, e1);
        for (int64_t o = 0; o < c.cout; ++o)
          for (int64_t i = 0; i < Ho * Wo; ++i)
            ASSERT_EQ(y.data<float>()[o * Ho * Wo + i], y1.data<float>()[(o / cg * (cg + 1) + o % cg) * Ho * Wo + i])
                << "threads " << threads << " channel " << o << " position " << i;
      }
      expect_matches(c, seed + 4);
    }
  }
  force_isa(isa_before);
  set_num_threads(threads_before);
}

// The gathered-rows kernel takes a run of 1-14 rows or two runs of r <= 7 rows, at stride 1 or 2;
// anything else is an error that names the rows and the stride.
TEST(Conv, GatheredRowsKernelRejectsUnsupportedTiles) {
  if (active_isa() != Isa::Avx512) GTEST_SKIP() << "the gathered-rows kernel is AVX-512's";
  alignas(64) float a[64] = {}, b[32] = {}, c[32 * 14] = {};
  const int32_t koff[1] = {0};
  auto call = [&](int64_t r1, int64_t r2, int64_t stride) {
    sgemm_a_gather_avx512(1, a, r1, a + 16, r2, stride, koff, b, c, 32, 32, false);
  };
  EXPECT_NO_THROW(call(14, 0, 2));
  EXPECT_NO_THROW(call(7, 7, 1));
  for (const auto& [r1, r2, stride] : {std::tuple{15, 0, 1}, {0, 0, 1}, {8, 8, 1}, {6, 5, 2}, {4, 0, 3}}) {
    try {
      call(r1, r2, stride);
      ADD_FAILURE() << "rows " << r1 << " + " << r2 << " at stride " << stride << " accepted";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("rows " + std::to_string(r1) + " + " + std::to_string(r2)), std::string::npos)
          << e.what();
    }
  }
}

// Max pooling at stride 2 (ResNet's 3x3 / 2 stem pool) runs tap by tap over whole output rows:
// exactly the maximum over the window's in-bounds values, for even and odd sizes, kernels 2-5.
TEST(Conv, MaxPoolStrideTwoMatchesTheWindowMaximum) {
  // kernel h, kernel w, padding, height, width
  const int64_t shapes[][5] = {
      {3, 3, 1, 112, 112}, {3, 3, 1, 9, 7}, {2, 2, 0, 6, 11}, {5, 5, 2, 13, 10}, {3, 2, 1, 8, 5}};
  uint32_t seed = 7100;
  for (const auto& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "kernel " << s[0] << "x" << s[1] << " pad " << s[2] << " " << s[3] << "x"
                                      << s[4]);
    const Tensor x = test::uniform_tensor({4, s[3], s[4]}, seed += 10);
    const int64_t k[2] = {s[0], s[1]}, st[2] = {2, 2}, pad[2] = {s[2], std::min(s[2], s[1] / 2)};
    const Tensor y = pool2d(x, PoolKind::Max, k, st, pad);
    const int64_t Ho = (s[3] + 2 * pad[0] - k[0]) / 2 + 1, Wo = (s[4] + 2 * pad[1] - k[1]) / 2 + 1;
    ASSERT_EQ(y.shape(), (Shape{4, Ho, Wo}));
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          float want = -INFINITY;
          for (int64_t i = 0; i < k[0]; ++i)
            for (int64_t j = 0; j < k[1]; ++j) {
              const int64_t ih = oh * 2 - pad[0] + i, iw = ow * 2 - pad[1] + j;
              if (ih >= 0 && ih < s[3] && iw >= 0 && iw < s[4])
                want = std::max(want, x.data<float>()[(c * s[3] + ih) * s[4] + iw]);
            }
          ASSERT_EQ(y.data<float>()[(c * Ho + oh) * Wo + ow], want) << c << " " << oh << " " << ow;
        }
  }
}

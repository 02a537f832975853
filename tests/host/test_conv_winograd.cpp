// Winograd F(2x2, 3x3) and F(4x4, 3x3) (conv_winograd.cpp) against a double-precision direct
// convolution and against conv2d's GEMM path: odd sizes, padding 0 and 1, the fused epilogue
// (bias, res_scale, residual, clamp), pixel shuffle, 1 and 2 threads, the filter cache, and the
// selection rule. Tolerance: |y - ref| <= 2e-5 (m = 2) / 1e-4 (m = 4) times (1 + the sum of
// |x w| over the taps), well above the measured error (printed) and far below any layout bug.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/conv.h"
#include "random_tensor.h"
#include "host/conv_winograd.h"

using namespace xdna;
using namespace xdna::host;

namespace {

struct Ref {
  std::vector<double> y, mag;  // conv + bias, and Σ |x w| per output
};
Ref reference(const Tensor& x, const Tensor& w, const Tensor& b, int64_t pad) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2), Cout = w.dim(0);
  const int64_t Ho = H + 2 * pad - 2, Wo = W + 2 * pad - 2;
  Ref r{std::vector<double>(Cout * Ho * Wo), std::vector<double>(Cout * Ho * Wo)};
  const float *px = x.data<float>(), *pw = w.data<float>();  // not per tap: unoptimised builds call data()
  for (int64_t o = 0; o < Cout; ++o)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double acc = b.data<float>()[o], mag = 0;
        for (int64_t c = 0; c < Cin; ++c)
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 3; ++j) {
              const int64_t ih = oh - pad + i, iw = ow - pad + j;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = double(px[(c * H + ih) * W + iw]) * pw[((o * Cin + c) * 3 + i) * 3 + j];
              acc += v;
              mag += std::fabs(v);
            }
        r.y[(o * Ho + oh) * Wo + ow] = acc;
        r.mag[(o * Ho + oh) * Wo + ow] = mag;
      }
  return r;
}

struct Case {
  int64_t cin, cout, h, w, pad;
};

// A case's inputs and its double-precision reference, computed once for every tile size, thread
// count and epilogue checked on them (the reference loop is most of this test's time, 4x more
// when it was recomputed per check; CI runs it unoptimised under the sanitizers).
struct Inputs {
  Case c;
  Tensor x, w, b, res;
  Ref r;
};
Inputs inputs(const Case& c, uint32_t seed) {
  const int64_t Ho = c.h + 2 * c.pad - 2, Wo = c.w + 2 * c.pad - 2;
  Inputs in{c, test::uniform_tensor({c.cin, c.h, c.w}, seed), test::uniform_tensor({c.cout, c.cin, 3, 3}, seed + 1),
            test::uniform_tensor({c.cout}, seed + 2), test::uniform_tensor({c.cout, Ho, Wo}, seed + 3), {}};
  in.r = reference(in.x, in.w, in.b, c.pad);
  return in;
}

// Runs conv2d_winograd with tile m and the given epilogue; returns the largest error relative to
// (1 + Σ|x w|).
double check(const Inputs& in, int m, bool residual, float lo, float hi, float scale, int64_t shuffle) {
  const Case& c = in.c;
  SCOPED_TRACE(::testing::Message() << "m " << m << " threads " << num_threads() << " cin " << c.cin << " cout "
                                    << c.cout << " " << c.h << "x" << c.w << " pad " << c.pad << " residual "
                                    << residual << " shuffle " << shuffle);
  const int64_t Ho = c.h + 2 * c.pad - 2, Wo = c.w + 2 * c.pad - 2, P = Ho * Wo;
  const Tensor& res = in.res;
  const Ref& r = in.r;
  ConvParams p;
  p.padding[0] = p.padding[1] = c.pad;
  const EpilogueRows ep{in.b.data<float>(), residual ? res.data<float>() : nullptr, scale, lo, hi, P};
  Tensor y = Tensor::empty({c.cout / (shuffle * shuffle), Ho * shuffle, Wo * shuffle});
  conv2d_winograd(in.x, in.w, p, Ho, Wo, ep, false, shuffle, m, y);
  const double tol = m == 2 ? 2e-5 : 1e-4;
  double worst = 0;
  for (int64_t o = 0; o < c.cout; ++o)
    for (int64_t q = 0; q < P; ++q) {
      const int64_t oh = q / Wo, ow = q % Wo;
      double want = scale * r.y[o * P + q] + (residual ? res.data<float>()[o * P + q] : 0.0);
      want = std::min<double>(std::max<double>(want, lo), hi);
      const int64_t s2 = shuffle * shuffle, ch = o / s2, i = o % s2 / shuffle, j = o % shuffle;
      const float got = y.data<float>()[(ch * Ho * shuffle + oh * shuffle + i) * Wo * shuffle + ow * shuffle + j];
      const double err = std::fabs(got - want) / (1.0 + std::fabs(scale) * r.mag[o * P + q]);
      worst = std::max(worst, err);
      if (err > tol) {
        ADD_FAILURE() << "o " << o << " (" << oh << ", " << ow << "): " << got << " vs " << want;
        return worst;
      }
    }
  return worst;
}

class WinogradTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (active_isa() != Isa::Avx512) GTEST_SKIP() << "Winograd runs on AVX-512 only";
  }
  void TearDown() override { set_num_threads(0); }
};

TEST_F(WinogradTest, MatchesDirectConvolution) {
  // Odd and exact tile counts, padding 0 and 1, several tile blocks per call (64 channels), more
  // than one 64-channel block with a ragged one (130), K past one slice (300), wide rows.
  const Case cases[] = {{16, 16, 8, 8, 1},   {3, 5, 7, 9, 1},     {17, 33, 13, 11, 1}, {32, 64, 14, 14, 1},
                        {64, 32, 29, 31, 1}, {24, 40, 10, 17, 0}, {64, 48, 30, 30, 0}, {70, 130, 9, 23, 1},
                        {300, 32, 12, 12, 1}, {8, 16, 9, 61, 1},    {8, 40, 7, 122, 0},  {33, 20, 30, 58, 1}};
  double worst[5] = {};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Inputs in = inputs(c, seed += 10);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (int m : {2, 4}) worst[m] = std::max(worst[m], check(in, m, false, -INFINITY, INFINITY, 1.0f, 1));
    }
  }
  std::printf("worst error / (1 + sum |x w|): F(2x2) %.3g, F(4x4) %.3g\n", worst[2], worst[4]);
}

TEST_F(WinogradTest, FusedEpilogueAndPixelShuffle) {
  const Inputs edsr = inputs({32, 64, 19, 21, 1}, 100), wide = inputs({16, 32, 10, 63, 1}, 110),
               relu = inputs({16, 48, 15, 15, 1}, 120), up2 = inputs({32, 128, 17, 13, 1}, 130),
               up3 = inputs({16, 36, 9, 10, 1}, 140);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int m : {2, 4}) {
      check(edsr, m, true, -INFINITY, INFINITY, 0.1f, 1);  // EDSR's res_scale + skip
      check(wide, m, true, -INFINITY, INFINITY, 0.5f, 1);  // wide rows: no gathers
      check(relu, m, false, 0.0f, INFINITY, 1.0f, 1);      // ReLU
      check(relu, m, true, 0.0f, 6.0f, 1.0f, 1);           // residual + ReLU6
      check(up2, m, false, -INFINITY, INFINITY, 1.0f, 2);  // upsampler, r = 2
      check(up3, m, false, -0.5f, 0.5f, 1.0f, 3);          // r = 3
    }
  }
}

// conv2d_into chooses Winograd for a large 3x3; its result matches the GEMM path's within the
// tolerance, with the filter transformed once for constant weights.
TEST_F(WinogradTest, Conv2dDispatchAndCache) {
  ConvParams p;
  p.padding[0] = p.padding[1] = 1;
  ASSERT_EQ(winograd_tile(p, 64, 64, 3, 3, 56, 56), 4);
  ASSERT_EQ(winograd_tile(p, 32, 32, 3, 3, 16, 16), 4);  // the shape run below
  EXPECT_EQ(winograd_tile(p, 256, 256, 3, 3, 14, 14), 2);
  EXPECT_EQ(winograd_tile(p, 512, 512, 3, 3, 7, 7), 0);
  EXPECT_EQ(winograd_tile(p, 16, 16, 3, 3, 64, 64), 0);
  EXPECT_EQ(winograd_tile(p, 3, 64, 3, 3, 56, 56), 0);
  ConvParams s2 = p;
  s2.stride[0] = s2.stride[1] = 2;
  EXPECT_EQ(winograd_tile(s2, 64, 64, 3, 3, 56, 56), 0);
  ConvParams grouped = p;
  grouped.groups = 2;
  EXPECT_EQ(winograd_tile(grouped, 64, 64, 3, 3, 56, 56), 0);
  EXPECT_EQ(winograd_tile(p, 64, 64, 5, 5, 56, 56), 0);

  const Tensor x = test::uniform_tensor({32, 16, 16}, 7), w = test::uniform_tensor({32, 32, 3, 3}, 8), b = test::uniform_tensor({32}, 9);
  const Ref r = reference(x, w, b, 1);
  const size_t before = winograd_weight_cache_bytes();
  ConvEpilogue e;
  e.constant_weights = true;
  Tensor y;
  conv2d_into(x, w, &b, p, y, e);
  EXPECT_GT(winograd_weight_cache_bytes(), before);
  const size_t cached = winograd_weight_cache_bytes();
  conv2d_into(x, w, &b, p, y, e);
  EXPECT_EQ(winograd_weight_cache_bytes(), cached);
  for (int64_t i = 0; i < y.numel(); ++i)
    ASSERT_LE(std::fabs(y.data<float>()[i] - r.y[i]), 1e-4 * (1.0 + r.mag[i])) << i;
}

TEST_F(WinogradTest, RejectsUnsupportedConvolutions) {
  const Tensor x = test::uniform_tensor({4, 8, 8}, 1), w = test::uniform_tensor({4, 4, 5, 5}, 2);
  ConvParams p;
  Tensor y = Tensor::empty({4, 4, 4});
  const EpilogueRows ep{nullptr, nullptr, 1.0f, -INFINITY, INFINITY, 16};
  EXPECT_THROW(conv2d_winograd(x, w, p, 4, 4, ep, false, 1, 4, y), std::invalid_argument);
  const Tensor w3 = test::uniform_tensor({4, 4, 3, 3}, 3);
  EXPECT_THROW(conv2d_winograd(x, w3, p, 6, 6, ep, false, 1, 3, y), std::invalid_argument);
}

}  // namespace

// npu-sim conv (sim_exec_conv.cpp running aie_kernels/conv2d_bf16.cc) against a direct host loop
// of the same numerics (bf16 operands, f32 accumulation in (ky, kx, ci) order, bias and
// activation in f32, round to nearest even): bit-exact; and against the f32 host conv within
// bf16 tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "npu/aie_numerics.h"
#include "npu/sim_exec_conv.h"

using namespace xdna;
using xdna::npu::ConvSimLayer;

namespace {

float bfr(float v) { return aie::to_float(aie::to_bf16(v, aie::Rounding::NearestEven)); }

Tensor rand_tensor(std::vector<int64_t> shape, unsigned seed, float scale) {
  Tensor t = Tensor::empty(shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(rng);
  return t;
}

// The direct reference: one f32 accumulator per output in (ky, kx, ci) order; `bf16`: operands
// and the result rounded to bf16 (the NPU's numerics), else plain f32.
Tensor reference(const Tensor& x, const ConvSimLayer& l, bool bf16 = true) {
  auto bfr = [bf16](float v) { return bf16 ? ::bfr(v) : v; };
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2), Co = l.w.dim(0), K = l.w.dim(2);
  const int64_t Ho = (H + l.pad[0] + l.pad[1] - K) / l.stride + 1, Wo = (W + l.pad[2] + l.pad[3] - K) / l.stride + 1;
  const bool dw = l.groups > 1;
  Tensor y = Tensor::empty({Co, Ho, Wo});
  for (int64_t co = 0; co < Co; ++co)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox) {
        float acc = 0.0f;
        for (int64_t ky = 0; ky < K; ++ky)
          for (int64_t kx = 0; kx < K; ++kx) {
            const int64_t iy = oy * l.stride + ky - l.pad[0], ix = ox * l.stride + kx - l.pad[2];
            const bool in = iy >= 0 && iy < H && ix >= 0 && ix < W;
            for (int64_t ci = dw ? co : 0; ci < (dw ? co + 1 : C); ++ci) {
              const float xv = in ? bfr(x.data<float>()[(ci * H + iy) * W + ix]) : 0.0f;
              const float wv = bfr(l.w.data<float>()[((co * (dw ? 1 : C) + (dw ? 0 : ci)) * K + ky) * K + kx]);
              acc = acc + xv * wv;
            }
          }
        float v = acc + (l.bias.defined() ? l.bias.data<float>()[co] : 0.0f);
        if (v < 0) v = v * l.neg_slope;
        v = std::min(std::max(v, l.lo), l.hi);
        y.data<float>()[(co * Ho + oy) * Wo + ox] = bfr(v);
      }
  return y;
}

struct Case {
  const char* what;
  int64_t cin, cout, h, w, k, stride, groups, pad[4];
  float lo, hi, slope;
};

}  // namespace

TEST(ConvSim, BitExactAgainstDirectBf16LoopAndCloseToF32) {
  const float inf = 3.4028235e38f;
  const Case cases[] = {
      {"3x3 same, ReLU6, c_in 3 padded", 3, 16, 13, 11, 3, 1, 1, {1, 1, 1, 1}, 0, 6, 0},
      {"3x3 stride 2, TF SAME (pad after)", 8, 24, 12, 10, 3, 2, 1, {0, 1, 0, 1}, -inf, inf, 1},
      {"depthwise 5x5 stride 2", 40, 40, 15, 9, 5, 2, 40, {1, 2, 1, 2}, 0, 6, 0},
      {"pointwise 1x1, many outputs", 32, 80, 6, 7, 1, 1, 1, {0, 0, 0, 0}, -inf, inf, 1},
      {"3x3 leaky ReLU", 16, 12, 9, 9, 3, 1, 1, {1, 1, 1, 1}, -inf, inf, 0.2f},
      {"tall image: several bands", 8, 16, 70, 5, 3, 1, 1, {1, 1, 1, 1}, 0, inf, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ConvSimLayer l;
    l.w = rand_tensor({c.cout, c.cin / c.groups, c.k, c.k}, 1, 0.3f);
    l.bias = rand_tensor({c.cout}, 2, 0.1f);
    l.stride = c.stride;
    l.groups = c.groups;
    std::copy(c.pad, c.pad + 4, l.pad);
    l.lo = c.lo, l.hi = c.hi, l.neg_slope = c.slope;
    const Tensor x = rand_tensor({c.cin, c.h, c.w}, 3, 1.0f);
    npu::ConvSimStats stats;
    const Tensor got = npu::conv2d_npu_sim(x, l, &stats);
    const Tensor want = reference(x, l);
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "element " << i;
    EXPECT_EQ(stats.convs, 1);
    EXPECT_GE(stats.invocations, 1);
    // Against f32 (the same loop without rounding): x ~ N(0, 1), w ~ N(0, 0.3); each product
    // is off by at most 2^-8 relative (two bf16 roundings), the result by 2^-9 more. Stated
    // tolerance: 0.03 sqrt(terms), about 3x the random-walk estimate 2^-8 * 0.3 * sqrt(terms) * 3.
    const Tensor f = reference(x, l, false);
    double max_err = 0;
    for (int64_t i = 0; i < f.numel(); ++i)
      max_err = std::max(max_err, double(std::fabs(f.data<float>()[i] - got.data<float>()[i])));
    const double terms = double(c.k * c.k * (c.groups > 1 ? 1 : c.cin));
    EXPECT_LT(max_err, 0.03 * std::sqrt(terms)) << "max |npu-sim - f32| " << max_err;
    EXPECT_GT(max_err, 0.0);
  }
}

TEST(ConvSim, RefusesWhatNoDesignTakes) {
  ConvSimLayer l;
  l.w = rand_tensor({8, 2, 3, 3}, 1, 0.1f);
  l.groups = 4;  // grouped, not depthwise
  EXPECT_NE(npu::conv_sim_unsupported(l).find("groups 4"), std::string::npos);
  EXPECT_THROW(npu::conv2d_npu_sim(rand_tensor({8, 5, 5}, 2, 1), l), std::invalid_argument);
  l.groups = 1;
  l.w = rand_tensor({8, 8, 3, 3}, 1, 0.1f);
  EXPECT_THROW(npu::conv2d_npu_sim(rand_tensor({4, 5, 5}, 2, 1), l), std::invalid_argument);  // channels
}

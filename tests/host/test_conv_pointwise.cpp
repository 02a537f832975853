// 1x1 convolutions on AVX-512 read the input in place (conv_pointwise.cpp use_pointwise_in_place:
// the microkernel's B operand from x's rows for many positions, its A operand for few; stride 2 via
// a subsampled copy) instead of packing patches. Each case must be bit-identical to the packed path
// (the AVX2 build: same K slices, the same FMA chain per element), on 1 and 2 threads, with and
// without the residual / clamp epilogue (which the in-place kernel applies in registers), and match
// the definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/conv.h"
#include "random_tensor.h"

using namespace xdna;
using namespace xdna::host;

namespace {

struct Case {
  int64_t cin, cout, h, w, stride, groups;
};

// The definition in double: y[o, p] = b[o] + Σ_c w[o, c] x[c, s p].
double reference(const Tensor& x, const Tensor& w, const Tensor& b, const Case& c, int64_t o, int64_t oh,
                 int64_t ow) {
  const int64_t cin_g = c.cin / c.groups, g = o / (c.cout / c.groups);
  double acc = b.data<float>()[o];
  for (int64_t k = 0; k < cin_g; ++k)
    acc += double(w.data<float>()[o * cin_g + k]) *
           x.data<float>()[((g * cin_g + k) * c.h + oh * c.stride) * c.w + ow * c.stride];
  return acc;
}

}  // namespace

TEST(ConvPointwise, InPlaceIsBitIdenticalToThePackedPath) {
  if (active_isa() != Isa::Avx512) GTEST_SKIP() << "the in-place kernels are AVX-512's";
  const Case cases[] = {
      {256, 64, 56, 56, 1, 1},   // ResNet-50's 56x56 reduce: 98 panels, two K slices (192 + 64)
      {64, 256, 56, 56, 1, 1},   // its expand: 256 channels = 224 + 32 (a partial channel block)
      {128, 37, 28, 28, 1, 1},   // 784 positions (a half panel), 37 channels (a partial tile)
      {96, 128, 14, 14, 1, 1},   // 196 positions: the transposed tile, rows read in place
      {400, 64, 7, 7, 1, 1},     // 49 positions, three K slices
      {48, 160, 13, 15, 2, 1},   // stride 2 (a ResNet downsample): 7x8, transposed
      {32, 40, 61, 45, 2, 1},    // stride 2, 31x23: the panel path
      {40, 24, 9, 70, 1, 2},     // grouped, rows of 70
      {8, 8, 19, 70, 3, 1},      // stride 3
  };
  const int threads_before = num_threads();
  uint32_t seed = 9100;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "cin " << c.cin << " cout " << c.cout << " " << c.h << "x" << c.w
                                      << " s " << c.stride << " g " << c.groups);
    const Tensor x = test::uniform_tensor({c.cin, c.h, c.w}, seed += 10);
    const Tensor w = test::uniform_tensor({c.cout, c.cin / c.groups, 1, 1}, seed + 1);
    const Tensor b = test::uniform_tensor({c.cout}, seed + 2);
    ConvParams p;
    p.stride[0] = p.stride[1] = c.stride;
    p.groups = c.groups;
    const int64_t Ho = (c.h - 1) / c.stride + 1, Wo = (c.w - 1) / c.stride + 1, P = Ho * Wo;
    const Tensor res = test::uniform_tensor({c.cout, Ho, Wo}, seed + 3);
    ConvEpilogue e;
    e.lo = -0.5f;
    e.hi = 0.5f;
    e.residual = &res;
    e.res_scale = 0.75f;
    force_isa(Isa::Avx2);  // the packed path
    set_num_threads(2);
    Tensor plain_ref, fused_ref;
    conv2d_into(x, w, &b, p, plain_ref);
    conv2d_into(x, w, &b, p, fused_ref, e);
    force_isa(Isa::Avx512);
    for (const int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor plain, fused;
      conv2d_into(x, w, &b, p, plain);
      conv2d_into(x, w, &b, p, fused, e);
      ASSERT_EQ(plain.shape(), (Shape{c.cout, Ho, Wo}));
      ASSERT_EQ(fused.shape(), plain.shape());
      for (int64_t i = 0; i < c.cout * P; ++i) {
        ASSERT_EQ(plain.data<float>()[i], plain_ref.data<float>()[i]) << "threads " << threads << " element " << i;
#ifdef __OPTIMIZE__
        ASSERT_EQ(fused.data<float>()[i], fused_ref.data<float>()[i]) << "threads " << threads << " element " << i;
#else
        // Unoptimised builds do not contract the packed path's separate epilogue into one fused
        // multiply-add, so the two paths round it differently: equal up to that last rounding.
        ASSERT_NEAR(fused.data<float>()[i], fused_ref.data<float>()[i],
                    4e-7 * (1.0 + std::fabs(fused_ref.data<float>()[i])))
            << "threads " << threads << " element " << i;
#endif
      }
    }
    const double tol = 1e-5 * double(c.cin / c.groups);
    for (int64_t o = 0; o < c.cout; ++o)
      for (int64_t i = 0; i < P; ++i) {
        const double want = reference(x, w, b, c, o, i / Wo, i % Wo);
        ASSERT_NEAR(plain_ref.data<float>()[o * P + i], want, tol) << "channel " << o << " position " << i;
        const double fused = std::min(std::max(0.75 * want + res.data<float>()[o * P + i], -0.5), 0.5);
        ASSERT_NEAR(fused_ref.data<float>()[o * P + i], fused, tol) << "channel " << o << " position " << i;
      }
  }
  set_num_threads(threads_before);
}

// The f32 GEMM's shared x packing (gemm.cpp: x packed once per call into balanced row tiles,
// e.g. M = 197 as 14, 14, 13 x 13 on AVX-512) and the vectorized panel transpose it uses, on every
// instruction-set path this CPU has, against scalar references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/gemm.h"

using namespace xdna;

namespace {

std::vector<const host::IsaKernels*> kernel_tables() {
  std::vector<const host::IsaKernels*> out = {&host::scalar_kernels()};
  if (active_isa() >= Isa::Avx2) out.push_back(&host::avx2_kernels());
  if (active_isa() >= Isa::Avx512) out.push_back(&host::avx512_kernels());
  return out;
}

// Runs fn once per instruction-set level, then restores the best one.
template <typename Fn>
void for_each_isa(Fn fn) {
  const Isa best = active_isa();
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa > best) break;
    force_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    fn();
  }
  force_isa(best);
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

// dst[k·NR + c] = src[c][k] for c < nr, 0 for nr <= c < NR; nothing written past kc·NR. Covers
// ragged column groups (NR = 14, 6) and k tails (kc not a multiple of 8).
TEST(GemmTiles, PackPanelMatchesScalarTranspose) {
  std::mt19937 rng(11);
  const int64_t K = 80;
  const std::vector<float> rows = random_floats(32 * K, rng);
  const float sentinel = 12345.f;
  for (const host::IsaKernels* kern : kernel_tables()) {
    SCOPED_TRACE(kern->name);
    for (int64_t NR : {4, 6, 14, 16, 32})
      for (int64_t nr = 1; nr <= NR; ++nr)
        for (int64_t kc : {1, 7, 8, 19, 64, 80}) {
          const float* src[64];
          for (int64_t c = 0; c < nr; ++c) src[c] = rows.data() + c * K;
          std::vector<float> dst(kc * NR + 16, sentinel);
          kern->pack_panel(src, nr, NR, kc, dst.data());
          for (int64_t k = 0; k < kc; ++k)
            for (int64_t c = 0; c < NR; ++c)
              ASSERT_EQ(dst[k * NR + c], c < nr ? src[c][k] : 0.f)
                  << "NR " << NR << " nr " << nr << " kc " << kc << " at k " << k << " c " << c;
          for (size_t i = kc * NR; i < dst.size(); ++i) ASSERT_EQ(dst[i], sentinel) << "wrote past the panel";
        }
  }
}

// host::gemm (with and without pre-packed weights, with and without a bias) against a double
// reference, at shapes that take the shared-x path: M = 197 (ViT-B/16's tokens), M one past a
// tile multiple, M split across threads (one weight panel, many row tiles). Threaded results must
// equal the single-threaded ones bit for bit (threads split whole tiles).
TEST(GemmTiles, SharedPackedXMatchesReference) {
  struct Shape {
    int64_t m, n, k;
  };
  for_each_isa([] {
    std::mt19937 rng(5);
    for (const Shape s : {Shape{197, 96, 72}, Shape{29, 64, 300}, Shape{15, 200, 200}, Shape{60, 8, 1200}}) {
      SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k);
      ASSERT_GE(2 * s.m * s.n * s.k, host::kGemmSerialFlops);  // not the serial shortcut
      const std::vector<float> x = random_floats(s.m * s.k, rng), w = random_floats(s.n * s.k, rng),
                               bias = random_floats(s.n, rng);
      host::WeightRows wr;
      wr.dtype = DType::F32;
      wr.data = reinterpret_cast<const uint8_t*>(w.data());
      wr.row_bytes = s.k * 4;
      wr.rows = s.n;
      wr.cols = s.k;
      const auto packed = host::pack_weights(wr);
      for (const bool use_packed : {false, true})
        for (const bool use_bias : {false, true}) {
          const host::PackedWeights* p = use_packed ? packed.get() : nullptr;
          const float* b = use_bias ? bias.data() : nullptr;
          std::vector<float> y(s.m * s.n, -1.f), y1(s.m * s.n, -2.f);
          const int before = num_threads();
          set_num_threads(2);
          host::gemm(x.data(), s.k, wr, y.data(), s.n, s.m, p, b);
          set_num_threads(1);
          host::gemm(x.data(), s.k, wr, y1.data(), s.n, s.m, p, b);
          set_num_threads(before);
          ASSERT_EQ(y, y1) << "packed " << use_packed << " bias " << use_bias;
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double ref = use_bias ? bias[j] : 0.0, mag = std::fabs(ref);
              for (int64_t k = 0; k < s.k; ++k) {
                const double t = double(x[i * s.k + k]) * w[j * s.k + k];
                ref += t;
                mag += std::fabs(t);
              }
              ASSERT_NEAR(y[i * s.n + j], ref, 1e-6 * mag + 1e-6)
                  << "packed " << use_packed << " bias " << use_bias << " at y[" << i << ", " << j << "]";
            }
        }
    }
  });
}

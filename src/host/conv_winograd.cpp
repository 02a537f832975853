// Winograd F(m x m, 3 x 3) driver: the filter transform (cached for constant weights), the
// selection rule and the split of tiles and channels between threads. The transforms and GEMMs
// of one block run in conv_winograd_avx512.cpp.
#include "host/conv_winograd.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <stdexcept>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/gemm.h"
#include "host/ops.h"
#include "host/scratch_buffer.h"
#include "host/conv_weight_cache.h"

namespace xdna::host {
namespace {

// G for F(2, 3) and F(4, 3) (Lavin & Gray), in double: the filter transform is rounded to f32 once.
constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
constexpr double kG4[6][3] = {{1.0 / 4, 0, 0},
                              {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                              {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                              {1.0 / 24, 1.0 / 12, 1.0 / 6},
                              {1.0 / 24, -1.0 / 12, 1.0 / 6},
                              {0, 0, 1}};

// U[xi][panel][ci][NR] = (G g[o, ci] Gᵀ)[i][j], xi = i A + j, o = panel NR + c (zero past Cout).
struct WinogradWeights {
  int m = 0;
  int64_t nr = 0, panels = 0;
  std::unique_ptr<HeapBuffer> storage;
  const float* data() const { return reinterpret_cast<const float*>(storage->data()); }
};

std::shared_ptr<const WinogradWeights> transform_weights(const Tensor& w, int m, int64_t NR) {
  const Tensor wf = to_f32(w).contiguous();
  const int64_t cout = w.dim(0), cin = w.dim(1), A = m + 2, panels = (cout + NR - 1) / NR;
  auto u = std::make_shared<WinogradWeights>();
  u->m = m;
  u->nr = NR;
  u->panels = panels;
  u->storage = std::make_unique<HeapBuffer>(static_cast<size_t>(A * A * panels * cin * NR) * sizeof(float));
  float* dst = reinterpret_cast<float*>(u->storage->data());
  const float* src = wf.data<float>();
  parallel_for(panels * cin, 16, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t pn = q / cin, ci = q % cin;
      for (int64_t c = 0; c < NR; ++c) {
        const int64_t o = pn * NR + c;
        double gg[6][3] = {};  // G g
        if (o < cout) {
          const float* g = src + (o * cin + ci) * 9;
          for (int64_t i = 0; i < A; ++i)
            for (int j = 0; j < 3; ++j)
              for (int k = 0; k < 3; ++k) gg[i][j] += (m == 2 ? kG2[i][k] : kG4[i][k]) * g[k * 3 + j];
        }
        for (int64_t i = 0; i < A; ++i)
          for (int64_t j = 0; j < A; ++j) {
            double s = 0;
            for (int k = 0; k < 3; ++k) s += gg[i][k] * (m == 2 ? kG2[j][k] : kG4[j][k]);
            dst[(((i * A + j) * panels + pn) * cin + ci) * NR + c] = static_cast<float>(s);
          }
      }
    }
  });
  return u;
}

// Filter transforms of constant weights (conv_weight_cache.h); past 1 GiB, filters are transformed per call.
ConstantWeightCache<WinogradWeights>& winograd_cache() {
  static ConstantWeightCache<WinogradWeights> c(size_t{1} << 30);
  return c;
}

std::shared_ptr<const WinogradWeights> winograd_weights(const Tensor& w, int m, int64_t NR, bool constant) {
  return winograd_cache().get(w, constant, {m, NR}, [&] { return transform_weights(w, m, NR); });
}

// Transformed input per block: at most this many floats (A^2 tiles cin), so that it and the
// block's GEMM results stay in L2 (1 MiB on Zen 4) while the filter streams past.
constexpr int64_t kInputBudget = 96 * 1024;

}  // namespace

size_t winograd_weight_cache_bytes() { return winograd_cache().bytes(); }

int winograd_tile(const ConvParams& p, int64_t cin, int64_t cout, int64_t kh, int64_t kw, int64_t Ho,
                  int64_t Wo) {
  if (active_isa() != Isa::Avx512 || p.groups != 1 || kh != 3 || kw != 3 || p.stride[0] != 1 ||
      p.stride[1] != 1 || p.dilation[0] != 1 || p.dilation[1] != 1)
    return 0;
  // Index arithmetic of the gathers and scatters is int32.
  if (cin * (Ho + 6) * (Wo + 6) >= INT32_MAX || cout * (Ho + 6) * (Wo + 6) >= INT32_MAX) return 0;
  // Measured, one thread, CPU time against the GEMM / direct paths (docs/performance.md):
  // 16 channels break even, 32 win 2x; 7x7 (ResNet's last stage) loses, 10x10 wins 2x.
  if (cin < 32 || cout < 32 || Ho < 10 || Wo < 10) return 0;
  // F(4x4) does 36 products per 16 outputs against F(2x2)'s 64, but its filter is 36 / 16 times
  // larger and its last tile row and column waste more on small maps: it won where there are
  // at least 2 positions per output channel (56x56 x 64, 28x28 x 128, 14x14 x 64, 256x256),
  // F(2x2) below (14x14 x 256: 1.06 ms against 1.26; 10x10 x 256: 0.59 against 1.10).
  return Ho * Wo >= 2 * cout ? 4 : 2;
}

void conv2d_winograd(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho, int64_t Wo,
                     const EpilogueRows& ep, bool constant_weights, int64_t shuffle, int m, Tensor& y) {
  if ((m != 2 && m != 4) || w.dim(2) != 3 || w.dim(3) != 3 || p.groups != 1 || p.stride[0] != 1 ||
      p.stride[1] != 1 || p.dilation[0] != 1 || p.dilation[1] != 1 || active_isa() != Isa::Avx512)
    throw std::invalid_argument("conv2d_winograd: needs AVX-512, m 2 or 4 and a dense stride-1 3x3 convolution");
  const IsaKernels& kern = active_kernels();
  const int64_t MR = kern.mr, NR = kern.nr, A = m + 2;
  const int64_t cin = x.dim(0), cout = w.dim(0);
  const auto u = winograd_weights(w, m, NR, constant_weights);
  const int64_t tiles_h = (Ho + m - 1) / m, tiles_w = (Wo + m - 1) / m, tiles = tiles_h * tiles_w;
  const WinogradBlock b{x.data<float>(), u->data(), y.data<float>(), cin, x.dim(1), x.dim(2), cout,
                        p.padding[0], p.padding[1], Ho, Wo, tiles_w, shuffle, ep, m, u->panels};
  // Blocks of whole MR-tile panels sized to the budget; channels split in halves too when the
  // blocks alone would leave a thread idle (few tiles, many channels).
  const int64_t tpanels = (tiles + MR - 1) / MR;
  const int64_t bp = std::clamp<int64_t>(kInputBudget / (A * A * cin * MR), 1, tpanels);
  const int64_t tblocks = (tpanels + bp - 1) / bp, threads = num_threads();
  int64_t csplit = 1;
  while (tblocks * csplit < 4 * threads && cout / (csplit * 2) >= 64 && (cout / (csplit * 2)) % NR == 0) csplit *= 2;
  const int64_t cchunk = cout / csplit, items = tblocks * csplit;
  std::atomic<int64_t> next{0};
  parallel_for(std::min<int64_t>(threads, items), 1, [&](int64_t, int64_t) {
    thread_local std::unique_ptr<HeapBuffer> vbuf, mbuf;
    float* v = grown_scratch(vbuf, static_cast<size_t>(A * A * bp * MR * cin) * sizeof(float));
    float* m = grown_scratch(mbuf, static_cast<size_t>(A * A * bp * MR * 64) * sizeof(float));
    for (int64_t it; (it = next.fetch_add(1)) < items;) {
      const int64_t tb = it / csplit, cs = it % csplit;
      const int64_t t0 = tb * bp * MR, t1 = std::min(tiles, (tb + 1) * bp * MR);
      const int64_t o0 = cs * cchunk, o1 = cs + 1 == csplit ? cout : o0 + cchunk;
      winograd_block_avx512(b, kern.sgemm, MR, NR, t0, t1, o0, o1, v, m);
    }
  });
}

}  // namespace xdna::host

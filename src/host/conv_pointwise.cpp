// 1x1 stride-1 convolutions on AVX-512 with the activations read in place (conv_gemm.h).
#include <algorithm>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/conv_gemm.h"

namespace xdna::host {

bool use_pointwise_in_place(const ConvParams& p, int64_t Kh, int64_t Kw, const IsaKernels& kern) {
  return active_isa() == Isa::Avx512 && kern.mr == kPointwiseMR && kern.nr == kPointwiseNR && Kh == 1 &&
         Kw == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 && p.padding[1] == 0;
}

// The most weight floats (channels x K slice) conv2d_pointwise keeps in L2 for all channels at once
// (384 KiB: ResNet-50's 56x56 and 28x28 1x1 convolutions, up to 512 x 192).
constexpr int64_t kPointwiseWeightSlice = 96 * 1024;

// conv2d_im2col for 1x1 stride 1 on AVX-512 (use_pointwise_in_place): the same thread split,
// position slices and K slices, with B read from x's rows. A micro-panel of x (KC rows of 32
// positions, one stream per row) is used by all output channels before the next one (the
// channel block loop inside the position loop) when their KC-deep weight slice fits L2 beside
// it: re-reading it from memory once per 224-channel block cost more than its packing did.
void conv2d_pointwise(const Tensor& x, const EpilogueRows& ep, const PackedConvWeights& packed,
                      Tensor& y) {
  const int64_t P = x.dim(1) * x.dim(2), G = packed.groups, kdim = packed.kdim, cout_g = packed.cout_g;
  constexpr int64_t NR = kPointwiseNR, MR = kPointwiseMR;
  const int64_t MC = cout_g * std::min(kdim, kConvKC) <= kPointwiseWeightSlice ? cout_g : MR * 16;
  const int64_t budget = std::max<int64_t>(1, kPatchBudget / std::max<int64_t>(kdim * NR, 1));
  const int64_t panels = (P + NR - 1) / NR;
  float* py = y.data<float>();
  for (int64_t g = 0; g < G; ++g) {
    const float* xg = x.data<float>() + g * kdim * P;
    parallel_for(panels, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; q += budget) {
        const int64_t p0 = q * NR, n = std::min(std::min(q + budget, q1) * NR, P) - p0;
        for (int64_t pc = 0; pc < kdim; pc += kConvKC) {
          const int64_t kc = std::min(kConvKC, kdim - pc);
          const bool last = pc + kc >= kdim;
          for (int64_t ic = 0; ic < cout_g; ic += MC) {
            const int64_t ic1 = std::min(ic + MC, cout_g);
            for (int64_t jr = 0; jr < n; jr += NR) {
              const int64_t nr = std::min(NR, n - jr);
              const float* bp = xg + pc * P + p0 + jr;  // B[k][c] = bp[k P + c]
              // The next micro-panel's rows (kc streams, one per input plane) are fetched a share
              // per tile while this one is in use: its first tile otherwise waited on each row.
              const int64_t tiles = (ic1 - ic + MR - 1) / MR, share = (kc + tiles - 1) / tiles;
              const float* next = jr + NR < n ? bp + NR : nullptr;
              for (int64_t ir = ic, t = 0; ir < ic1; ir += MR, ++t) {
                const int64_t mr = std::min(MR, ic1 - ir), o = g * cout_g + ir;
                float* tile = py + o * P + p0 + jr;
                if (next)
                  for (int64_t k = t * share; k < std::min(kc, (t + 1) * share); ++k) {
                    __builtin_prefetch(next + k * P);
                    __builtin_prefetch(next + k * P + 16);
                  }
                if (last && ep.residual)  // the residual is cold (written layers ago): fetch it during the tile
                  for (int64_t r = 0; r < mr; ++r) {
                    __builtin_prefetch(ep.residual + (o + r) * P + p0 + jr);
                    __builtin_prefetch(ep.residual + (o + r) * P + p0 + jr + nr - 1);
                  }
                sgemm_b_in_place_avx512(kc, packed.panel(g, ir / MR) + pc * MR, bp, P, tile, P, mr, nr, pc > 0,
                                        last ? &ep : nullptr, o, p0 + jr);
              }
            }
          }
        }
      }
    });
  }
}

}  // namespace xdna::host

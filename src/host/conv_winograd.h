// Winograd convolution F(m x m, 3 x 3) for dense stride-1 3x3 convolutions on the host (AVX-512).
// Per tile of m x m outputs the (m + 2)^2 input patch d, the filter g and the result are
// transformed (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015):
//   y = Aᵀ [ Σ_ci (G g Gᵀ) ⊙ (Bᵀ d B) ] A
// so the channel sums become (m + 2)^2 independent GEMMs [tiles x Cin] · [Cin x Cout] on the f32
// microkernel: 16 products per 2x2 outputs (m = 2) or 36 per 4x4 (m = 4) instead of 9 per output.
// Not part of the public API: conv.cpp's conv2d_into calls it where use_winograd says so.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "host/conv.h"
#include "host/conv_kernels.h"

namespace xdna::host {

// The Winograd output tile size (2 or 4) conv2d_into would use for this convolution, or 0 for
// none: AVX-512 only, one group, 3x3, stride 1, dilation 1, and shapes where it measured faster
// than the direct and GEMM paths (conv_winograd.cpp).
int winograd_tile(const ConvParams& p, int64_t cin, int64_t cout, int64_t kh, int64_t kw, int64_t Ho,
                  int64_t Wo);

// y [Cout, Ho, Wo] (or pixel_shuffle(., shuffle) of it, [Cout / s^2, Ho s, Wo s]) = conv2d(x, w)
// with the epilogue ep (ep.P = Ho Wo; the residual unshuffled), by F(m x m, 3 x 3), m = 2 or 4.
// Needs a 3x3 w with one group and stride / dilation 1; y already shaped. constant_weights keeps
// the transformed filter, keyed by w's buffer (like conv.cpp's packed weights).
void conv2d_winograd(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho, int64_t Wo,
                     const EpilogueRows& ep, bool constant_weights, int64_t shuffle, int m, Tensor& y);

// Bytes held by the transformed-filter cache (tests, diagnostics).
size_t winograd_weight_cache_bytes();

// The per-ISA block worker (conv_winograd_avx512.cpp): tiles [t0, t1) x channels [o0, o1).
struct WinogradBlock {
  const float* x;   // [cin, H, W]
  const float* u;   // transformed filter: [xi][Cout panel][cin][nr]
  float* y;
  int64_t cin, H, W, cout, pad_h, pad_w, Ho, Wo, tiles_w, shuffle;
  EpilogueRows ep;
  int m;            // 2 or 4
  int64_t panels;   // Cout panels of nr channels per xi
};
using SgemmFn = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                         int64_t nr, bool accumulate);
void winograd_block_avx512(const WinogradBlock& b, SgemmFn sgemm, int64_t MR, int64_t NR, int64_t t0,
                           int64_t t1, int64_t o0, int64_t o1, float* v_scratch, float* m_scratch);

}  // namespace xdna::host

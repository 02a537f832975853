// Direct stride-1 convolution for AVX-512 (see DirectConv in conv_kernels.h). A tile is 8 output
// channels x NV vectors of 16 positions of one output row: 8 NV accumulators stay in registers
// while the loop walks every input channel and tap, loading the input row at the tap's column
// offset straight from x (masked where the row's ends need the zero padding) and broadcasting
// one packed weight per channel. The FMA count equals the GEMM's but nothing is copied first.
// One thread, EDSR's 64 -> 64 3x3 at 256x256: ~109 GFLOP/s of CPU time against 116 for a bare
// FMA loop on this machine (the GEMM path, patches packed first: ~80).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "host/conv_kernels.h"

namespace xdna::host {
namespace {

constexpr int MR = static_cast<int>(kDirectConvMR);

// Bits of the 16 lanes of the vector starting at column c that lie in [0, W).
inline __mmask16 column_mask(int64_t c, int64_t W) {
  const int64_t lo = std::max<int64_t>(0, -c), hi = std::min<int64_t>(16, W - c);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// Output row oh, channels o0 .. o0 + mr, positions ow0 .. ow0 + 16 NV (only those < Wo stored).
template <int NV, bool kMasked, int KW>
void tile(const DirectConv& c, const float* wb, int64_t oh, int64_t o0, int64_t mr, int64_t ow0) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  __mmask16 mask[16][NV];  // per tap column j (Kw <= 16) and vector
  if constexpr (kMasked)
    for (int64_t j = 0; j < c.Kw; ++j)
      for (int v = 0; v < NV; ++v) mask[j][v] = column_mask(ow0 - c.pad_w + j + 16 * v, c.W);
  // Sums in K slices of c.kc (k = (ci Kh + i) Kw + j), each from zero and then added to the
  // running total, exactly as the GEMM path accumulates its K blocks: the two paths then give
  // identical bits, so a tiled upscale (narrow tiles take the GEMM) equals the untiled one.
  __m512 total[MR][NV];
  bool first = true;
  int64_t next = c.kc;  // where the current slice ends
  auto flush = [&] {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        total[r][v] = first ? acc[r][v] : _mm512_add_ps(total[r][v], acc[r][v]);
        acc[r][v] = _mm512_setzero_ps();
      }
    first = false;
  };
  const int64_t i0 = std::max<int64_t>(0, c.pad_h - oh), i1 = std::min<int64_t>(c.Kh, c.H + c.pad_h - oh);
  const int64_t taps = c.Kh * c.Kw;
  for (int64_t ci = 0; ci < c.cin; ++ci) {
    const float* plane = c.x + ci * c.H * c.W + ow0 - c.pad_w;
    const float* wc = wb + ci * taps * MR;
    for (int64_t i = i0; i < i1; ++i) {
      const float* row = plane + (oh - c.pad_h + i) * c.W;
      // The next channel's row, one plane (256 KiB for EDSR) further: the hardware prefetcher
      // does not follow that stride, and fetching it during this channel's FMAs gained ~5%.
      if (ci + 1 < c.cin)
        for (int64_t l = 0; l < 16 * NV + c.Kw + 15; l += 16)
          _mm_prefetch(reinterpret_cast<const char*>(row + c.H * c.W + l), _MM_HINT_T0);
      const float* wi = wc + i * c.Kw * MR;
      const int64_t kw = KW ? KW : c.Kw;  // 3x3 (EDSR) unrolled
      const int64_t k0 = (ci * c.Kh + i) * c.Kw;
#pragma GCC unroll 3
      for (int64_t j = 0; j < kw; ++j) {
        if (k0 + j >= next) {  // skipped rows (zero padding) add exact zeros in the GEMM
          flush();
          next = ((k0 + j) / c.kc + 1) * c.kc;
        }
        __m512 xv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
          xv[v] = kMasked ? _mm512_maskz_loadu_ps(mask[j][v], row + j + 16 * v) : _mm512_loadu_ps(row + j + 16 * v);
        const float* wk = wi + j * MR;
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512 wv = _mm512_set1_ps(wk[r]);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xv[v], wv, acc[r][v]);
        }
      }
    }
  }
  flush();
  // Stored, then the same epilogue function the GEMM path runs (bit-identical results) while
  // the tile is in L1.
  const int64_t P = c.ep.P, pos = oh * c.Wo + ow0, n = std::min<int64_t>(16 * NV, c.Wo - ow0);
  __mmask16 store[NV];
  for (int v = 0; v < NV; ++v) store[v] = column_mask(ow0 + 16 * v, c.Wo);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
    float* out = c.y + (o0 + r) * P + pos;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(out + 16 * v, store[v], total[r][v]);
  }
  c.epilogue(c.ep, c.y, o0, mr, pos, n);
}

template <int NV>
void tile_any(const DirectConv& c, const float* wb, int64_t oh, int64_t o0, int64_t mr, int64_t ow0) {
  // Unmasked when every tap's columns lie inside the row (all but the first and last tiles).
  const bool inside = ow0 - c.pad_w >= 0 && ow0 - c.pad_w + c.Kw - 1 + 16 * NV <= c.W;
  if (c.Kw == 3) {
    if (inside) tile<NV, false, 3>(c, wb, oh, o0, mr, ow0);
    else tile<NV, true, 3>(c, wb, oh, o0, mr, ow0);
  } else {
    if (inside) tile<NV, false, 0>(c, wb, oh, o0, mr, ow0);
    else tile<NV, true, 0>(c, wb, oh, o0, mr, ow0);
  }
}

}  // namespace

void conv2d_direct_avx512(const DirectConv& c, int64_t it0, int64_t it1) {
  const int64_t blocks = (c.cout + MR - 1) / MR, kdim = c.cin * c.Kh * c.Kw;
  const int64_t vectors = (c.Wo + 15) / 16;
  for (int64_t it = it0; it < it1; ++it) {
    const int64_t oh = it / blocks, b = it % blocks, o0 = b * MR, mr = std::min<int64_t>(MR, c.cout - o0);
    const float* wb = c.w + b * kdim * MR;
    // Tiles of 3 vectors (24 accumulators + 3 inputs + 1 weight of the 32 registers), the last
    // one or two vectors as a narrower tile.
    int64_t v = 0;
    for (; v + 3 <= vectors; v += 3) tile_any<3>(c, wb, oh, o0, mr, 16 * v);
    if (vectors - v == 2) tile_any<2>(c, wb, oh, o0, mr, 16 * v);
    else if (vectors - v == 1) tile_any<1>(c, wb, oh, o0, mr, 16 * v);
  }
}

}  // namespace xdna::host

// Direct stride-1 convolution for AVX-512 (see DirectConv in conv_kernels.h). A tile is 8 output
// channels x NV vectors of 16 positions of one output row: 8 NV accumulators stay in registers
// while the loop walks every input channel and tap, loading the input row at the tap's column
// offset straight from x (masked where the row's ends need the zero padding) and broadcasting
// one packed weight per channel. The FMA count equals the GEMM's but nothing is copied first.
// One thread, EDSR's 64 -> 64 3x3 at 256x256: ~109 GFLOP/s of CPU time against 116 for a bare
// FMA loop on this machine (the GEMM path, patches packed first: ~80). At stride 2 (ResNet's 7x7
// stem) the input's columns are first split by parity, so that a tap's 16 inputs for 16
// consecutive outputs are again one load (from the even or the odd half of the row).
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

// pixel_shuffle(conv, 2) stored directly: channel o = 4 c + 2 i + j goes to out[c, 2 oh + i, 2 w + j],
// so rows (o, o + 1) of the tile (j = 0, 1) interleave into two vectors of one output row.
template <int NV>
void store_shuffled(const DirectConv& c, const __m512 (&t)[MR][NV], int64_t oh, int64_t o0, int64_t mr, int64_t ow0,
                    const __mmask16 (&valid)[NV]) {
  const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  const int64_t Wy = 2 * c.Wo;
#pragma GCC unroll 4
  for (int r = 0; r < MR; r += 2) {
    if (r >= mr) break;
    const int64_t o = o0 + r, ch = o / 4, i = (o / 2) % 2;
    float* out = c.y + (ch * 2 * c.Ho + 2 * oh + i) * Wy + 2 * ow0;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      // n valid positions (a prefix of the vector) -> 2 n output lanes over the two vectors.
      const int n = __builtin_popcount(valid[v]);
      const __mmask16 m0 = static_cast<__mmask16>((1u << std::min(16, 2 * n)) - 1);
      const __mmask16 m1 = static_cast<__mmask16>((1u << std::max(0, 2 * n - 16)) - 1);
      _mm512_mask_storeu_ps(out + 32 * v, m0, _mm512_permutex2var_ps(t[r][v], first, t[r + 1][v]));
      _mm512_mask_storeu_ps(out + 32 * v + 16, m1, _mm512_permutex2var_ps(t[r][v], second, t[r + 1][v]));
    }
  }
}

// The epilogue on the summed tile, with the same operations as conv_kernels_impl.h's epilogue
// built for AVX-512 (s (y + b), fused with + residual, then max(lo, .), min(hi, .)): bit-identical
// to the GEMM path without storing the tile and reading it back. Not inlined: inside tile() its
// extra live values made the compiler spill an accumulator in the FMA loop.
template <int NV>
[[gnu::noinline]] void finish(const DirectConv& c, __m512 (&total)[MR][NV], int64_t oh, int64_t o0, int64_t mr,
                              int64_t ow0) {
  const EpilogueRows& ep = c.ep;
  const int64_t P = ep.P, pos = oh * c.Wo + ow0;
  __mmask16 store[NV];
  for (int v = 0; v < NV; ++v) store[v] = column_mask(ow0 + 16 * v, c.Wo);
  const __m512 s = _mm512_set1_ps(ep.scale), lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
    const __m512 b = _mm512_set1_ps(ep.bias ? ep.bias[o0 + r] : 0.0f);
    const float* res = ep.residual ? ep.residual + (o0 + r) * P + pos : nullptr;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 t = _mm512_add_ps(total[r][v], b);
      t = res ? _mm512_fmadd_ps(s, t, _mm512_maskz_loadu_ps(store[v], res + 16 * v)) : _mm512_mul_ps(s, t);
      total[r][v] = _mm512_min_ps(hi, _mm512_max_ps(lo, t));
    }
  }
  if (c.shuffle == 2) return store_shuffled<NV>(c, total, oh, o0, mr, ow0, store);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
    float* out = c.y + (o0 + r) * P + pos;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(out + 16 * v, store[v], total[r][v]);
  }
}

// Where tap column j reads for output column 0 at stride 2 (x split by column parity): input
// column 2 ow + j - pad_w is column ow + (j - pad_w - parity) / 2 of the half of that parity.
inline int64_t stride_two_tap(const DirectConv& c, int64_t j) {
  const int64_t jj = j - c.pad_w, parity = jj & 1;
  return parity * c.half.len + c.half.lead + (jj - parity) / 2;
}

// Output row oh, channels o0 .. o0 + mr, positions ow0 .. ow0 + 16 NV (only those < Wo stored).
template <int NV, bool kMasked, int KW, int S>
void tile(const DirectConv& c, const float* wb, int64_t oh, int64_t o0, int64_t mr, int64_t ow0) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  __mmask16 mask[16][NV];  // per tap column j (Kw <= 16) and vector
  int64_t at[16];          // stride 2: tap column j's first input, from the row's start
  if constexpr (S == 2)  // never masked: the halves' zeros are the padding
    for (int64_t j = 0; j < c.Kw; ++j) at[j] = ow0 + stride_two_tap(c, j);
  else if constexpr (kMasked)
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
  const int64_t ih0 = S * oh - c.pad_h;  // input row of tap row 0
  const int64_t i0 = std::max<int64_t>(0, -ih0), i1 = std::min<int64_t>(c.Kh, c.H - ih0);
  const int64_t taps = c.Kh * c.Kw, row_len = S == 2 ? 2 * c.half.len : c.W;
  for (int64_t ci = 0; ci < c.cin; ++ci) {
    const float* plane = c.x + ci * c.H * row_len + (S == 2 ? 0 : ow0 - c.pad_w);
    const float* wc = wb + ci * taps * MR;
    for (int64_t i = i0; i < i1; ++i) {
      const float* row = plane + (ih0 + i) * row_len;
      // The next channel's row, one plane (256 KiB for EDSR) further: the hardware prefetcher
      // does not follow that stride, and fetching it during this channel's FMAs gained ~5%.
      if (ci + 1 < c.cin) {
        const float* next_row = row + c.H * row_len + (S == 2 ? at[0] : 0);
        for (int64_t l = 0; l < 16 * NV + c.Kw + 15; l += 16)
          _mm_prefetch(reinterpret_cast<const char*>(next_row + l), _MM_HINT_T0);
        if constexpr (S == 2)  // the other parity's half
          for (int64_t l = 0; l < 16 * NV + 15; l += 16)
            _mm_prefetch(reinterpret_cast<const char*>(row + c.H * row_len + at[c.Kw > 1] + l), _MM_HINT_T0);
      }
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
        const float* in = row + (S == 2 ? at[j] : j);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
          xv[v] = kMasked ? _mm512_maskz_loadu_ps(mask[j][v], in + 16 * v) : _mm512_loadu_ps(in + 16 * v);
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
  finish<NV>(c, total, oh, o0, mr, ow0);
}

template <int NV>
void tile_any(const DirectConv& c, const float* wb, int64_t oh, int64_t o0, int64_t mr, int64_t ow0) {
  // Unmasked when every tap's columns lie inside the row (all but the first and last tiles).
  if (c.stride == 2) {
    if (c.Kw == 7) tile<NV, false, 7, 2>(c, wb, oh, o0, mr, ow0);  // ResNet's stem
    else tile<NV, false, 0, 2>(c, wb, oh, o0, mr, ow0);
    return;
  }
  const bool inside = ow0 - c.pad_w >= 0 && ow0 - c.pad_w + c.Kw - 1 + 16 * NV <= c.W;
  if (c.Kw == 3) {
    if (inside) tile<NV, false, 3, 1>(c, wb, oh, o0, mr, ow0);
    else tile<NV, true, 3, 1>(c, wb, oh, o0, mr, ow0);
  } else {
    if (inside) tile<NV, false, 0, 1>(c, wb, oh, o0, mr, ow0);
    else tile<NV, true, 0, 1>(c, wb, oh, o0, mr, ow0);
  }
}

}  // namespace

void split_columns_by_parity(const float* x, int64_t W, DirectConv::Halves half, int64_t r0, int64_t r1, float* dst) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict in = x + r * W;
    float* __restrict even = dst + r * 2 * half.len;
    float* __restrict odd = even + half.len;
    std::fill(even, even + 2 * half.len, 0.0f);
    even += half.lead;
    odd += half.lead;
    for (int64_t j = 0; j < W / 2; ++j) {
      even[j] = in[2 * j];
      odd[j] = in[2 * j + 1];
    }
    if (W % 2) even[W / 2] = in[W - 1];
  }
}

void conv2d_direct_avx512(const DirectConv& c, int64_t it0, int64_t it1) {
  const int64_t blocks = (c.cout + MR - 1) / MR, kdim = c.cin * c.Kh * c.Kw;
  const int64_t vectors = (c.Wo + 15) / 16;
  for (int64_t it = it0; it < it1; ++it) {
    const int64_t oh = it / blocks, b = it % blocks, o0 = b * MR, mr = std::min<int64_t>(MR, c.cout - o0);
    const float* wb = c.w + b * kdim * MR;
    // Tiles of 3 vectors (24 accumulators + 3 inputs + 1 weight of the 32 registers) inside the
    // row, 2 vectors at its ends: there the masked loads' masks also take registers, and a masked
    // 3-vector tile ran 1.7x slower per output than a 2-vector one. What the threes leave is
    // taken in 2-vector tiles, never a lone 1-vector one (a broadcast per FMA: 1.5x slower).
    const int64_t ends = vectors >= 4 ? 2 : 0, middle = vectors - 2 * ends;
    const int64_t threes = (middle - (middle % 3 == 2 ? 2 : middle % 3 == 1 && middle >= 4 ? 4 : 0)) / 3;
    int64_t v = 0;
    if (ends) tile_any<2>(c, wb, oh, o0, mr, 0), v = 2;
    for (int64_t t = 0; t < threes; ++t, v += 3) tile_any<3>(c, wb, oh, o0, mr, 16 * v);
    for (; v + 2 <= vectors; v += 2) tile_any<2>(c, wb, oh, o0, mr, 16 * v);
    if (v < vectors) tile_any<1>(c, wb, oh, o0, mr, 16 * v);
  }
}

}  // namespace xdna::host

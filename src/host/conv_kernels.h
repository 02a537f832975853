// Shared between conv.cpp and its per-ISA kernels (conv_avx2.cpp, conv_avx512.cpp): the patch
// packing and the epilogue are compiled once per instruction set (conv_kernels_impl.h), so that
// their copies and clamps use the ISA's full vector width. Not part of the public API.
#pragma once
#include <algorithm>
#include <cstdint>

namespace xdna::host {

// The geometry one group's patch packing needs.
struct PatchGeom {
  const float* x;  // the group's first input plane
  int64_t cin, H, W, Kh, Kw, Wo;
  int64_t stride[2], padding[2], dilation[2];
};

// The epilogue on output rows: y[o, p0 : p0 + n] = clamp(scale (y + bias[o]) + residual, lo, hi).
struct EpilogueRows {
  const float* bias;      // [Cout] or nullptr
  const float* residual;  // like y, or nullptr
  float scale, lo, hi;
  int64_t P;  // y's row length (positions)
};

// One instruction set's versions (conv_kernels_impl.h).
struct ConvKernels {
  void (*pack_patches)(const PatchGeom& g, int64_t p0, int64_t n, int64_t NR, float* dst);
  // rows o .. o + rows of y, positions p0 .. p0 + n
  void (*epilogue)(const EpilogueRows& ep, float* y, int64_t o, int64_t rows, int64_t p0, int64_t n);
  // y[c ldy + i] = t[i nr + c] for c < nr, i < P: a transposed tile's [P, nr] result into rows of y.
  void (*transpose_tile)(const float* t, int64_t P, int64_t nr, float* y, int64_t ldy);
};
// The AVX-512 f32 microkernel (14 x 32, gemm_avx512.cpp) with one operand read in place from
// channels-first activations (conv_pointwise_avx512.cpp): a 1x1 stride-1 convolution's patch
// matrix is the input, so it needs no packed copy. Same FMA chain per element: same bits.
constexpr int kPointwiseMR = 14, kPointwiseNR = 32;
// C[mr, nr] (+)= A · B over kc: A packed [kc][14] (the weights), B[k][c] = b[k ldb + c] (c < nr).
// ep (the last K slice): C is rows o .. o + mr, positions p .. p + nr of ep's output, and gets
// the epilogue in registers, bit-identical to ConvKernels::epilogue after the store.
void sgemm_b_in_place_avx512(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                             int64_t mr, int64_t nr, bool accumulate, const EpilogueRows* ep = nullptr,
                             int64_t o = 0, int64_t p = 0);
// C[mr, nr] (+)= A · B over kc: A[k][i] = a[k lda + i] (i < mr), B packed [kc][32] (the weights).
void sgemm_a_in_place_avx512(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                             int64_t mr, int64_t nr, bool accumulate);

// C[mr, nr] (+)= A · B over kc with A gathered from a zero-padded input instead of packed patches:
// A[k][i] = a1[koff[k] + stride i] for i < r1 (a run of positions on one output row) and
// a2[koff[k] + stride (i - r1)] for the r2 rows after them (the next output row; r2 is 0, or r1
// with 2 r1 <= 14); stride 1 or 2. B packed [kc][32] (the weights). Same FMA chain as the packed
// kernel: same bits.
void sgemm_a_gather_avx512(int64_t kc, const float* a1, int64_t r1, const float* a2, int64_t r2, int64_t stride,
                           const int32_t* koff, const float* b, float* c, int64_t ldc, int64_t nr, bool accumulate);

const ConvKernels& conv_kernels_generic();
const ConvKernels& conv_kernels_avx2();
const ConvKernels& conv_kernels_avx512();

}  // namespace xdna::host

namespace xdna::host {

// A direct convolution (stride 1 or 2, dilation 1, one group) that reads the input rows in place:
// each output row is computed as 8 output channels x up to 48 positions held in AVX-512
// registers across all Cin Kh Kw taps, the epilogue run while the tile is in L1. No patch
// copy (im2col copied every input value Kh Kw times) and 8-channel tiles that divide 64.
// Bit-identical to the GEMM path (same K slices, the epilogue's operations in the same order).
struct DirectConv {
  const float* x;   // stride 1: [cin, H, W]; stride 2: the columns split by parity, see stride
  const float* w;   // packed: block b of 8 output channels at b kdim 8, w[k 8 + r] (kdim = cin Kh Kw)
  float* y;         // [cout, Ho, Wo]
  int64_t cin, H, W, cout, Kh, Kw, pad_h, pad_w, Ho, Wo;
  EpilogueRows ep;  // ep.P = Ho Wo
  int64_t kc;       // the GEMM path's K slice (conv.cpp kConvKC): sums are split the same way
  int64_t shuffle;  // 2: y is pixel_shuffle(conv, 2), [cout / 4, 2 Ho, 2 Wo] (cout % 4 == 0); else 0
  // 1, or 2 in both directions: then x is [cin, H, 2, half.len] (split_columns_by_parity): row h
  // of channel c holds the even columns of the input row, then its odd ones, each half between
  // zeros, so that a tap reads 16 consecutive outputs' inputs with one unmasked load.
  int64_t stride = 1;
  struct Halves {
    int64_t lead = 0, len = 0;  // zeros before column 0 of a half; floats per half
  } half;
};
// The stride-2 layout's halves for rows of W inputs, Kw taps, padding pad_w and Wo outputs: every
// load of a row tile (16 ceil(Wo / 16) outputs, tap columns 2 ow - pad_w .. 2 ow - pad_w + Kw - 1)
// lies inside its half.
inline DirectConv::Halves stride_two_halves(int64_t W, int64_t Kw, int64_t pad_w, int64_t Wo) {
  const int64_t lead = (pad_w + 1) / 2, last_tap = (Kw - 1 - pad_w) >> 1;  // floor, for a negative one too
  const int64_t need = std::max((W + 1) / 2, (Wo + 15) / 16 * 16 + std::max<int64_t>(last_tap, 0));
  return {lead, (lead + need + 15) / 16 * 16};
}
// dst = rows r0 .. r1 of x [cin H, W] in DirectConv's stride-2 layout, zeros included.
void split_columns_by_parity(const float* x, int64_t W, DirectConv::Halves half, int64_t r0, int64_t r1, float* dst);
constexpr int64_t kDirectConvMR = 8;
// Work items it = oh * blocks + b for it in [it0, it1), blocks = ceil(cout / 8).
void conv2d_direct_avx512(const DirectConv& c, int64_t it0, int64_t it1);

}  // namespace xdna::host

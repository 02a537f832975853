// The f32 GEMM microkernel's 14 x 32 tile (gemm_avx512.cpp sgemm_rows) with one operand read in
// place from channels-first activations instead of from a packed panel: a 1x1 stride-1
// convolution's patches are the input itself, row k of the patch matrix being input plane k.
// Per output element the same FMA chain (from zero, k in order) and the same final add of C's
// old value as the packed kernel: the same bits. A third variant gathers the transposed tile's
// rows (positions) from a zero-padded input for kernels larger than 1x1 (conv_few_positions.cpp).
// GCC 12's AVX-512 headers build vectors from _mm*_undefined_*() and trip these warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <stdexcept>
#include <string>

#include "host/conv_kernels.h"

namespace xdna::host {
namespace {

constexpr int MR = kPointwiseMR, NR = kPointwiseNR;

// Stores an R x 32 accumulator tile into nr columns of C, adding C's old values when accumulating.
template <int R>
inline void store_tile(__m512 (&acc)[R][2], float* c, int64_t ldc, int64_t nr, bool accumulate) {
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    __m512 c0 = acc[i][0], c1 = acc[i][1];
    if (accumulate) {
      c0 = _mm512_add_ps(c0, _mm512_maskz_loadu_ps(m0, ci));
      c1 = _mm512_add_ps(c1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, c0);
    _mm512_mask_storeu_ps(ci + 16, m1, c1);
  }
}

// One k step of an R x 32 tile: acc[i] += A[k][i] · (b0, b1), A[k][i] = a_of(i), broadcast.
// W = 1: only the first 16 columns (a tile of at most 16; acc[i][1] is left as it is).
template <int R, int W = 2, typename AOf>
[[gnu::always_inline]] inline void fma_rows(__m512 (&acc)[R][2], AOf a_of, __m512 b0, __m512 b1) {
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    const __m512 ai = _mm512_set1_ps(a_of(i));
    acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
    if constexpr (W == 2) acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
  }
}

// store_tile followed by conv_kernels_impl.h's epilogue on the tile, in registers: the same
// operations in the same order (C's old value added, then the bias, then scale (.) + residual as
// one FMA as GCC contracts it there, then the clamp, NaN-passing like std::max / std::min).
template <int R>
inline void store_tile_epilogue(__m512 (&acc)[R][2], float* c, int64_t ldc, int64_t nr, bool accumulate,
                                const EpilogueRows& ep, int64_t o, int64_t p) {
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
  const __m512 s = _mm512_set1_ps(ep.scale), lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    __m512 c0 = acc[i][0], c1 = acc[i][1];
    if (accumulate) {
      c0 = _mm512_add_ps(c0, _mm512_maskz_loadu_ps(m0, ci));
      c1 = _mm512_add_ps(c1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    const __m512 b = _mm512_set1_ps(ep.bias ? ep.bias[o + i] : 0.0f);
    c0 = _mm512_add_ps(c0, b);
    c1 = _mm512_add_ps(c1, b);
    if (ep.residual) {
      const float* r = ep.residual + (o + i) * ep.P + p;
      c0 = _mm512_fmadd_ps(s, c0, _mm512_maskz_loadu_ps(m0, r));
      c1 = _mm512_fmadd_ps(s, c1, _mm512_maskz_loadu_ps(m1, r + 16));
    } else {
      c0 = _mm512_mul_ps(s, c0);
      c1 = _mm512_mul_ps(s, c1);
    }
    // std::min(std::max(v, lo), hi): max(lo, v) is (lo > v ? lo : v), min(hi, v) is (hi < v ? hi : v).
    c0 = _mm512_min_ps(hi, _mm512_max_ps(lo, c0));
    c1 = _mm512_min_ps(hi, _mm512_max_ps(lo, c1));
    _mm512_mask_storeu_ps(ci, m0, c0);
    _mm512_mask_storeu_ps(ci + 16, m1, c1);
  }
}

// A packed [kc][14] (weights), B[k][c] = b[k ldb + c] for c < nr (the input planes, read in place).
// With ep, the tile is output rows o .. o + R at position p of the last K slice: it gets the epilogue.
// W = 1 for nr <= 16 (a ragged last panel, e.g. 784 = 24 x 32 + 16 positions): half the FMAs,
// the same values in the columns that are stored.
template <int R, int W = 2>
void rows_b_in_place(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                     int64_t nr, bool accumulate, const EpilogueRows* ep, int64_t o, int64_t p) {
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b);
    const __m512 b1 = W == 2 ? _mm512_maskz_loadu_ps(m1, b + 16) : _mm512_setzero_ps();
    // The planes are far apart (one stream per row): fetch a few rows ahead.
    _mm_prefetch(reinterpret_cast<const char*>(b + 4 * ldb), _MM_HINT_T0);
    if (W == 2) _mm_prefetch(reinterpret_cast<const char*>(b + 4 * ldb + 31), _MM_HINT_T0);
    fma_rows<R, W>(acc, [a](int i) { return a[i]; }, b0, b1);
    a += MR;
    b += ldb;
  }
  if (ep) store_tile_epilogue<R>(acc, c, ldc, nr, accumulate, *ep, o, p);
  else store_tile<R>(acc, c, ldc, nr, accumulate);
}

// A[k][i] = a[k lda + i] for i < R (the input planes, positions as rows), B packed [kc][32].
template <int R>
void rows_a_in_place(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                     int64_t nr, bool accumulate) {
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * NR), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(a + 4 * lda), _MM_HINT_T0);
    fma_rows<R>(acc, [a](int i) { return a[i]; }, b0, b1);
    a += lda;
    b += NR;
  }
  store_tile<R>(acc, c, ldc, nr, accumulate);
}

// A gathered from a zero-padded input: A[k][i] = a1[koff[k] + S i] for the first R1 rows (one run
// of output positions on one output row) and a2[koff[k] + S (i - R1)] for the R2 rows after them
// (the next output row), koff[k] the offset of patch value k; B packed [kc][32] (the weights).
// The packed-patch kernel's FMA chain and store: the same bits without the patch copy.
template <int R1, int R2, int S>
void rows_a_gather(int64_t kc, const float* a1, const float* a2, const int32_t* koff, const float* b, float* c,
                   int64_t ldc, int64_t nr, bool accumulate) {
  constexpr int R = R1 + R2;
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * NR), _MM_HINT_T0);
    const float* p1 = a1 + koff[k];
    const float* p2 = a2 + koff[k];
    fma_rows<R>(acc, [p1, p2](int i) { return i < R1 ? p1[S * i] : p2[S * (i - R1)]; }, b0, b1);
    b += NR;
  }
  store_tile<R>(acc, c, ldc, nr, accumulate);
}

using AGather = void (*)(int64_t, const float*, const float*, const int32_t*, const float*, float*, int64_t,
                         int64_t, bool);
template <int S, int... R>
constexpr AGather kGatherRun[] = {nullptr, rows_a_gather<R, 0, S>...};  // one run of R rows
template <int S, int... R>
constexpr AGather kGatherPair[] = {nullptr, rows_a_gather<R, R, S>...};  // two runs of R rows

using BInPlace = void (*)(int64_t, const float*, const float*, int64_t, float*, int64_t, int64_t, bool,
                         const EpilogueRows*, int64_t, int64_t);
using AInPlace = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t, bool);
template <int W, int... R>
constexpr BInPlace kBRowsW[] = {nullptr, rows_b_in_place<R, W>...};
constexpr const BInPlace* kBRows = kBRowsW<2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14>;
constexpr const BInPlace* kBRowsHalf = kBRowsW<1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14>;
constexpr AInPlace kARows[MR + 1] = {
    nullptr,              rows_a_in_place<1>,  rows_a_in_place<2>,  rows_a_in_place<3>,
    rows_a_in_place<4>,   rows_a_in_place<5>,  rows_a_in_place<6>,  rows_a_in_place<7>,
    rows_a_in_place<8>,   rows_a_in_place<9>,  rows_a_in_place<10>, rows_a_in_place<11>,
    rows_a_in_place<12>,  rows_a_in_place<13>, rows_a_in_place<14>};

}  // namespace

void sgemm_b_in_place_avx512(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                             int64_t mr, int64_t nr, bool accumulate, const EpilogueRows* ep, int64_t o,
                             int64_t p) {
  if (nr <= 16) {
    if (mr > 0) kBRowsHalf[mr](kc, a, b, ldb, c, ldc, nr, accumulate, ep, o, p);
    return;
  }
  if (mr == MR) return rows_b_in_place<MR>(kc, a, b, ldb, c, ldc, nr, accumulate, ep, o, p);
  if (mr > 0) kBRows[mr](kc, a, b, ldb, c, ldc, nr, accumulate, ep, o, p);
}

void sgemm_a_in_place_avx512(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                             int64_t mr, int64_t nr, bool accumulate) {
  if (mr == MR) return rows_a_in_place<MR>(kc, a, lda, b, c, ldc, nr, accumulate);
  if (mr > 0) kARows[mr](kc, a, lda, b, c, ldc, nr, accumulate);
}

void sgemm_a_gather_avx512(int64_t kc, const float* a1, int64_t r1, const float* a2, int64_t r2, int64_t stride,
                           const int32_t* koff, const float* b, float* c, int64_t ldc, int64_t nr, bool accumulate) {
  if (stride < 1 || stride > 2 || r1 < 1 || r1 > MR || (r2 != 0 && (r2 != r1 || 2 * r1 > MR)))
    throw std::logic_error("sgemm_a_gather_avx512: unsupported rows " + std::to_string(r1) + " + " +
                           std::to_string(r2) + " at stride " + std::to_string(stride));
  const AGather f = r2 == 0 ? (stride == 1 ? kGatherRun<1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14>[r1]
                                           : kGatherRun<2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14>[r1])
                            : (stride == 1 ? kGatherPair<1, 1, 2, 3, 4, 5, 6, 7>[r1]
                                           : kGatherPair<2, 1, 2, 3, 4, 5, 6, 7>[r1]);
  f(kc, a1, a2, koff, b, c, ldc, nr, accumulate);
}

}  // namespace xdna::host

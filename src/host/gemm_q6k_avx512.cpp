// Q6_K GEMV on weights repacked once for AVX-512 (VNNI), four rows per pass.
//
// The GGML layout (ql[128], qh[64], int8 scales[16], f16 d per 256 values) makes the row kernel
// in gemm_ggml_avx512.cpp spend ~9 vector ops per 64 values rebuilding the 6-bit values and ~5
// more scaling each 4-value vpdpbusd lane by its sub-block's scale in f32. The repacked block
// (the same 210 bytes) orders the values so that int32 lane j of every vpdpbusd belongs to one
// sub-block: a super-block is 4 chained vpdpbusd into one int32 per sub-block, scaled once
// (exact in int32, then exact in f32: |Σ(q-32)·x̂|·|scale| <= 16·32·127·128 < 2^24). The -32
// offset starts the chain as -32·Σx̂ per sub-block, and the 2-bit planes sit where one 16-bit
// shift, a bit-select, a 64-bit rotate and a mask give the bytes:
//   bytes 0-63 (L0):    byte p = value(0, p) low nibble | value(1, p) low nibble << 4
//   bytes 64-127 (L1):  the same for value(2, p), value(3, p)
//   bytes 128-191 (H):  high 2 bits: of value(0, p) at bits 6-7 and value(2, p) at bits 4-5 of
//                       byte p; of value(1, p) at bits 2-3 and value(3, p) at 0-1 of byte next(p),
//                       the next byte in p's 8-byte word (wrapping)
//   bytes 192-207:      the int8 scales in lane order, 208-209 f16 d,
// where value(g, p) is value 16·s + 4g + p % 4 with s = lane_sub_block(p / 4). That lane order
// is the one a 4x4 dword transpose of the 256 x values gives (x's 32-bit unpacks, per super-block
// for all rows).
// GCC 12's AVX-512 headers build vectors from _mm*_undefined_*() and trip these warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "host/gemm.h"

namespace xdna::host {
namespace {

constexpr int kQ6Bytes = 210;

// The sub-block int32 lane j of the repacked super-block holds (the 4x4 transpose's order).
constexpr int lane_sub_block(int j) { return 4 * (j % 4) + j / 4; }
// The next byte in p's 8-byte word (the 64-bit rotate's neighbour).
constexpr int next_in_word(int p) { return (p & ~7) | ((p + 1) & 7); }

// The 6-bit value v (0-63, stored + 32) of a GGML Q6_K super-block: in half h = v / 128, part
// (v % 128) / 32 takes the low (parts 0, 1) or high (2, 3) nibble of ql[64h + v % 64] and bits
// 2·part of qh[32h + v % 32].
inline int ggml_q6_value(const uint8_t* p, int v) {
  const int h = v / 128, j = v % 128, part = j / 32;
  const uint8_t ql = p[64 * h + j % 64], qh = p[128 + 32 * h + j % 32];
  return (part < 2 ? ql & 15 : ql >> 4) | (((qh >> (2 * part)) & 3) << 4);
}

// Prefetch two passes ahead, as the GGML row kernels do (gemm_ggml_avx512.cpp).
constexpr int kAheadRows = 8;
inline void prefetch_span(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + o, _MM_HINT_T2);
}

template <int R>
void q6_k_repacked_rows(const uint8_t* const* row, const uint8_t* ahead, const XRow& x, float* out) {
  const int64_t supers = x.k / 256;
  const __m512i lo4 = _mm512_set1_epi8(0x0f), hi4 = _mm512_set1_epi8(static_cast<char>(0xf0));
  const __m512i low6 = _mm512_set1_epi8(0x3f), c32 = _mm512_set1_epi8(32), zero = _mm512_setzero_si512();
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < supers; ++sb) {
    prefetch_span(ahead + sb * 4 * kQ6Bytes, 4 * kQ6Bytes);  // this step's share of rows n + 8 .. n + 11
    // x transposed: dword i of 128-bit lane L of xg is dword g of that lane of x's i-th 64 values,
    // i.e. quad g of sub-block 4i + L (lane 4L + i).
    const int8_t* xq = x.q_s8 + sb * 256;
    const __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + 64);
    const __m512i x2 = _mm512_loadu_si512(xq + 128), x3 = _mm512_loadu_si512(xq + 192);
    const __m512i a = _mm512_unpacklo_epi32(x0, x1), b = _mm512_unpacklo_epi32(x2, x3);
    const __m512i c = _mm512_unpackhi_epi32(x0, x1), d = _mm512_unpackhi_epi32(x2, x3);
    const __m512i xg0 = _mm512_unpacklo_epi64(a, b), xg1 = _mm512_unpackhi_epi64(a, b);
    const __m512i xg2 = _mm512_unpacklo_epi64(c, d), xg3 = _mm512_unpackhi_epi64(c, d);
    // -32·Σx̂ per sub-block: where each row's chain starts (the values' +32).
    __m512i xs = _mm512_dpbusd_epi32(zero, c32, xg0);
    xs = _mm512_dpbusd_epi32(xs, c32, xg1);
    xs = _mm512_dpbusd_epi32(xs, c32, xg2);
    const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(xs, c32, xg3));
    // x's scale per sub-block in the same lane order (the same transpose, first dword of each).
    const float* s4 = x.q_scale4 + sb * 64;
    const __m512 sa = _mm512_unpacklo_ps(_mm512_loadu_ps(s4), _mm512_loadu_ps(s4 + 16));
    const __m512 sbv = _mm512_unpacklo_ps(_mm512_loadu_ps(s4 + 32), _mm512_loadu_ps(s4 + 48));
    const __m512 xscale = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(sa), _mm512_castps_pd(sbv)));
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + sb * kQ6Bytes;
      const __m512i l0 = _mm512_loadu_si512(p), l1 = _mm512_loadu_si512(p + 64), h = _mm512_loadu_si512(p + 128);
      const __m512i h2 = _mm512_srli_epi16(h, 2);
      // 0xCA: mask ? a : b, bit by bit.
      const __m512i q0 = _mm512_and_si512(_mm512_ternarylogic_epi32(lo4, l0, h2, 0xCA), low6);
      const __m512i q1 = _mm512_and_si512(_mm512_ror_epi64(_mm512_ternarylogic_epi32(hi4, l0, h2, 0xCA), 4), low6);
      const __m512i q2 = _mm512_and_si512(_mm512_ternarylogic_epi32(lo4, l1, h, 0xCA), low6);
      const __m512i q3 = _mm512_and_si512(_mm512_ror_epi64(_mm512_ternarylogic_epi32(hi4, l1, h, 0xCA), 4), low6);
      __m512i s = _mm512_dpbusd_epi32(start, q0, xg0);
      s = _mm512_dpbusd_epi32(s, q1, xg1);
      s = _mm512_dpbusd_epi32(s, q2, xg2);
      s = _mm512_dpbusd_epi32(s, q3, xg3);
      const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
      const __m512 dx = _mm512_mul_ps(xscale, _mm512_set1_ps(_cvtsh_ss(static_cast<unsigned short>(p[208] | (p[209] << 8)))));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(s, sc)), dx, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

}  // namespace

void repack_q6_k_blocks(const uint8_t* src, uint8_t* dst, int64_t blocks) {
  for (int64_t blk = 0; blk < blocks; ++blk, src += kQ6Bytes, dst += kQ6Bytes) {
    uint8_t v[256];
    for (int i = 0; i < 256; ++i) v[i] = static_cast<uint8_t>(ggml_q6_value(src, i));
    uint8_t out[kQ6Bytes] = {};
    uint8_t *l0 = out, *l1 = out + 64, *h = out + 128;
    for (int p = 0; p < 64; ++p) {
      const int base = 16 * lane_sub_block(p / 4) + p % 4;
      const int q0 = v[base], q1 = v[base + 4], q2 = v[base + 8], q3 = v[base + 12];
      l0[p] = static_cast<uint8_t>((q0 & 15) | (q1 & 15) << 4);
      l1[p] = static_cast<uint8_t>((q2 & 15) | (q3 & 15) << 4);
      h[p] |= static_cast<uint8_t>((q0 >> 4) << 6 | (q2 >> 4) << 4);
      h[next_in_word(p)] |= static_cast<uint8_t>((q1 >> 4) << 2 | (q3 >> 4));
    }
    for (int j = 0; j < 16; ++j) out[192 + j] = src[192 + lane_sub_block(j)];
    out[208] = src[208];
    out[209] = src[209];
    std::memcpy(dst, out, kQ6Bytes);
  }
}

void rows_q6_k_repacked_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  int r = 0;
  for (; r + 4 <= count; r += 4) {
    const uint8_t* rows[4] = {w.row(n + r), w.row(n + r + 1), w.row(n + r + 2), w.row(n + r + 3)};
    q6_k_repacked_rows<4>(rows, w.row(n + r + kAheadRows), x, out + r);
  }
  for (; r < count; ++r) {
    const uint8_t* one = w.row(n + r);
    q6_k_repacked_rows<1>(&one, w.row(n + r + kAheadRows), x, out + r);
  }
}

}  // namespace xdna::host

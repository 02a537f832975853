// GEMV row kernels for GGML Q4_0, Q5_0, Q8_0 and Q6_K weights (AVX-512 VNNI), four rows at a time.
//
// A one-row dot spends most of each 32-value block on per-block work (the f16 scale, x's scale,
// the offset) rather than on the bytes: at decode that, not DRAM, bounds it. Here x (int8
// values, scales, offset terms) is loaded once per step and used for four weight rows, and the
// per-block work stays in vectors. Integer block sums are exact; Q4_0 and Q6_K differ from a
// one-row dot only in f32 rounding order, Q8_0 is bit-identical to its one-row dot, and Q5_0 to
// Q8_0 on the same weights held as q8_0.
// GCC 12's AVX-512 headers build vectors from _mm*_undefined_*() and trip these warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "host/gemm.h"

namespace xdna::host {
namespace {

// Software prefetch: the four rows of a pass are adjacent in memory, so prefetching ahead within
// each row would mostly touch the rows being read. Instead each step prefetches its share of the
// pass two passes ahead (rows n + 8 .. n + 11, one contiguous span): 4 rows x 2 blocks of bytes.
constexpr int kAheadRows = 8;
// Prefetches go into L2 only (T2): the demand loads then keep the L1 miss slots. Q6_K: ~20% less
// CPU time per DRAM-streamed head. Q8_0 and Q4_0 (into L1 before): Qwen3-0.6B decode +12% and +7%
// (2 threads, medians of 6 interleaved pairs, 2026-12-01; an earlier single A/B had Q4_0 slower).
inline void prefetch_span(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + o, _MM_HINT_T2);
}

// d of a block, as 8 f32 lanes.
inline __m256 block_d(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(p[0] | (p[1] << 8))));
}

// Q4_0 (18-byte blocks: f16 d, 16 bytes holding values i (low nibble) and i + 16 (high)), four
// blocks b .. b + 3 of a row per 512-bit step, 128-bit lane j = block b + j. One 64-byte load at
// the row's block b holds the 4 scales (bytes 0, 18, 36, 54) and the nibbles of 3 blocks: vpermw
// gathers those into lanes 0-2 (block b + 3's come in from memory), vpermw spreads each d over its
// lane's 4 dwords. Each dword lane then sums 8 values in int32, its low nibbles (values 4i .. 4i+3)
// against x_lo and its high ones (16 + 4i ..) against x_hi, starting from -8·Σx̂ over those 8, so
// the f32 work (convert, ·x_scale·d, add) is once per 8 values instead of per 4. x (values,
// offset, scale) is permuted to that order once per step for all R rows.
template <int R>
void q4_0_rows(const uint8_t* const* row, const uint8_t* ahead, const XRow& x, float* out) {
  const int64_t blocks = x.k / 32;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // Words 9j + 1 .. 9j + 8 (bytes 18j + 2 .. 18j + 17) of the load into lane j (j < 3; lane 3 is
  // replaced).
  const __m512i nib_idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 26, 25, 24, 23, 22, 21, 20, 19, 17, 16, 15, 14,
                                           13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1);
  // Words 0, 9, 18, 27 (the f16 d of blocks b .. b + 3), each 4 times.
  const __m512i d_idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 27, 27, 27, 18, 18,
                                         18, 18, 9, 9, 9, 9, 0, 0, 0, 0);
  // Lane j of x_scale: block b + j's scale (q_scale4 entry 8j of the two 16-float loads).
  const __m512i sx_idx = _mm512_set_epi32(24, 24, 24, 24, 16, 16, 16, 16, 8, 8, 8, 8, 0, 0, 0, 0);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    // x values 0-15 of each block (against the low nibbles) and 16-31 (the high ones).
    const __m512i x0 = _mm512_loadu_si512(x.q_s8 + b * 32), x1 = _mm512_loadu_si512(x.q_s8 + b * 32 + 64);
    const __m512i xlo = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i xhi = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i o0 = _mm512_loadu_si512(x.q_neg8sum4 + b * 8), o1 = _mm512_loadu_si512(x.q_neg8sum4 + b * 8 + 16);
    const __m512i off = _mm512_add_epi32(_mm512_shuffle_i64x2(o0, o1, _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i64x2(o0, o1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 sx = _mm512_permutex2var_ps(_mm512_loadu_ps(x.q_scale4 + b * 8), sx_idx,
                                             _mm512_loadu_ps(x.q_scale4 + b * 8 + 16));
    prefetch_span(ahead + b * R * 18, 4 * R * 18);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + b * 18;
      const __m512i v = _mm512_loadu_si512(p);  // blocks b .. b + 3 end at byte 72
      const __m512i q = _mm512_inserti32x4(_mm512_permutexvar_epi16(nib_idx, v),
                                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 56)), 3);
      const __m512 d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(d_idx, v)));
      __m512i s = _mm512_dpbusd_epi32(off, _mm512_and_si512(q, low4), xlo);
      s = _mm512_dpbusd_epi32(s, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4), xhi);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, sx), acc[r]);
    }
  }
  for (; b < blocks; ++b) {  // the last 1-3 blocks, one per 256-bit step
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_s8 + b * 32));
    const __m256i off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_neg8sum4 + b * 8));
    const __m256 sx = _mm256_set1_ps(x.q_scale4[b * 8]);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + b * 18;
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
      const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm512_castsi512_si256(low4));
      const __m256i s = _mm256_dpbusd_epi32(off, nib, xv);
      const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), sx), block_d(p));
      acc[r] = _mm512_add_ps(acc[r], _mm512_insertf32x8(_mm512_setzero_ps(), t, 0));
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// Q8_0 (34-byte blocks: f16 d, int8 q[32]), R rows per pass, two blocks per 512-bit step. R = 1 is
// also the one-row dot_q8_0 (gemm_avx512.cpp). Every R gives the same bits, as does the AVX2
// dot_q8_0 (gemm_avx2.cpp): the same integer sums (|q| against x with q's sign), the same f32
// products (d·x_scale, then one FMA per block into 8 lanes) and the same accumulators: lanes 0-7
// take the even blocks, lanes 8-15 the odd ones, the two halves added first at the end. x, its
// scale and the sign mask are loaded once per step for all R rows, and d comes in as two f16 lanes
// converted together.
inline float hsum_halves(__m512 acc) {
  const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int kQ8Bytes = 34;

template <int R>
void q8_0_rows(const uint8_t* const* row, const uint8_t* ahead, const XRow& x, float* out) {
  const int64_t blocks = x.k / 32;
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m512i xv = _mm512_loadu_si512(x.q_s8 + b * 32);
    // x_scale of block b in lanes 0-7, of block b + 1 in lanes 8-15.
    const __m512 sx = _mm512_loadu_ps(x.q_scale4 + b * 8);
    prefetch_span(ahead + b * R * kQ8Bytes, 2 * R * kQ8Bytes);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + b * kQ8Bytes;
      const __m512i q = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQ8Bytes + 2)), 1);
      const __m512i xs = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(q), zero, xv);
      const __m512i s = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(q), xs);
      const __m512 d = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(p[34] | (p[35] << 8))),
                                                        _mm_set1_epi16(static_cast<short>(p[0] | (p[1] << 8)))));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, sx), acc[r]);
    }
  }
  if (b < blocks) {  // an odd last block goes to the even accumulator, as in the one-row dot
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_s8 + b * 32));
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + b * kQ8Bytes;
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(xv, q));
      const __m256 dxs = _mm256_set1_ps(_cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8))) * x.q_scale4[b * 8]);
      const __m256 lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dxs, _mm512_castps512_ps256(acc[r]));
      acc[r] = _mm512_insertf32x8(acc[r], lo, 0);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum_halves(acc[r]);
}

// Q5_0 (22-byte blocks: f16 d; u32 qh, bit i the fifth bit of value i; 16 bytes holding the low 4
// bits of values i (low nibble) and i + 16 (high)), stored plus 16. Every value is d times an
// integer in [-16, 15], so the block is exactly a Q8_0 block with the same d, and this kernel
// follows q8_0_rows step for step (two blocks per 512-bit step, lanes 0-7 the even blocks, 8-15
// the odd ones, the same f32 products and sums): only the int32 block sums are formed another
// way, and they are exact either way, so the result is bit-identical to q8_0_rows. Each block's
// bytes are widened to u = q + 16 (0..31) in registers: the nibbles at byte i, plus 16 where qh
// has bit i (a mask-register add), and vpdpbusd(u, x) starts from -16·Σx̂ per 4 values.
constexpr int kQ5Bytes = 22;

// The low 4 bits of blocks p0 (bytes 0-31) and p1 (32-63), value i at byte i, as u8 0..15.
inline __m512i q5_0_nibbles(const uint8_t* p0, const uint8_t* p1, __m512i low4) {
  const __m512i v = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 6)))),
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 6))), 1);
  // 128-bit lanes 1 and 3 (words 8-15, 24-31) take the high nibbles.
  return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), low4);
}

inline uint32_t q5_0_qh(const uint8_t* p) {
  uint32_t h;
  __builtin_memcpy(&h, p + 2, 4);
  return h;
}

template <int R>
void q5_0_rows(const uint8_t* const* row, const uint8_t* ahead, const XRow& x, float* out) {
  const int64_t blocks = x.k / 32;
  const __m512i low4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m512i xv = _mm512_loadu_si512(x.q_s8 + b * 32);
    const __m512 sx = _mm512_loadu_ps(x.q_scale4 + b * 8);
    const __m512i o = _mm512_loadu_si512(x.q_neg8sum4 + b * 8);
    const __m512i off = _mm512_add_epi32(o, o);  // -16·Σx̂ per 4 values
    prefetch_span(ahead + b * R * kQ5Bytes, 2 * R * kQ5Bytes);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + b * kQ5Bytes;
      const __mmask64 hb = _cvtu64_mask64(q5_0_qh(p) | uint64_t{q5_0_qh(p + kQ5Bytes)} << 32);
      const __m512i nib = q5_0_nibbles(p, p + kQ5Bytes, low4);
      const __m512i u = _mm512_mask_add_epi8(nib, hb, nib, sixteen);
      const __m512i s = _mm512_dpbusd_epi32(off, u, xv);
      const __m512 d = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(p[22] | (p[23] << 8))),
                                                        _mm_set1_epi16(static_cast<short>(p[0] | (p[1] << 8)))));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, sx), acc[r]);
    }
  }
  if (b < blocks) {  // an odd last block goes to the even accumulator, as in q8_0_rows
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_s8 + b * 32));
    const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_neg8sum4 + b * 8));
    const __m256i off = _mm256_add_epi32(o, o);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + b * kQ5Bytes;
      const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6));
      const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm512_castsi512_si256(low4));
      const __m256i u = _mm256_mask_add_epi8(nib, _cvtu32_mask32(q5_0_qh(p)), nib, _mm512_castsi512_si256(sixteen));
      const __m256i s = _mm256_dpbusd_epi32(off, u, xv);
      const __m256 dxs = _mm256_set1_ps(_cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8))) * x.q_scale4[b * 8]);
      const __m256 lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dxs, _mm512_castps512_ps256(acc[r]));
      acc[r] = _mm512_insertf32x8(acc[r], lo, 0);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum_halves(acc[r]);
}

// Q6_K (210-byte super-blocks of 256: ql[128], qh[64], int8 scales[16], f16 d), four rows per
// pass. Value v of half h (128 values) is (low or high nibble of ql[64h + v % 64]) | (2 bits of
// qh[32h + v % 32]) << 4, stored + 32. The one-row dot (gemm_avx512.cpp) spent ~11 vector ops per
// 64 values on that decode; here the 2 bits go straight to bits 4-5 with one 16-bit variable shift
// and one mask, and one vpternlogd merges them with the nibble (and it away). x (values, scales,
// per-16 sums) is loaded once per step for all the rows. The -32 comes off per super-block as
// 32·Σ d·scale·Σx̂ over its 16 sub-blocks (q_xsum16).
constexpr int kQ6Bytes = 210;

template <int R>
void q6_k_rows(const uint8_t* const* row, const uint8_t* ahead, const XRow& x, float* out) {
  const int64_t supers = x.k / 256;
  const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  // Values 0-31 take qh bits 0-1 (<< 4), values 32-63 bits 2-3 (<< 2); 64-95 bits 4-5 (as they
  // are), 96-127 bits 6-7 (>> 2). A 16-bit shift moves both bytes alike; the mask keeps bits 4-5.
  const __m512i shl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  // vpdpbusd lane j covers 4 values, so sub-block scale s (16 values) spans 4 lanes.
  const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i four = _mm512_set1_epi32(4);
  __m512 acc[R], corr[R];
  for (int r = 0; r < R; ++r) acc[r] = corr[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < supers; ++sb) {
    prefetch_span(ahead + sb * 4 * kQ6Bytes, 4 * kQ6Bytes);
    const __m512 xs16 = _mm512_loadu_ps(x.q_xsum16 + sb * 16);
    __m512 scf[R];  // d·scale per sub-block
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = row[r] + sb * kQ6Bytes;
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
      scf[r] = _mm512_mul_ps(sc, _mm512_set1_ps(_cvtsh_ss(static_cast<unsigned short>(p[208] | (p[209] << 8)))));
      corr[r] = _mm512_fmadd_ps(scf[r], xs16, corr[r]);
    }
    for (int h = 0; h < 2; ++h) {
      const int64_t c = sb * 256 + 128 * h;
      const __m512i x01 = _mm512_loadu_si512(x.q_s8 + c), x23 = _mm512_loadu_si512(x.q_s8 + c + 64);
      const __m512 xsc01 = _mm512_loadu_ps(x.q_scale4 + c / 4), xsc23 = _mm512_loadu_ps(x.q_scale4 + c / 4 + 16);
      const __m512i i01 = _mm512_add_epi32(spread, _mm512_set1_epi32(8 * h)), i23 = _mm512_add_epi32(i01, four);
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = row[r] + sb * kQ6Bytes;
        const __m512i l = _mm512_loadu_si512(p + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
        // 0xEA: (a & b) | c
        const __m512i q01 = _mm512_ternarylogic_epi32(l, low4, _mm512_and_si512(_mm512_sllv_epi16(qh, shl01), bits45), 0xEA);
        const __m512i q23 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), low4,
                                                      _mm512_and_si512(_mm512_srlv_epi16(qh, shr23), bits45), 0xEA);
        const __m512i s01 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q01, x01);
        const __m512i s23 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q23, x23);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s01), _mm512_mul_ps(_mm512_permutexvar_ps(i01, scf[r]), xsc01), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s23), _mm512_mul_ps(_mm512_permutexvar_ps(i23, scf[r]), xsc23), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) - 32 * _mm512_reduce_add_ps(corr[r]);
}

// Rows n .. n + count in groups of four, the remainder one at a time.
// (Prefetches past the matrix's end are harmless: a prefetch never faults.)
using Kernel = void (*)(const uint8_t* const*, const uint8_t*, const XRow&, float*);
template <Kernel Four, Kernel One>
void rows_by_four(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  int r = 0;
  for (; r + 4 <= count; r += 4) {
    const uint8_t* rows[4] = {w.row(n + r), w.row(n + r + 1), w.row(n + r + 2), w.row(n + r + 3)};
    Four(rows, w.row(n + r + kAheadRows), x, out + r);
  }
  for (; r < count; ++r) {
    const uint8_t* one = w.row(n + r);
    One(&one, w.row(n + r + kAheadRows), x, out + r);
  }
}

}  // namespace

void rows_q4_0_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  rows_by_four<q4_0_rows<4>, q4_0_rows<1>>(w, n, count, x, out);
}

void rows_q8_0_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  rows_by_four<q8_0_rows<4>, q8_0_rows<1>>(w, n, count, x, out);
}

void rows_q5_0_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  rows_by_four<q5_0_rows<4>, q5_0_rows<1>>(w, n, count, x, out);
}

void rows_q6_k_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out) {
  rows_by_four<q6_k_rows<4>, q6_k_rows<1>>(w, n, count, x, out);
}

}  // namespace xdna::host

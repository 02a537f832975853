// Winograd F(m x m, 3 x 3) block worker for AVX-512 (see conv_winograd.h). One block is a run
// of consecutive tiles (raster order) and a range of output channels:
//   1. input transform: for each panel of MR tiles (one tile per vector lane, patches read with
//      masked gathers: the zero padding is the mask) and each input channel, Bᵀ d B, stored as
//      the microkernel's left operand V[xi][panel][ci][MR];
//   2. per xi and per block of kCB channels, V[xi] · U[xi] on the f32 microkernel into
//      M[xi][tile][kCB];
//   3. output transform over 16 channels per vector, Aᵀ M A, then the epilogue; F(4x4) without a
//      pixel shuffle transposes the 16 channels x 16 positions and stores 4-float rows, the other
//      cases scatter into y (pixel-shuffled or not).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "host/conv_winograd.h"

namespace xdna::host {
namespace kernels_avx512 {  // transpose16x16 (conv.cpp's AVX-512 tile transpose)
#include "host/conv_kernels_impl.h"
}  // namespace kernels_avx512
namespace {

// Channels per GEMM / output-transform block: M[xi] holds kCB of them per tile.
constexpr int64_t kCB = 64;

template <int Mt>
struct Transform;
template <>
struct Transform<2> {
  static constexpr int A = 4;
  static constexpr float BT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
  static constexpr float AT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
};
template <>
struct Transform<4> {
  static constexpr int A = 6;
  static constexpr float BT[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                     {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
  static constexpr float AT[4][6] = {
      {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
};

// Σ_k c[k] v[k] over constant coefficients: zeros skipped, ±1 as add / subtract (the loop is
// unrolled, so each branch is decided at compile time).
template <int K>
inline __m512 combine(const float (&c)[K], const __m512* v, int64_t stride) {
  __m512 acc = _mm512_setzero_ps();
  bool first = true;
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) {
    const float ck = c[k];
    const __m512 x = v[k * stride];
    if (ck == 0.0f) continue;
    if (first) {
      acc = ck == 1.0f ? x : ck == -1.0f ? _mm512_sub_ps(_mm512_setzero_ps(), x) : _mm512_mul_ps(_mm512_set1_ps(ck), x);
      first = false;
    } else if (ck == 1.0f) {
      acc = _mm512_add_ps(acc, x);
    } else if (ck == -1.0f) {
      acc = _mm512_sub_ps(acc, x);
    } else {
      acc = _mm512_fmadd_ps(_mm512_set1_ps(ck), x, acc);
    }
  }
  return acc;
}

// Bits of the 16 lanes of the vector starting at column c that lie in [0, W).
inline __mmask16 column_mask(int64_t c, int64_t W) {
  const int64_t lo = std::max<int64_t>(0, -c), hi = std::min<int64_t>(16, W - c);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// e[j] lane l = row[c0 + Mt l + j] for j < Mt + 2 and the lanes in `lanes` (zero elsewhere and
// outside [0, W)): Mt contiguous (masked) loads, split by two rounds of even / odd permutes.
template <int Mt>
inline void deinterleave(const float* row, int64_t c0, int64_t W, __mmask16 lanes, __m512* e) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  __m512 r[Mt];
#pragma GCC unroll 4
  for (int k = 0; k < Mt; ++k) r[k] = _mm512_maskz_loadu_ps(column_mask(c0 + 16 * k, W), row + c0 + 16 * k);
  // The columns past the 16 Mt loaded (lanes of the last tiles' j >= Mt): at most 2.
  const __mmask16 tail = column_mask(c0 + 16 * Mt, W) & 0x3;
  const __m512 next = _mm512_maskz_loadu_ps(tail, row + c0 + 16 * Mt);
  __m512 col[Mt];
  if constexpr (Mt == 2) {
    col[0] = _mm512_permutex2var_ps(r[0], even, r[1]);
    col[1] = _mm512_permutex2var_ps(r[0], odd, r[1]);
  } else {
    const __m512 p0 = _mm512_permutex2var_ps(r[0], even, r[1]), p1 = _mm512_permutex2var_ps(r[0], odd, r[1]);
    const __m512 p2 = _mm512_permutex2var_ps(r[2], even, r[3]), p3 = _mm512_permutex2var_ps(r[2], odd, r[3]);
    col[0] = _mm512_permutex2var_ps(p0, even, p2);
    col[2] = _mm512_permutex2var_ps(p0, odd, p2);
    col[1] = _mm512_permutex2var_ps(p1, even, p3);
    col[3] = _mm512_permutex2var_ps(p1, odd, p3);
  }
  // j = Mt, Mt + 1: the next tile's columns 0 and 1 (lane 15 from `next`).
  const __m512i n0 = _mm512_castps_si512(next);
  const __m512i n1 = _mm512_alignr_epi32(n0, n0, 1);
#pragma GCC unroll 4
  for (int j = 0; j < Mt; ++j) e[j] = _mm512_maskz_mov_ps(lanes, col[j]);
  e[Mt] = _mm512_maskz_mov_ps(lanes, _mm512_castsi512_ps(_mm512_alignr_epi32(n0, _mm512_castps_si512(col[0]), 1)));
  e[Mt + 1] = _mm512_maskz_mov_ps(lanes, _mm512_castsi512_ps(_mm512_alignr_epi32(n1, _mm512_castps_si512(col[1]), 1)));
}

template <int Mt>
void input_transform(const WinogradBlock& b, int64_t MR, int64_t t0, int64_t nt, float* v) {
  using T = Transform<Mt>;
  constexpr int A = T::A;
  const int64_t tpanels = (nt + MR - 1) / MR;
  for (int64_t p = 0; p < tpanels; ++p) {
    const int64_t n = std::min(MR, nt - p * MR);
    alignas(64) int32_t off[16] = {};
    __mmask16 row_ok[A] = {}, col_ok[A] = {};
    for (int64_t l = 0; l < n; ++l) {
      const int64_t t = t0 + p * MR + l, r0 = t / b.tiles_w * Mt - b.pad_h, c0 = t % b.tiles_w * Mt - b.pad_w;
      off[l] = static_cast<int32_t>(r0 * b.W + c0);
      for (int i = 0; i < A; ++i) {
        if (r0 + i >= 0 && r0 + i < b.H) row_ok[i] |= static_cast<__mmask16>(1u << l);
        if (c0 + i >= 0 && c0 + i < b.W) col_ok[i] |= static_cast<__mmask16>(1u << l);
      }
    }
    const __m512i base = _mm512_load_si512(off);
    // All tiles on one tile row (the common case on wide images): each patch row is read as
    // contiguous vectors and split into the A per-column vectors with permutes, no gathers.
    const int64_t t_first = t0 + p * MR, t_last = t_first + n - 1;
    const bool one_row = t_first / b.tiles_w == t_last / b.tiles_w;
    const int64_t r_first = t_first / b.tiles_w * Mt - b.pad_h, c_first = t_first % b.tiles_w * Mt - b.pad_w;
    const __mmask16 lanes = static_cast<__mmask16>((1u << n) - 1);
    const __mmask16 store_mask = static_cast<__mmask16>((1u << MR) - 1);
    for (int64_t ci = 0; ci < b.cin; ++ci) {
      const float* plane = b.x + ci * b.H * b.W;
      __m512 d[A * A], t[A * A];
      if (one_row) {
#pragma GCC unroll 6
        for (int i = 0; i < A; ++i) {
          if (!row_ok[i]) {
#pragma GCC unroll 6
            for (int j = 0; j < A; ++j) d[i * A + j] = _mm512_setzero_ps();
            continue;
          }
          deinterleave<Mt>(plane + (r_first + i) * b.W, c_first, b.W, lanes, d + i * A);
        }
      } else {
#pragma GCC unroll 6
        for (int i = 0; i < A; ++i)
#pragma GCC unroll 6
          for (int j = 0; j < A; ++j)
            d[i * A + j] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), row_ok[i] & col_ok[j],
                                                    _mm512_add_epi32(base, _mm512_set1_epi32(static_cast<int32_t>(i * b.W + j))),
                                                    plane, 4);
      }
#pragma GCC unroll 6
      for (int i = 0; i < A; ++i)
#pragma GCC unroll 6
        for (int j = 0; j < A; ++j) t[i * A + j] = combine<A>(T::BT[i], d + j, A);  // (Bᵀ d)[i][j]
      float* out = v + (p * b.cin + ci) * MR;
      const int64_t xi_stride = tpanels * b.cin * MR;
#pragma GCC unroll 6
      for (int i = 0; i < A; ++i)
#pragma GCC unroll 6
        for (int j = 0; j < A; ++j)  // (Bᵀ d B)[i][j] = Σ_k (Bᵀ d)[i][k] BT[j][k]
          _mm512_mask_storeu_ps(out + (i * A + j) * xi_stride, store_mask, combine<A>(T::BT[j], t + i * A, 1));
    }
  }
}

template <int Mt>
void output_transform(const WinogradBlock& b, int64_t t0, int64_t nt, int64_t ldm, int64_t o0, int64_t cbn,
                      const float* mbuf) {
  using T = Transform<Mt>;
  constexpr int A = T::A;
  const int64_t r = b.shuffle, Wy = b.Wo * r, plane_y = b.Ho * r * Wy, P = b.Ho * b.Wo;
  const int64_t xi_stride = ldm * kCB;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512 scale = _mm512_set1_ps(b.ep.scale), lo = _mm512_set1_ps(b.ep.lo), hi = _mm512_set1_ps(b.ep.hi);
  for (int64_t oo = 0; oo < cbn; oo += 16) {
    const int64_t nc = std::min<int64_t>(16, cbn - oo);
    const __mmask16 cm = static_cast<__mmask16>((1u << nc) - 1);
    const __m512i o = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(o0 + oo)), lane);
    // Where channel o's value of position (oh, ow) goes: chan + (oh r) Wy + ow r.
    __m512i chan = _mm512_mullo_epi32(o, _mm512_set1_epi32(static_cast<int32_t>(P)));
    if (r > 1) {
      alignas(64) int32_t oc[16], ch[16];
      _mm512_store_si512(oc, o);
      for (int l = 0; l < 16; ++l)
        ch[l] = static_cast<int32_t>(oc[l] / (r * r) * plane_y + (oc[l] % (r * r)) / r * Wy + oc[l] % r);
      chan = _mm512_load_si512(ch);
    }
    const __m512i res_chan = _mm512_mullo_epi32(o, _mm512_set1_epi32(static_cast<int32_t>(P)));
    const __m512 bias = b.ep.bias ? _mm512_maskz_loadu_ps(cm, b.ep.bias + o0 + oo) : _mm512_setzero_ps();
    for (int64_t tl = 0; tl < nt; ++tl) {
      const int64_t t = t0 + tl, oh0 = t / b.tiles_w * Mt, ow0 = t % b.tiles_w * Mt;
      __m512 mv[A * A], tmp[Mt * A];
#pragma GCC unroll 36
      for (int xi = 0; xi < A * A; ++xi) mv[xi] = _mm512_maskz_loadu_ps(cm, mbuf + xi * xi_stride + tl * kCB + oo);
#pragma GCC unroll 4
      for (int i = 0; i < Mt; ++i)
#pragma GCC unroll 6
        for (int j = 0; j < A; ++j) tmp[i * A + j] = combine<A>(T::AT[i], mv + j, A);  // (Aᵀ M)[i][j]
      if constexpr (Mt == 4) {
        if (r == 1) {  // 16 channels x 16 positions: transposed, then 4-float rows per channel
          __m512 v[16];
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j)
              v[i * 4 + j] = _mm512_mul_ps(scale, _mm512_add_ps(combine<A>(T::AT[j], tmp + i * A, 1), bias));
          kernels_avx512::transpose16x16(v);
          const int64_t rows = std::min<int64_t>(4, b.Ho - oh0), cols = std::min<int64_t>(4, b.Wo - ow0);
          __mmask16 row_mask[4];
          for (int i = 0; i < 4; ++i)
            row_mask[i] = i < rows ? static_cast<__mmask16>(((1u << cols) - 1) << (4 * i)) : 0;
          for (int64_t c = 0; c < nc; ++c) {
            // Lane 4 i + j is position (oh0 + i, ow0 + j): row i stored from out + i Wo - 4 i.
            const int64_t at = (o0 + oo + c) * P + oh0 * b.Wo + ow0;
            __m512 y = v[c];
            if (b.ep.residual) {
              __m512 res = _mm512_setzero_ps();
#pragma GCC unroll 4
              for (int i = 0; i < 4; ++i) res = _mm512_mask_loadu_ps(res, row_mask[i], b.ep.residual + at + i * (b.Wo - 4));
              y = _mm512_add_ps(y, res);
            }
            y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) _mm512_mask_storeu_ps(b.y + at + i * (b.Wo - 4), row_mask[i], y);
          }
          continue;
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < Mt; ++i) {
        const int64_t oh = oh0 + i;
        if (oh >= b.Ho) break;
#pragma GCC unroll 4
        for (int j = 0; j < Mt; ++j) {
          const int64_t ow = ow0 + j;
          if (ow >= b.Wo) break;
          __m512 y = combine<A>(T::AT[j], tmp + i * A, 1);
          y = _mm512_mul_ps(scale, _mm512_add_ps(y, bias));
          if (b.ep.residual)
            y = _mm512_add_ps(y, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), cm,
                                                          _mm512_add_epi32(res_chan, _mm512_set1_epi32(static_cast<int32_t>(oh * b.Wo + ow))),
                                                          b.ep.residual, 4));
          y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
          _mm512_mask_i32scatter_ps(b.y, cm, _mm512_add_epi32(chan, _mm512_set1_epi32(static_cast<int32_t>(oh * r * Wy + ow * r))), y, 4);
        }
      }
    }
  }
}

template <int Mt>
void block(const WinogradBlock& b, SgemmFn sgemm, int64_t MR, int64_t NR, int64_t t0, int64_t t1, int64_t o0,
           int64_t o1, float* v, float* mbuf) {
  constexpr int A = Transform<Mt>::A;
  constexpr int64_t kKC = 256;  // K slice: a [kc][MR] and a [kc][NR] operand stay in L1
  const int64_t nt = t1 - t0, tpanels = (nt + MR - 1) / MR, ldm = tpanels * MR;
  input_transform<Mt>(b, MR, t0, nt, v);
  for (int64_t ob = o0; ob < o1; ob += kCB) {
    const int64_t cbn = std::min(kCB, o1 - ob);
    for (int xi = 0; xi < A * A; ++xi) {
      const float* vx = v + xi * tpanels * b.cin * MR;
      const float* ux = b.u + xi * b.panels * b.cin * NR;
      float* mx = mbuf + xi * ldm * kCB;
      for (int64_t jn = ob; jn < ob + cbn; jn += NR) {
        const int64_t nr = std::min(NR, ob + cbn - jn);
        const float* up = ux + (jn / NR) * b.cin * NR;
        for (int64_t pc = 0; pc < b.cin; pc += kKC) {
          const int64_t kc = std::min(kKC, b.cin - pc);
          for (int64_t p = 0; p < tpanels; ++p)
            sgemm(kc, vx + (p * b.cin + pc) * MR, up + pc * NR, mx + p * MR * kCB + (jn - ob), kCB,
                  std::min(MR, nt - p * MR), nr, pc > 0);
        }
      }
    }
    output_transform<Mt>(b, t0, nt, ldm, ob, cbn, mbuf);
  }
}

}  // namespace

void winograd_block_avx512(const WinogradBlock& b, SgemmFn sgemm, int64_t MR, int64_t NR, int64_t t0, int64_t t1,
                           int64_t o0, int64_t o1, float* v_scratch, float* m_scratch) {
  if (b.m == 4)
    block<4>(b, sgemm, MR, NR, t0, t1, o0, o1, v_scratch, m_scratch);
  else
    block<2>(b, sgemm, MR, NR, t0, t1, o0, o1, v_scratch, m_scratch);
}

}  // namespace xdna::host

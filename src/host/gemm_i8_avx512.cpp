// int8 x int8 GEMM with AVX-512 VNNI, for int8 weights with per-channel scales. x is quantized
// per block of 32 values of a row to int8 (scale max|x|/127 of the block, round to nearest, as
// the int8 GEMV does) and stored unsigned (q + 128), so `vpdpbusd` multiplies u8 x by s8 w.
// One row-wide scale let a single large activation flatten every other value of the row to a
// few levels (cosine 0.993 against f32 on MiniLM); a scale per 32 values keeps each block's own
// range. Each block's products accumulate exactly in int32 (|acc| <= 32·255·128 < 2^24, so the
// conversion to f32 is exact too), starting from -128·Σw of that block and column (the u8 offset
// correction), and are then scaled by the block's s_x into f32 accumulators; each output is
// scaled once by s_w[n]. Only x is rounded: each value moves by at most s_x(block)/2.
// GGML Q8_0 / Q4_0 / Q5_0 weights (prefill) use the same tile with a weight scale per block and column:
// f32 += Σ·s_x·d (gemm_ggml_vnni, below).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/gemm.h"

namespace xdna::host {
namespace {

constexpr int MR = 6, NR = 32;    // 12 int32 + 12 f32 accumulators: 6 rows x 2 x 16 columns
constexpr int64_t kBlock = 32;    // x values per activation scale
constexpr int64_t kQuadsPerBlock = kBlock / 4;
constexpr int64_t MC = 252;       // x rows per block (a multiple of MR; stays in L2)

// c[r][0..31] = Σ_blocks s_r[blk] · Σ_{k in blk} (a_r[k] - 128)·b[k] over nb blocks; rows past mr
// reuse row 0 (not stored). `neg` holds -128·Σw per block and column. With kBlockScales each
// block's column sums are also scaled by that block's weight scale d[blk][column] (GGML blocks).
template <bool kBlockScales>
void tile(int64_t nb, const uint8_t* const* a, const float* const* s, const int8_t* b,
          const int32_t* neg, const float* d, float (*c)[NR]) {
  __m512 f[MR][2];
  for (int r = 0; r < MR; ++r) f[r][0] = f[r][1] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < nb; ++blk) {
    const __m512i n0 = _mm512_loadu_si512(neg + blk * NR), n1 = _mm512_loadu_si512(neg + blk * NR + 16);
    __m512i acc[MR][2];
    for (int r = 0; r < MR; ++r) {
      acc[r][0] = n0;
      acc[r][1] = n1;
    }
    const int8_t* bb = b + blk * kQuadsPerBlock * NR * 4;
    for (int64_t q = 0; q < kQuadsPerBlock; ++q) {
      const __m512i b0 = _mm512_load_si512(bb + q * NR * 4), b1 = _mm512_load_si512(bb + q * NR * 4 + 64);
      for (int r = 0; r < MR; ++r) {
        int32_t quad;
        std::memcpy(&quad, a[r] + blk * kBlock + 4 * q, 4);
        const __m512i av = _mm512_set1_epi32(quad);
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
      }
    }
    if constexpr (kBlockScales) {
      const __m512 d0 = _mm512_loadu_ps(d + blk * NR), d1 = _mm512_loadu_ps(d + blk * NR + 16);
      for (int r = 0; r < MR; ++r) {
        const __m512 sv = _mm512_set1_ps(s[r][blk]);
        f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][0]), _mm512_mul_ps(sv, d0), f[r][0]);
        f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][1]), _mm512_mul_ps(sv, d1), f[r][1]);
      }
    } else {
      for (int r = 0; r < MR; ++r) {
        const __m512 sv = _mm512_set1_ps(s[r][blk]);
        f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][0]), sv, f[r][0]);
        f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][1]), sv, f[r][1]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(c[r], f[r][0]);
    _mm512_storeu_ps(c[r] + 16, f[r][1]);
  }
}

// One row of x -> u8 (q + 128) per block of 32, with the block scales; K padded to whole blocks
// with 128 (quantized zero; the padded weights are 0 too).
void quantize_row(const float* x, int64_t K, int64_t nb, uint8_t* q, float* s) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512i off = _mm512_set1_epi32(128);
  for (int64_t blk = 0; blk < nb; ++blk) {
    const int64_t k0 = blk * kBlock, n = std::min(kBlock, K - k0);
    const __mmask16 m0 = n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? 0xFFFF : n > 16 ? static_cast<__mmask16>((1u << (n - 16)) - 1) : 0;
    const __m512 x0 = _mm512_maskz_loadu_ps(m0, x + k0), x1 = _mm512_maskz_loadu_ps(m1, x + k0 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    s[blk] = amax / 127;
    const __m512 inv = _mm512_set1_ps(amax > 0 ? 127 / amax : 0.f);
    // cvtps rounds to nearest even (the default MXCSR mode), as std::nearbyint does.
    const __m512i q0 = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, inv)), off);
    const __m512i q1 = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, inv)), off);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k0), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k0 + 16), _mm512_cvtepi32_epi8(q1));
  }
}

// One NR-column panel of GGML Q8_0 / Q4_0 / Q5_0 rows n0 .. n0 + NR (rows past N as zeros) in
// the tile's layout: the int8 weights as [k-quad][column][4] (Q4_0's nibbles minus 8, Q5_0's
// 5-bit values minus 16, so all are exact int8: a Q5_0 panel is the one its q8_0 form gives),
// per block and column -128·Σw and the block's f16 scale d as f32.
void pack_ggml_panel(const WeightRows& w, int64_t n0, int64_t nb, int8_t* q, int32_t* neg, float* d) {
  const bool q4 = w.dtype == DType::Q4_0, q5 = w.dtype == DType::Q5_0;
  const int64_t block_bytes = q4 ? 18 : q5 ? 22 : 34;
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  const __m256i sixteen = _mm256_set1_epi8(16);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int c = 0; c < NR; ++c) {
    const int64_t n = n0 + c;
    if (n >= w.rows) {
      for (int64_t blk = 0; blk < nb; ++blk) {
        for (int64_t qd = 0; qd < kQuadsPerBlock; ++qd) std::memset(q + ((blk * kQuadsPerBlock + qd) * NR + c) * 4, 0, 4);
        neg[blk * NR + c] = 0;
        d[blk * NR + c] = 0.f;
      }
      continue;
    }
    const uint8_t* row = w.row(n);
    for (int64_t blk = 0; blk < nb; ++blk) {
      const uint8_t* p = row + blk * block_bytes;
      __m256i v;
      if (q4) {  // values 0-15 in the low nibbles, 16-31 in the high ones
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low4), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low4), eight);
        v = _mm256_set_m128i(hi, lo);
      } else if (q5) {  // as Q4_0 from byte 6, minus 16 where the fifth bit (bit i of qh) is 0
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6));
        const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), low4), _mm_and_si128(qs, low4));
        uint32_t qh;
        std::memcpy(&qh, p + 2, 4);
        v = _mm256_mask_sub_epi8(nib, _cvtu32_mask32(~qh), nib, sixteen);
      } else {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      }
      // Σ(w + 128) by sum of absolute differences against 0, then minus 32·128.
      const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256());
      const int64_t sum = _mm256_extract_epi64(sad, 0) + _mm256_extract_epi64(sad, 1) +
                          _mm256_extract_epi64(sad, 2) + _mm256_extract_epi64(sad, 3) - 32 * 128;
      neg[blk * NR + c] = static_cast<int32_t>(-128 * sum);
      d[blk * NR + c] = _cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8)));
      alignas(32) int32_t quads[kQuadsPerBlock];
      _mm256_store_si256(reinterpret_cast<__m256i*>(quads), v);
      for (int64_t qd = 0; qd < kQuadsPerBlock; ++qd)
        std::memcpy(q + ((blk * kQuadsPerBlock + qd) * NR + c) * 4, &quads[qd], 4);
    }
  }
}

}  // namespace

void pack_weights_i8(const WeightRows& w, PackedWeights& p) {
  const int64_t N = w.rows, K = w.cols, nb = (K + kBlock - 1) / kBlock, kq = nb * kQuadsPerBlock;
  const int64_t panels = (N + NR - 1) / NR;
  p.i8 = true;
  p.nr = NR;
  p.kquads = kq;
  p.storage = std::make_unique<HeapBuffer>(static_cast<size_t>(panels * kq * NR * 4));
  p.colsum.assign(panels * nb * NR, 0);  // [panel][block][column]: -128·Σw of the block
  p.col_scale.assign(panels * NR, 0.f);
  auto* dst = reinterpret_cast<int8_t*>(p.storage->data());
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pn = p0; pn < p1; ++pn)
      for (int c = 0; c < NR; ++c) {
        const int64_t n = pn * NR + c;
        const int8_t* row = n < N ? reinterpret_cast<const int8_t*>(w.row(n)) : nullptr;
        for (int64_t blk = 0; blk < nb; ++blk) {
          int32_t sum = 0;
          for (int64_t k = blk * kBlock; k < (blk + 1) * kBlock; ++k) {
            const int8_t v = row && k < K ? row[k] : 0;
            dst[((pn * kq + k / 4) * NR + c) * 4 + k % 4] = v;
            sum += v;
          }
          p.colsum[(pn * nb + blk) * NR + c] = -128 * sum;
        }
        p.col_scale[n] = row ? w.row_scales(n)[0] : 0.f;
      }
  });
}

void gemm_i8_vnni(const float* x, int64_t ldx, int64_t m, const PackedWeights& p, float* y, int64_t ldy) {
  const int64_t N = p.rows, K = p.cols, kq = p.kquads, nb = kq / kQuadsPerBlock, kpad = nb * kBlock;
  std::vector<uint8_t> xq(static_cast<size_t>(m * kpad));
  std::vector<float> sx(static_cast<size_t>(m * nb));
  parallel_for(m, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t i = m0; i < m1; ++i) quantize_row(x + i * ldx, K, nb, xq.data() + i * kpad, sx.data() + i * nb);
  });
  const auto* wq = reinterpret_cast<const int8_t*>(p.storage->data());
  auto run = [&](int64_t n0, int64_t n1) {
    float c[MR][NR];
    for (int64_t ic = 0; ic < m; ic += MC) {
      const int64_t mc_end = std::min(m, ic + MC);
      for (int64_t jn = n0; jn < n1; jn += NR) {
        const int8_t* b = wq + (jn / NR) * kq * NR * 4;
        const int32_t* neg = p.colsum.data() + (jn / NR) * nb * NR;
        const int64_t nr = std::min<int64_t>(NR, N - jn);
        for (int64_t ir = ic; ir < mc_end; ir += MR) {
          const int64_t mr = std::min<int64_t>(MR, mc_end - ir);
          const uint8_t* a[MR];
          const float* s[MR];
          for (int r = 0; r < MR; ++r) {
            const int64_t row = ir + (r < mr ? r : 0);
            a[r] = xq.data() + row * kpad;
            s[r] = sx.data() + row * nb;
          }
          tile<false>(nb, a, s, b, neg, nullptr, c);
          for (int64_t r = 0; r < mr; ++r) {
            float* yr = y + (ir + r) * ldy + jn;
            for (int64_t j = 0; j < nr; ++j) yr[j] = p.col_scale[jn + j] * c[r][j];
          }
        }
      }
    }
  };
  // vpdpbusd does 4 multiply-adds per lane where the f32 kernel does 1: the serial bound is 4x.
  if (2 * m * N * K < 4 * kGemmSerialFlops) run(0, N);
  else parallel_for(N, NR, run);
}

bool use_ggml_vnni_gemm(const WeightRows& w) {
  return (w.dtype == DType::Q8_0 || w.dtype == DType::Q4_0 || w.dtype == DType::Q5_0) && w.cols % kBlock == 0 &&
         active_isa() == Isa::Avx512 && has_avx512_vnni();
}

// Each thread unpacks its NR-column panels one at a time into a buffer that stays in L2 and
// sweeps every x row over it: the weights are read once per call and nothing is cached, so the
// GGML file stays the only copy (as at decode). The products per block are exact in int32;
// then f32 += s_x · d · Σ, as the GEMV (matmul.cpp) does with the same quantized x.
void gemm_ggml_vnni(const float* x, int64_t ldx, int64_t m, const WeightRows& w, float* y, int64_t ldy,
                    const float* bias) {
  const int64_t N = w.rows, K = w.cols, nb = K / kBlock, kq = nb * kQuadsPerBlock;
  std::vector<uint8_t> xq(static_cast<size_t>(m * K));
  std::vector<float> sx(static_cast<size_t>(m * nb));
  parallel_for(m, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t i = m0; i < m1; ++i) quantize_row(x + i * ldx, K, nb, xq.data() + i * K, sx.data() + i * nb);
  });
  auto run = [&](int64_t n0, int64_t n1) {
    HeapBuffer panel(static_cast<size_t>(kq * NR * 4));
    auto* b = reinterpret_cast<int8_t*>(panel.data());
    std::vector<int32_t> neg(static_cast<size_t>(nb * NR));
    std::vector<float> d(static_cast<size_t>(nb * NR));
    float c[MR][NR];
    for (int64_t jn = n0; jn < n1; jn += NR) {
      pack_ggml_panel(w, jn, nb, b, neg.data(), d.data());
      const int64_t nr = std::min<int64_t>(NR, N - jn);
      const __mmask16 m0 = nr >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nr) - 1);
      const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? static_cast<__mmask16>((1u << (nr - 16)) - 1) : 0;
      const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias + jn) : _mm512_setzero_ps();
      const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + jn + 16) : _mm512_setzero_ps();
      for (int64_t ir = 0; ir < m; ir += MR) {
        const int64_t mr = std::min<int64_t>(MR, m - ir);
        const uint8_t* a[MR];
        const float* s[MR];
        for (int r = 0; r < MR; ++r) {
          const int64_t row = ir + (r < mr ? r : 0);
          a[r] = xq.data() + row * K;
          s[r] = sx.data() + row * nb;
        }
        tile<true>(nb, a, s, b, neg.data(), d.data(), c);
        for (int64_t r = 0; r < mr; ++r) {  // (scalar stores here cost ~9% of the call)
          float* yr = y + (ir + r) * ldy + jn;
          _mm512_mask_storeu_ps(yr, m0, _mm512_add_ps(_mm512_loadu_ps(c[r]), b0));
          _mm512_mask_storeu_ps(yr + 16, m1, _mm512_add_ps(_mm512_loadu_ps(c[r] + 16), b1));
        }
      }
    }
  };
  if (2 * m * N * K < 4 * kGemmSerialFlops) run(0, N);
  else parallel_for(N, NR, run);
}

}  // namespace xdna::host

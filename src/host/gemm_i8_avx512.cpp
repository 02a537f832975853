// int8 x int8 GEMM with AVX-512 VNNI, for int8 weights with per-channel scales. x is quantized
// per row to int8 (scale max|x|/127, round to nearest) and stored unsigned (q + 128), so
// `vpdpbusd` multiplies u8 x by s8 w; the offset comes off at the end through 128·Σw per column.
// Products accumulate exactly in int32 (|q + 128|·|w| ≤ 255·127, K < 65536), and each output is
// scaled once by s_x[m]·s_w[n]. Only x is rounded: each value moves by at most s_x/2.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "host/gemm.h"

namespace xdna::host {
namespace {

constexpr int MR = 8, NR = 32;  // 16 zmm accumulators: 8 rows x 2 x 16 columns
constexpr int64_t MC = 256;     // x rows per block (stays in L2 with a 1536-deep K)

// c[r][0..31] = Σ_q a_r[q]·b[q] over kq k-quads; rows past mr reuse row 0 (not stored).
void tile(int64_t kq, const uint8_t* const* a, const int8_t* b, int32_t (*c)[NR]) {
  __m512i acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
  for (int64_t q = 0; q < kq; ++q) {
    const __m512i b0 = _mm512_load_si512(b + q * NR * 4), b1 = _mm512_load_si512(b + q * NR * 4 + 64);
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, a[r] + 4 * q, 4);
      const __m512i av = _mm512_set1_epi32(quad);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_si512(c[r], acc[r][0]);
    _mm512_storeu_si512(c[r] + 16, acc[r][1]);
  }
}

}  // namespace

void pack_weights_i8(const WeightRows& w, PackedWeights& p) {
  const int64_t N = w.rows, K = w.cols, kq = (K + 3) / 4, panels = (N + NR - 1) / NR;
  p.i8 = true;
  p.nr = NR;
  p.kquads = kq;
  p.storage = std::make_unique<HeapBuffer>(static_cast<size_t>(panels * kq * NR * 4));
  p.colsum.assign(panels * NR, 0);
  p.col_scale.assign(panels * NR, 0.f);
  auto* dst = reinterpret_cast<int8_t*>(p.storage->data());
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pn = p0; pn < p1; ++pn)
      for (int c = 0; c < NR; ++c) {
        const int64_t n = pn * NR + c;
        const int8_t* row = n < N ? reinterpret_cast<const int8_t*>(w.row(n)) : nullptr;
        int32_t sum = 0;
        for (int64_t k = 0; k < kq * 4; ++k) {
          const int8_t v = row && k < K ? row[k] : 0;
          dst[((pn * kq + k / 4) * NR + c) * 4 + k % 4] = v;
          sum += v;
        }
        p.colsum[n] = sum;
        p.col_scale[n] = row ? w.row_scales(n)[0] : 0.f;
      }
  });
}

void gemm_i8_vnni(const float* x, int64_t ldx, int64_t m, const PackedWeights& p, float* y, int64_t ldy) {
  const int64_t N = p.rows, K = p.cols, kq = p.kquads, kpad = kq * 4;
  std::vector<uint8_t> xq(static_cast<size_t>(m * kpad));
  std::vector<float> sx(m);
  parallel_for(m, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t i = m0; i < m1; ++i) {
      const float* xi = x + i * ldx;
      float amax = 0;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(xi[k]));
      const float inv = amax > 0 ? 127 / amax : 0;
      sx[i] = amax / 127;
      uint8_t* qi = xq.data() + i * kpad;
      for (int64_t k = 0; k < K; ++k) qi[k] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(xi[k] * inv)) + 128);
      for (int64_t k = K; k < kpad; ++k) qi[k] = 128;  // the padded weights are 0
    }
  });
  const auto* wq = reinterpret_cast<const int8_t*>(p.storage->data());
  auto run = [&](int64_t n0, int64_t n1) {
    int32_t c[MR][NR];
    for (int64_t ic = 0; ic < m; ic += MC) {
      const int64_t mc_end = std::min(m, ic + MC);
      for (int64_t jn = n0; jn < n1; jn += NR) {
        const int8_t* b = wq + (jn / NR) * kq * NR * 4;
        const int64_t nr = std::min<int64_t>(NR, N - jn);
        for (int64_t ir = ic; ir < mc_end; ir += MR) {
          const int64_t mr = std::min<int64_t>(MR, mc_end - ir);
          const uint8_t* a[MR];
          for (int r = 0; r < MR; ++r) a[r] = xq.data() + (ir + (r < mr ? r : 0)) * kpad;
          tile(kq, a, b, c);
          for (int64_t r = 0; r < mr; ++r) {
            float* yr = y + (ir + r) * ldy + jn;
            const float s = sx[ir + r];
            for (int64_t j = 0; j < nr; ++j)
              yr[j] = s * p.col_scale[jn + j] * static_cast<float>(c[r][j] - 128 * p.colsum[jn + j]);
          }
        }
      }
    }
  };
  // vpdpbusd does 4 multiply-adds per lane where the f32 kernel does 1: the serial bound is 4x.
  if (2 * m * N * K < 4 * kGemmSerialFlops) run(0, N);
  else parallel_for(N, NR, run);
}

}  // namespace xdna::host

// The bodies of ConvKernels, included once per instruction set inside its own namespace by
// conv.cpp (generic), conv_avx2.cpp and conv_avx512.cpp; the compiler vectorizes the copies,
// fills and clamps to that ISA's width. No include guard on purpose; the includer includes
// <algorithm>, <cstring> and host/conv_kernels.h first, outside its namespace (and <immintrin.h>
// where __AVX512F__ is defined: the AVX-512 build's short copies and tile transpose).

// dst[0 .. n) = src[0 .. n): runs of up to 32 as two masked AVX-512 moves in the AVX-512 build
// (std::copy called memmove for every short run: the transposed tile's 14-wide 1x1 panels, runs
// that cross an output row).
inline void copy_run(const float* src, int64_t n, float* dst) {
#if defined(__AVX512F__)
  if (n <= 32) {
    const __mmask16 m0 = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
    const __mmask16 m1 = static_cast<__mmask16>(n <= 16 ? 0 : n >= 32 ? 0xffff : (1u << (n - 16)) - 1);
    _mm512_mask_storeu_ps(dst, m0, _mm512_maskz_loadu_ps(m0, src));
    _mm512_mask_storeu_ps(dst + 16, m1, _mm512_maskz_loadu_ps(m1, src + 16));
    return;
  }
#endif
  std::copy(src, src + n, dst);
}

// im2col written straight into the GEMM's pre-packed panel layout (gemm.h PackedWeights): the
// output positions p0 .. p0 + n are the GEMM's "weight rows", NR per panel, panel q at
// q kdim NR with dst[k NR + c] = patch value k of position p0 + q NR + c (zero past n).
// The microkernel then reads the patches as written: no separate cols matrix, no repacking.
inline void pack_patches(const PatchGeom& g, int64_t p0, int64_t n, int64_t NR, float* dst) {
  const int64_t kdim = g.cin * g.Kh * g.Kw, panels = (n + NR - 1) / NR;
  if (g.Kh == 1 && g.Kw == 1 && g.stride[0] == 1 && g.stride[1] == 1 && g.padding[0] == 0 &&
      g.padding[1] == 0) {
    // 1x1, stride 1: the patches are the input itself (position p is x[:, p]); a panel is NR
    // consecutive floats of each input plane.
    for (int64_t q = 0; q < panels; ++q) {
      float* out = dst + q * kdim * NR;
      const int64_t nr = std::min(NR, n - q * NR);
      const float* src = g.x + p0 + q * NR;
      for (int64_t ci = 0; ci < g.cin; ++ci, out += NR, src += g.H * g.W) {
        if (nr == 32) std::memcpy(out, src, 32 * sizeof(float));
        else if (nr == 16) std::memcpy(out, src, 16 * sizeof(float));
        else {
          copy_run(src, nr, out);
          std::fill(out + nr, out + NR, 0.0f);
        }
      }
    }
    return;
  }
  int64_t ih0[64], iw0[64], segment[65];  // NR <= 64
  for (int64_t q = 0; q < panels; ++q) {
    float* out = dst + q * kdim * NR;
    const int64_t nr = std::min(NR, n - q * NR), first = p0 + q * NR;
    int64_t segments = 0;  // starts of the runs of positions on one output row, then nr
    for (int64_t c = 0; c < nr; ++c) {
      ih0[c] = (first + c) / g.Wo * g.stride[0] - g.padding[0];
      iw0[c] = (first + c) % g.Wo * g.stride[1] - g.padding[1];
      if (c == 0 || ih0[c] != ih0[c - 1]) segment[segments++] = c;
    }
    segment[segments] = nr;
    for (int64_t ci = 0; ci < g.cin; ++ci) {
      const float* plane = g.x + ci * g.H * g.W;
      for (int64_t i = 0; i < g.Kh; ++i) {
        for (int64_t j = 0; j < g.Kw; ++j, out += NR) {
          const int64_t di = i * g.dilation[0], dj = j * g.dilation[1];
          std::fill(out + nr, out + NR, 0.0f);
          // A run of positions on one output row reads one input row at columns iw, iw + s, ...;
          // the part of it outside [0, W) (or a row outside [0, H)) is the zero padding. Stride 1
          // is a contiguous copy; other strides (ResNet's 7x7 stem, its stride-2 3x3 and 1x1
          // downsamples) a strided one, instead of a bounds check per value.
          const int64_t s = g.stride[1];
          for (int64_t seg = 0; seg < segments; ++seg) {
            const int64_t c0 = segment[seg], c1 = segment[seg + 1];
            const int64_t ih = ih0[c0] + di, iw = iw0[c0] + dj;  // input row and column of position c0
            if (ih < 0 || ih >= g.H) {
              std::fill(out + c0, out + c1, 0.0f);
              continue;
            }
            // (no division at stride 1: it was ~10% of the packing's time)
            const int64_t lo = std::clamp(iw >= 0 ? c0 : c0 + (s == 1 ? -iw : (-iw + s - 1) / s), c0, c1);
            const int64_t hi =
                std::clamp(iw < g.W ? c0 + (s == 1 ? g.W - 1 - iw : (g.W - 1 - iw) / s) + 1 : c0, lo, c1);
            std::fill(out + c0, out + lo, 0.0f);
            const float* src = plane + ih * g.W + iw + s * (lo - c0);
            if (s == 2) {  // a constant stride: vectorized as loads + permutes (ResNet's stem, downsamples)
              float* __restrict o = out + lo;
              for (int64_t c = 0; c < hi - lo; ++c) o[c] = src[2 * c];
            } else if (s != 1) {
              for (int64_t c = lo; c < hi; ++c) out[c] = src[(c - lo) * s];
            } else if (hi - lo == 32) {
              std::memcpy(out + lo, src, 32 * sizeof(float));  // a whole AVX-512 panel, inlined
            } else if (hi - lo == 16) {
              std::memcpy(out + lo, src, 16 * sizeof(float));  // AVX2
            } else {
              copy_run(src, hi - lo, out + lo);
            }
            std::fill(out + hi, out + c1, 0.0f);
          }
        }
      }
    }
  }
}

inline void epilogue(const EpilogueRows& ep, float* y, int64_t o0, int64_t rows, int64_t p0, int64_t n) {
  const float s = ep.scale, l = ep.lo, h = ep.hi;
  for (int64_t o = o0; o < o0 + rows; ++o) {
    float* __restrict out = y + o * ep.P + p0;
    const float b = ep.bias ? ep.bias[o] : 0.0f;
    if (ep.residual) {
      const float* __restrict r = ep.residual + o * ep.P + p0;
      for (int64_t i = 0; i < n; ++i) out[i] = std::min(std::max(s * (out[i] + b) + r[i], l), h);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = std::min(std::max(s * (out[i] + b), l), h);
    }
  }
}

#if defined(__AVX512F__)
// r[k] = row k of a 16 x 16 block -> r[k] = its column k. The all-lanes masked forms of the
// shuffles: the plain ones start from an undefined vector, which GCC 12 warns about.
inline void transpose16x16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm512_mask_unpacklo_ps(r[k], 0xffff, r[k], r[k + 1]);
    t[k + 1] = _mm512_mask_unpackhi_ps(r[k], 0xffff, r[k], r[k + 1]);
  }
  // u[4 k + m], 128-bit block j: column 4 j + m of rows 4 k .. 4 k + 3.
  for (int k = 0; k < 16; k += 4) {
    const __m512d a = _mm512_castps_pd(t[k]), b = _mm512_castps_pd(t[k + 1]);
    const __m512d c = _mm512_castps_pd(t[k + 2]), d = _mm512_castps_pd(t[k + 3]);
    u[k] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(a, 0xff, a, c));
    u[k + 1] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(a, 0xff, a, c));
    u[k + 2] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(b, 0xff, b, d));
    u[k + 3] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(b, 0xff, b, d));
  }
  auto blocks = [](__m512 a, __m512 b, int imm) {  // 128-bit blocks (a0 a2 b0 b2) or (a1 a3 b1 b3)
    return imm == 0 ? _mm512_mask_shuffle_f32x4(a, 0xffff, a, b, 0x88)
                    : _mm512_mask_shuffle_f32x4(a, 0xffff, a, b, 0xdd);
  };
  for (int m = 0; m < 4; ++m) {
    const __m512 v0 = blocks(u[m], u[4 + m], 0), v1 = blocks(u[m], u[4 + m], 1);
    const __m512 w0 = blocks(u[8 + m], u[12 + m], 0), w1 = blocks(u[8 + m], u[12 + m], 1);
    r[m] = blocks(v0, w0, 0);
    r[8 + m] = blocks(v0, w0, 1);
    r[4 + m] = blocks(v1, w1, 0);
    r[12 + m] = blocks(v1, w1, 1);
  }
}
#endif

inline void transpose_tile(const float* t, int64_t P, int64_t nr, float* y, int64_t ldy) {
  int64_t i0 = 0;
#if defined(__AVX512F__)
  if (nr % 16 == 0)  // 16 x 16 blocks in registers; the last P % 16 positions below
    for (; i0 + 16 <= P; i0 += 16)
      for (int64_t c0 = 0; c0 < nr; c0 += 16) {
        __m512 r[16];
        for (int k = 0; k < 16; ++k) r[k] = _mm512_loadu_ps(t + (i0 + k) * nr + c0);
        transpose16x16(r);
        for (int k = 0; k < 16; ++k) _mm512_storeu_ps(y + (c0 + k) * ldy + i0, r[k]);
      }
#endif
  for (int64_t c = 0; c < nr; ++c) {
    float* __restrict row = y + c * ldy;
    for (int64_t i = i0; i < P; ++i) row[i] = t[i * nr + c];
  }
}

inline const ConvKernels& kernels() {
  static const ConvKernels k{pack_patches, epilogue, transpose_tile};
  return k;
}

// The bodies of ConvKernels, included once per instruction set inside its own namespace by
// conv.cpp (generic), conv_avx2.cpp and conv_avx512.cpp; the compiler vectorizes the copies,
// fills and clamps to that ISA's width. No include guard on purpose; the includer includes
// <algorithm>, <cstring> and host/conv_kernels.h first, outside its namespace.
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
          std::copy(src, src + nr, out);
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
            const int64_t lo = std::clamp(iw >= 0 ? c0 : c0 + (-iw + s - 1) / s, c0, c1);
            const int64_t hi = std::clamp(iw < g.W ? c0 + (g.W - 1 - iw) / s + 1 : c0, lo, c1);
            std::fill(out + c0, out + lo, 0.0f);
            const float* src = plane + ih * g.W + iw + s * (lo - c0);
            if (s != 1) {
              for (int64_t c = lo; c < hi; ++c) out[c] = src[(c - lo) * s];
            } else if (hi - lo == 32) {
              std::memcpy(out + lo, src, 32 * sizeof(float));  // a whole AVX-512 panel, inlined
            } else if (hi - lo == 16) {
              std::memcpy(out + lo, src, 16 * sizeof(float));  // AVX2
            } else {
              std::copy(src, src + (hi - lo), out + lo);
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

inline const ConvKernels& kernels() {
  static const ConvKernels k{pack_patches, epilogue};
  return k;
}

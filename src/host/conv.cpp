#include "host/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "host/gemm.h"
#include "host/matmul.h"
#include "host/ops.h"

namespace xdna::host {

// Patches per GEMM call: about 640 KiB of f32, so that a thread's patches stay in its L2 cache
// between being written and being read by the microkernel.
constexpr int64_t kPatchBudget = 160 * 1024;

[[noreturn]] static void bad(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

static Tensor packed_input(const char* op, const Tensor& x, int64_t ndim, const char* want) {
  if (!x.defined() || x.dtype() != DType::F32 || x.ndim() != ndim)
    bad(op, std::string("expects f32 x ") + want + ", got " +
                (x.defined() ? std::string(dtype_name(x.dtype())) + " " + shape_str(x.shape())
                             : "undefined"));
  return x.contiguous();
}

// The geometry one group's patch packing needs.
struct PatchGeom {
  const float* x;  // the group's first input plane
  int64_t cin, H, W, Kh, Kw, Wo;
  int64_t stride[2], padding[2], dilation[2];
};

// im2col written straight into the GEMM's pre-packed panel layout (gemm.h PackedWeights): the
// output positions p0 .. p0 + n are the GEMM's "weight rows", NR per panel, panel q at
// q kdim NR with dst[k NR + c] = patch value k of position p0 + q NR + c (zero past n).
// The microkernel then reads the patches as written: no separate cols matrix, no repacking.
static void pack_patches(const PatchGeom& g, int64_t p0, int64_t n, int64_t NR, float* dst) {
  const int64_t kdim = g.cin * g.Kh * g.Kw, panels = (n + NR - 1) / NR;
  std::vector<int64_t> ih0(NR), iw0(NR), segment;
  for (int64_t q = 0; q < panels; ++q) {
    float* out = dst + q * kdim * NR;
    const int64_t nr = std::min(NR, n - q * NR), first = p0 + q * NR;
    segment.clear();  // starts of the runs of positions on one output row, then nr
    for (int64_t c = 0; c < nr; ++c) {
      ih0[c] = (first + c) / g.Wo * g.stride[0] - g.padding[0];
      iw0[c] = (first + c) % g.Wo * g.stride[1] - g.padding[1];
      if (c == 0 || ih0[c] != ih0[c - 1]) segment.push_back(c);
    }
    segment.push_back(nr);
    for (int64_t ci = 0; ci < g.cin; ++ci) {
      const float* plane = g.x + ci * g.H * g.W;
      for (int64_t i = 0; i < g.Kh; ++i) {
        for (int64_t j = 0; j < g.Kw; ++j, out += NR) {
          const int64_t di = i * g.dilation[0], dj = j * g.dilation[1];
          std::fill(out + nr, out + NR, 0.0f);
          if (g.stride[1] != 1) {
            for (int64_t c = 0; c < nr; ++c) {
              const int64_t ih = ih0[c] + di, iw = iw0[c] + dj;
              out[c] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? plane[ih * g.W + iw] : 0.0f;
            }
            continue;
          }
          // Stride 1: a run of positions on one row reads a contiguous input run; the part of it
          // outside [0, W) (or a row outside [0, H)) is the zero padding.
          for (size_t s = 0; s + 1 < segment.size(); ++s) {
            const int64_t c0 = segment[s], c1 = segment[s + 1];
            const int64_t ih = ih0[c0] + di, iw = iw0[c0] + dj;  // input column of position c0
            if (ih < 0 || ih >= g.H) {
              std::fill(out + c0, out + c1, 0.0f);
              continue;
            }
            const int64_t lo = std::clamp(c0 - iw, c0, c1), hi = std::clamp(c0 + g.W - iw, lo, c1);
            std::fill(out + c0, out + lo, 0.0f);
            const float* src = plane + ih * g.W + iw + (lo - c0);
            if (hi - lo == 32) std::memcpy(out + lo, src, 32 * sizeof(float));  // a whole AVX-512 panel, inlined
            else if (hi - lo == 16) std::memcpy(out + lo, src, 16 * sizeof(float));  // AVX2
            else std::copy(src, src + (hi - lo), out + lo);
            std::fill(out + hi, out + c1, 0.0f);
          }
        }
      }
    }
  }
}

// Dense or grouped convolution as y_g[Cout_g, P] = w_g[Cout_g, Cin_g Kh Kw] · patchesᵀ: the
// weights are the GEMM's left operand and the output positions its right one, so the result
// lands channels-first in y with no transpose. Each thread takes whole slices of positions and
// packs then multiplies them itself (the GEMM runs inline inside parallel_for): the patches never
// leave its cache, where a separate im2col pass would write and re-read them through memory.
static void conv2d_im2col(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho,
                          int64_t Wo, Tensor& y) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t Cout = w.dim(0), Kh = w.dim(2), Kw = w.dim(3);
  const int64_t G = p.groups, cin_g = Cin / G, cout_g = Cout / G;
  const int64_t kdim = cin_g * Kh * Kw, P = Ho * Wo;
  const Tensor wf = to_f32(w).contiguous();
  const int64_t NR = active_kernels().nr;  // the panel width gemm() expects of `patches`
  const int64_t budget = std::max<int64_t>(1, kPatchBudget / std::max<int64_t>(kdim * NR, 1)) * NR;
  const int64_t chunk = std::min(budget, (P + NR - 1) / NR * NR), chunks = (P + chunk - 1) / chunk;
  for (int64_t g = 0; g < G; ++g) {
    const PatchGeom geom{x.data<float>() + g * cin_g * H * W, cin_g, H, W, Kh, Kw, Wo,
                         {p.stride[0], p.stride[1]}, {p.padding[0], p.padding[1]},
                         {p.dilation[0], p.dilation[1]}};
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      // Kept per thread between calls: fresh buffers cost their page faults every time.
      thread_local std::unique_ptr<HeapBuffer> scratch;
      const size_t bytes = static_cast<size_t>(chunk * kdim) * sizeof(float);
      if (!scratch || scratch->size() < bytes) {
        scratch.reset();
        scratch = std::make_unique<HeapBuffer>(bytes);
      }
      PackedWeights patches;
      patches.nr = static_cast<int>(NR);
      patches.cols = kdim;
      patches.storage = std::move(scratch);
      struct GiveBack {  // returns the buffer to `scratch` however this scope exits
        PackedWeights& p;
        std::unique_ptr<HeapBuffer>& s;
        ~GiveBack() { s = std::move(p.storage); }
      } give_back{patches, scratch};
      float* pp = reinterpret_cast<float*>(patches.storage->data());
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t p0 = c * chunk, n = std::min(chunk, P - p0);
        pack_patches(geom, p0, n, NR, pp);
        patches.rows = n;
        WeightRows rows;  // describes the patches; gemm reads them from `patches`
        rows.dtype = DType::F32;
        rows.data = reinterpret_cast<const uint8_t*>(pp);
        rows.row_bytes = kdim * int64_t{sizeof(float)};
        rows.rows = n;
        rows.cols = kdim;
        gemm(wf.data<float>() + g * cout_g * kdim, kdim, rows, y.data<float>() + g * cout_g * P + p0, P,
             cout_g, &patches);
      }
    });
  }
}

// Depthwise: output channel o reads only input channel o / (Cout / Cin).
static void conv2d_depthwise(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho,
                             int64_t Wo, Tensor& y) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t Cout = w.dim(0), Kh = w.dim(2), Kw = w.dim(3), mult = Cout / Cin;
  const Tensor wf = to_f32(w);
  const float* px = x.data<float>();
  const float* pw = wf.data<float>();
  float* py = y.data<float>();
  parallel_for(Cout * Ho, std::max<int64_t>(1, 4096 / std::max<int64_t>(Wo * Kh * Kw, 1)),
               [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / Ho, oh = r % Ho;
      const float* plane = px + (o / mult) * H * W;
      const float* k = pw + o * Kh * Kw;
      float* out = py + r * Wo;
      std::fill(out, out + Wo, 0.0f);
      // Tap by tap over the whole output row: contiguous (vectorizable) when stride is 1.
      for (int64_t i = 0; i < Kh; ++i) {
        const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
        if (ih < 0 || ih >= H) continue;
        const float* in = plane + ih * W;
        for (int64_t j = 0; j < Kw; ++j) {
          const int64_t off = j * p.dilation[1] - p.padding[1], s = p.stride[1];
          // Output columns whose input column ow * s + off lies inside [0, W).
          const int64_t ow0 = off >= 0 ? 0 : (-off + s - 1) / s;
          const int64_t ow1 = W - 1 - off < 0 ? 0 : std::min(Wo, (W - 1 - off) / s + 1);
          const float kv = k[i * Kw + j];
          for (int64_t ow = ow0; ow < ow1; ++ow) out[ow] += in[ow * s + off] * kv;
        }
      }
    }
  });
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvParams& p) {
  Tensor y;
  conv2d_into(x, w, bias, p, y);
  return y;
}

void conv2d_into(const Tensor& x_in, const Tensor& w, const Tensor* bias, const ConvParams& p, Tensor& y) {
  const Tensor x = packed_input("conv2d", x_in, 3, "[Cin, H, W]");
  if (!w.defined() || w.ndim() != 4) bad("conv2d", "expects w [Cout, Cin/groups, Kh, Kw]");
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t Cout = w.dim(0), Kh = w.dim(2), Kw = w.dim(3), G = p.groups;
  const std::string shapes = "x " + shape_str(x.shape()) + ", w " + shape_str(w.shape()) +
                             ", groups " + std::to_string(G);
  if (G <= 0 || Cin % G || Cout % G || w.dim(1) * G != Cin)
    bad("conv2d", "channels do not match groups: " + shapes);
  for (int i = 0; i < 2; ++i)
    if (p.stride[i] <= 0 || p.dilation[i] <= 0 || p.padding[i] < 0)
      bad("conv2d", "stride and dilation must be positive and padding non-negative");
  const int64_t Ho = (H + 2 * p.padding[0] - p.dilation[0] * (Kh - 1) - 1) / p.stride[0] + 1;
  const int64_t Wo = (W + 2 * p.padding[1] - p.dilation[1] * (Kw - 1) - 1) / p.stride[1] + 1;
  if (Kh <= 0 || Kw <= 0 || H + 2 * p.padding[0] < p.dilation[0] * (Kh - 1) + 1 ||
      W + 2 * p.padding[1] < p.dilation[1] * (Kw - 1) + 1)
    bad("conv2d", "kernel larger than the padded input: " + shapes);
  Tensor b;
  if (bias) {
    if (!bias->defined() || bias->numel() != Cout || bias->ndim() != 1)
      bad("conv2d", "bias " + (bias->defined() ? shape_str(bias->shape()) : "undefined") +
                        " must be [" + std::to_string(Cout) + "]");
    b = to_f32(*bias);
  }
  const bool reuse = y.defined() && y.dtype() == DType::F32 && y.is_contiguous() &&
                     y.numel() == Cout * Ho * Wo && y.buffer() != x.buffer();
  y = reuse ? y.reshape({Cout, Ho, Wo}) : Tensor::empty({Cout, Ho, Wo});
  if (y.numel() == 0) return;
  if (G > 1 && G == Cin)
    conv2d_depthwise(x, w, p, Ho, Wo, y);
  else
    conv2d_im2col(x, w, p, Ho, Wo, y);
  if (b.defined()) {
    const int64_t P = Ho * Wo;
    float* py = y.data<float>();
    const float* pb = b.data<float>();
    parallel_for(Cout, std::max<int64_t>(1, (1 << 14) / P), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        float* row = py + o * P;
        const float bo = pb[o];
        for (int64_t i = 0; i < P; ++i) row[i] += bo;
      }
    });
  }
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  if (!x.defined() || x.ndim() != 2 || !w.defined() || w.ndim() != 3)
    bad("conv1d", "expects x [Cin, L] and w [Cout, Cin/groups, K], got x " +
                      (x.defined() ? shape_str(x.shape()) : "undefined") + ", w " +
                      (w.defined() ? shape_str(w.shape()) : "undefined"));
  ConvParams p;
  p.stride[1] = stride;
  p.padding[1] = padding;
  p.dilation[1] = dilation;
  p.groups = groups;
  const Tensor y = conv2d(x.contiguous().reshape({x.dim(0), 1, x.dim(1)}),
                          w.contiguous().reshape({w.dim(0), w.dim(1), 1, w.dim(2)}), bias, p);
  return y.reshape({y.dim(0), y.dim(2)});
}

Tensor pixel_shuffle(const Tensor& x_in, int64_t r) {
  const Tensor x = packed_input("pixel_shuffle", x_in, 3, "[C r^2, H, W]");
  if (r <= 0 || x.dim(0) % (r * r))
    bad("pixel_shuffle", "channels of " + shape_str(x.shape()) + " not divisible by r^2 for r = " +
                             std::to_string(r));
  const int64_t C = x.dim(0) / (r * r), H = x.dim(1), W = x.dim(2);
  Tensor y = Tensor::empty({C, H * r, W * r});
  const float* px = x.data<float>();
  float* py = y.data<float>();
  parallel_for(C * H * r, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {  // output row (c, h r + i)
      const int64_t c = row / (H * r), hr = row % (H * r), h = hr / r, i = hr % r;
      float* out = py + row * W * r;
      for (int64_t j = 0; j < r; ++j) {
        const float* in = px + ((c * r * r + i * r + j) * H + h) * W;
        for (int64_t w = 0; w < W; ++w) out[w * r + j] = in[w];
      }
    }
  });
  return y;
}

Tensor pool2d(const Tensor& x_in, PoolKind kind, const int64_t kernel[2], const int64_t stride[2],
              const int64_t padding[2]) {
  const Tensor x = packed_input("pool2d", x_in, 3, "[C, H, W]");
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2);
  const float* px = x.data<float>();
  if (kind == PoolKind::GlobalAvg) {
    Tensor y = Tensor::empty({C, 1, 1});
    for (int64_t c = 0; c < C; ++c) {
      float s = 0.0f;
      for (int64_t i = 0; i < H * W; ++i) s += px[c * H * W + i];
      y.data<float>()[c] = H * W > 0 ? s / float(H * W) : 0.0f;
    }
    return y;
  }
  for (int i = 0; i < 2; ++i)
    if (kernel[i] <= 0 || stride[i] <= 0 || padding[i] < 0 || 2 * padding[i] > kernel[i])
      bad("pool2d", "kernel " + std::to_string(kernel[0]) + "x" + std::to_string(kernel[1]) +
                        " needs positive stride and padding <= kernel / 2");
  if (H + 2 * padding[0] < kernel[0] || W + 2 * padding[1] < kernel[1])
    bad("pool2d", "kernel larger than the padded input " + shape_str(x.shape()));
  const int64_t Ho = (H + 2 * padding[0] - kernel[0]) / stride[0] + 1;
  const int64_t Wo = (W + 2 * padding[1] - kernel[1]) / stride[1] + 1;
  Tensor y = Tensor::empty({C, Ho, Wo});
  float* py = y.data<float>();
  const float area = float(kernel[0] * kernel[1]);
  parallel_for(C * Ho, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / Ho, oh = r % Ho;
      const float* plane = px + c * H * W;
      for (int64_t ow = 0; ow < Wo; ++ow) {
        float acc = kind == PoolKind::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
        for (int64_t i = 0; i < kernel[0]; ++i) {
          const int64_t ih = oh * stride[0] - padding[0] + i;
          if (ih < 0 || ih >= H) continue;
          for (int64_t j = 0; j < kernel[1]; ++j) {
            const int64_t iw = ow * stride[1] - padding[1] + j;
            if (iw < 0 || iw >= W) continue;
            const float v = plane[ih * W + iw];
            acc = kind == PoolKind::Max ? std::max(acc, v) : acc + v;
          }
        }
        py[r * Wo + ow] = kind == PoolKind::Max ? acc : acc / area;
      }
    }
  });
  return y;
}

}  // namespace xdna::host

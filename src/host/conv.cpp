#include "host/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "host/matmul.h"
#include "host/ops.h"

namespace xdna::host {

// im2col scratch per matmul call: about 8 MiB of f32, so big images go through in slices.
constexpr int64_t kColsBudget = int64_t{1} << 21;

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

// Dense or grouped convolution: per group, gather input patches as rows [positions, Cin_g Kh Kw]
// and multiply by the weight rows [Cout_g, Cin_g Kh Kw] (the weight's own layout and dtype).
static void conv2d_im2col(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho,
                          int64_t Wo, Tensor& y) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t Cout = w.dim(0), Kh = w.dim(2), Kw = w.dim(3);
  const int64_t G = p.groups, cin_g = Cin / G, cout_g = Cout / G;
  const int64_t kdim = cin_g * Kh * Kw, P = Ho * Wo;
  const Tensor w2 = w.contiguous().reshape({Cout, kdim});
  const int64_t chunk = std::max<int64_t>(1, std::min(P, kColsBudget / std::max<int64_t>(kdim, 1)));
  Tensor cols = Tensor::empty({chunk, kdim});
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for (int64_t g = 0; g < G; ++g) {
    const Tensor wg = w2.slice(0, g * cout_g, (g + 1) * cout_g);
    for (int64_t p0 = 0; p0 < P; p0 += chunk) {
      const int64_t n = std::min(chunk, P - p0);
      float* pc = cols.data<float>();
      parallel_for(n, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t oh = (p0 + r) / Wo, ow = (p0 + r) % Wo;
          float* row = pc + r * kdim;
          for (int64_t c = 0; c < cin_g; ++c) {
            const float* plane = px + (g * cin_g + c) * H * W;
            for (int64_t i = 0; i < Kh; ++i) {
              const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
              for (int64_t j = 0; j < Kw; ++j) {
                const int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
                const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
                *row++ = inside ? plane[ih * W + iw] : 0.0f;
              }
            }
          }
        }
      });
      const Tensor part = matmul(cols.slice(0, 0, n), wg);  // [n, cout_g]
      const float* pp = part.data<float>();
      for (int64_t o = 0; o < cout_g; ++o) {
        float* dst = py + (g * cout_g + o) * P + p0;
        for (int64_t r = 0; r < n; ++r) dst[r] = pp[r * cout_g + o];
      }
    }
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

Tensor conv2d(const Tensor& x_in, const Tensor& w, const Tensor* bias, const ConvParams& p) {
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
  Tensor y = Tensor::empty({Cout, Ho, Wo});
  if (y.numel() == 0) return y;
  if (G > 1 && G == Cin)
    conv2d_depthwise(x, w, p, Ho, Wo, y);
  else
    conv2d_im2col(x, w, p, Ho, Wo, y);
  if (b.defined()) {
    const int64_t P = Ho * Wo;
    for (int64_t o = 0; o < Cout; ++o) {
      float* row = y.data<float>() + o * P;
      const float bo = b.data<float>()[o];
      for (int64_t i = 0; i < P; ++i) row[i] += bo;
    }
  }
  return y;
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

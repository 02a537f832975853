#include "host/conv.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/conv_gemm.h"
#include "host/conv_kernels.h"
#include "host/conv_winograd.h"
#include "host/gemm.h"
#include "host/ops.h"
#include "host/scratch_buffer.h"
#include "host/conv_weight_cache.h"

namespace xdna::host {
namespace conv_generic {
#include "host/conv_kernels_impl.h"
}  // namespace conv_generic
const ConvKernels& conv_kernels_generic() { return conv_generic::kernels(); }

const ConvKernels& active_conv_kernels() {
  switch (active_isa()) {
    case Isa::Avx512: return conv_kernels_avx512();
    case Isa::Avx2: return conv_kernels_avx2();
    default: return conv_kernels_generic();
  }
}


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

static std::shared_ptr<const PackedConvWeights> pack_conv_weights(const Tensor& w, int64_t G, int64_t MR) {
  const Tensor wf = to_f32(w).contiguous();
  auto p = std::make_shared<PackedConvWeights>();
  p->mr = MR;
  p->groups = G;
  p->cout_g = w.dim(0) / G;
  p->kdim = w.dim(1) * w.dim(2) * w.dim(3);
  const int64_t panels_g = (p->cout_g + MR - 1) / MR, kdim = p->kdim, cout_g = p->cout_g;
  p->storage = std::make_unique<HeapBuffer>(static_cast<size_t>(std::max<int64_t>(G * panels_g * kdim * MR, 1)) * sizeof(float));
  float* dst = reinterpret_cast<float*>(p->storage->data());
  const float* src = wf.data<float>();
  parallel_for(G * panels_g, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t g = q / panels_g, i = q % panels_g, mr = std::min(MR, cout_g - i * MR);
      float* out = dst + q * kdim * MR;
      for (int64_t r = 0; r < MR; ++r) {
        const float* row = src + (g * cout_g + i * MR + r) * kdim;
        for (int64_t k = 0; k < kdim; ++k) out[k * MR + r] = r < mr ? row[k] : 0.0f;
      }
    }
  });
  return p;
}

// Packings of constant weights (conv_weight_cache.h); past 1 GiB, constant weights are packed per call.
static ConstantWeightCache<PackedConvWeights>& conv_weight_cache() {
  static ConstantWeightCache<PackedConvWeights> c(size_t{1} << 30);
  return c;
}

size_t conv_weight_cache_bytes() { return conv_weight_cache().bytes(); }

std::shared_ptr<const PackedConvWeights> conv_weights(const Tensor& w, int64_t G, int64_t MR, bool constant) {
  return conv_weight_cache().get(w, constant, {G, MR}, [&] { return pack_conv_weights(w, G, MR); });
}

// A 1x1 convolution at stride s without padding reads only x[:, s i, s j]: gathered once into a
// buffer kept per thread, that subsampled input is a stride-1 1x1 convolution's (ResNet's
// downsample shortcuts), which then takes the in-place kernels. The gather copies what the
// patch packing copied, once, in whole rows.
static Tensor subsample(const Tensor& x, int64_t sh, int64_t sw, int64_t Ho, int64_t Wo) {
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2);
  thread_local std::shared_ptr<HeapBuffer> buffer;
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(C * Ho * Wo, 1)) * sizeof(float);
  if (!buffer || buffer->size() < bytes) {
    buffer.reset();
    buffer = std::make_shared<HeapBuffer>(bytes);
  }
  Tensor xs = Tensor::view(buffer, 0, {C, Ho, Wo}, DType::F32);
  const float* px = x.data<float>();
  float* out = xs.data<float>();
  parallel_for(C * Ho, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* __restrict in = px + (r / Ho * H + r % Ho * sh) * W;
      float* __restrict o = out + r * Wo;
      if (sw == 2)  // a constant stride: vectorized as loads + permutes
        for (int64_t j = 0; j < Wo; ++j) o[j] = in[2 * j];
      else
        for (int64_t j = 0; j < Wo; ++j) o[j] = in[j * sw];
    }
  });
  return xs;
}

// Dense or grouped convolution as y_g[Cout_g, P] = w_g[Cout_g, Cin_g Kh Kw] · patchesᵀ: the
// weights are the GEMM's left operand (packed once, see PackedConvWeights) and the output
// positions its right one, so the result lands channels-first in y with no transpose. Each
// thread takes whole slices of positions, packs their patches and sweeps the microkernel over
// them itself: the patches never leave its cache. The epilogue runs on each output tile right
// after its last K slice, while it is still in L1.
static void conv2d_im2col(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho,
                          int64_t Wo, const EpilogueRows& ep, bool constant_weights, Tensor& y) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t Cout = w.dim(0), Kh = w.dim(2), Kw = w.dim(3);
  const int64_t G = p.groups, cin_g = Cin / G, cout_g = Cout / G;
  const int64_t kdim = cin_g * Kh * Kw, P = Ho * Wo;
  const IsaKernels& kern = active_kernels();
  const int64_t NR = kern.nr, MR = kern.mr, MC = MR * 16;
  const ConvKernels& ck = active_conv_kernels();
  ConvParams unit = p;  // the same convolution at stride 1
  unit.stride[0] = unit.stride[1] = 1;
  if ((p.stride[0] > 1 || p.stride[1] > 1) && use_pointwise_in_place(unit, Kh, Kw, kern))
    return conv2d_im2col(subsample(x, p.stride[0], p.stride[1], Ho, Wo), w, unit, Ho, Wo, ep, constant_weights, y);
  if (use_transposed(P, kdim, cout_g, NR, MR, use_gathered_rows(p, Kh, Kw, kern)))
    return conv2d_transposed(x, p, Kh, Kw, Ho, Wo, ep, *conv_weights(w, G, NR, constant_weights), y);
  const auto packed = conv_weights(w, G, MR, constant_weights);
  if (use_channel_split((P + NR - 1) / NR, kdim, NR, cout_g, MR))
    return conv2d_channel_split(x, p, Kh, Kw, Ho, Wo, ep, *packed, y);
  if (use_pointwise_in_place(p, Kh, Kw, kern)) return conv2d_pointwise(x, ep, *packed, y);
  // Each thread takes an equal run of NR-position panels (a chunk count that does not divide
  // evenly among the threads left one idle for up to a third of a ResNet layer) and walks it in
  // slices of at most `budget` panels, whose patches fit its L2.
  const int64_t budget = std::max<int64_t>(1, kPatchBudget / std::max<int64_t>(kdim * NR, 1));
  const int64_t panels = (P + NR - 1) / NR, chunk = std::min(budget, panels) * NR;
  float* py = y.data<float>();
  for (int64_t g = 0; g < G; ++g) {
    const PatchGeom geom{x.data<float>() + g * cin_g * H * W, cin_g, H, W, Kh, Kw, Wo,
                         {p.stride[0], p.stride[1]}, {p.padding[0], p.padding[1]},
                         {p.dilation[0], p.dilation[1]}};
    parallel_for(panels, 1, [&](int64_t q0, int64_t q1) {
      // Kept per thread between calls: fresh buffers cost their page faults every time.
      thread_local std::unique_ptr<HeapBuffer> scratch;
      float* pp = grown_scratch(scratch, static_cast<size_t>(chunk * kdim) * sizeof(float));
      for (int64_t q = q0; q < q1; q += budget) {
        const int64_t p0 = q * NR, n = std::min(std::min(q + budget, q1) * NR, P) - p0;
        ck.pack_patches(geom, p0, n, NR, pp);
        for (int64_t pc = 0; pc < kdim; pc += kConvKC) {
          const int64_t kc = std::min(kConvKC, kdim - pc);
          const bool last = pc + kc >= kdim;
          // Blocks of MC output channels: their weight slice (MC x KC) stays in L2 while the
          // patch panels pass; all channels at once (2048 x 192 floats) did not fit.
          for (int64_t ic = 0; ic < cout_g; ic += MC) {
            const int64_t ic1 = std::min(ic + MC, cout_g);
            for (int64_t jr = 0; jr < n; jr += NR) {
              const int64_t nr = std::min(NR, n - jr);
              const float* bp = pp + jr * kdim + pc * NR;
              for (int64_t ir = ic; ir < ic1; ir += MR) {
                const int64_t mr = std::min(MR, ic1 - ir), o = g * cout_g + ir;
                float* tile = py + o * P + p0 + jr;
                if (last && ep.residual)  // the residual is cold (written layers ago): fetch it during the tile
                  for (int64_t r = 0; r < mr; ++r) {
                    __builtin_prefetch(ep.residual + (o + r) * P + p0 + jr);
                    __builtin_prefetch(ep.residual + (o + r) * P + p0 + jr + nr - 1);
                  }
                kern.sgemm(kc, packed->panel(g, ir / MR) + pc * MR, bp, tile, P, mr, nr, pc > 0);
                if (last)
                  ck.epilogue(ep, py, o, mr, p0 + jr, nr);
              }
            }
          }
        }
      }
    });
  }
}

// Depthwise: output channel o reads only input channel o / (Cout / Cin).
static void conv2d_depthwise(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho,
                             int64_t Wo, const EpilogueRows& ep, Tensor& y) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t Cout = w.dim(0), Kh = w.dim(2), Kw = w.dim(3), mult = Cout / Cin;
  const Tensor wf = to_f32(w);
  const ConvKernels& ck = active_conv_kernels();
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
      ck.epilogue(ep, py, o, 1, oh * Wo, Wo);
    }
  });
}

// The direct AVX-512 kernel (conv_direct_avx512.cpp) where it wins: no dilation, one group and
// rows of at least 64 outputs (super-resolution's full-size feature maps), where a 48-wide
// register tile is mostly full; stride 1, or stride 2 for kernels wider than 1x1 (the 7x7 stem of
// ResNet, the 3x3 one of EfficientNet: their 3 input channels made the patch packing most of the
// GEMM path's time). Narrower rows (ResNet's 56 and below) stay on the GEMM.
static bool use_direct(const ConvParams& p, int64_t Kh, int64_t Kw, int64_t Wo) {
  const int64_t s = p.stride[0];
  return active_isa() == Isa::Avx512 && p.groups == 1 && p.stride[1] == s && (s == 1 || (s == 2 && Kh * Kw > 1)) &&
         p.dilation[0] == 1 && p.dilation[1] == 1 && Kw <= 16 && Wo >= 64;
}

static void conv2d_direct(const Tensor& x, const Tensor& w, const ConvParams& p, int64_t Ho, int64_t Wo,
                          const EpilogueRows& ep, bool constant_weights, int64_t shuffle, Tensor& y) {
  const auto packed = conv_weights(w, 1, kDirectConvMR, constant_weights);
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2), stride = p.stride[0];
  const float* in = x.data<float>();
  DirectConv::Halves half;
  if (stride == 2) {  // the input's columns split by parity (DirectConv::stride), in a buffer kept per thread
    half = stride_two_halves(W, w.dim(3), p.padding[1], Wo);
    thread_local std::unique_ptr<HeapBuffer> split;
    float* dst = grown_scratch(split, static_cast<size_t>(C * H * 2 * half.len) * sizeof(float));
    parallel_for(C * H, 32, [&](int64_t r0, int64_t r1) { split_columns_by_parity(in, W, half, r0, r1, dst); });
    in = dst;
  }
  const DirectConv c{in, packed->panel(0, 0), y.data<float>(), C, H, W, w.dim(0), w.dim(2), w.dim(3),
                     p.padding[0], p.padding[1], Ho, Wo, ep, kConvKC, shuffle == 2 ? 2 : 0, stride, half};
  // Threads take output rows (all channel blocks of one row: its input rows stay in L2) from a
  // shared counter instead of fixed halves: on a loaded machine a descheduled thread's rows are
  // taken by the others instead of being waited for.
  const int64_t blocks = (c.cout + kDirectConvMR - 1) / kDirectConvMR, items = Ho * blocks;
  std::atomic<int64_t> next{0};
  parallel_for(std::min<int64_t>(num_threads(), Ho), 1, [&](int64_t, int64_t) {
    for (int64_t i0; (i0 = next.fetch_add(blocks)) < items;)
      conv2d_direct_avx512(c, i0, std::min(i0 + blocks, items));
  });
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvParams& p) {
  Tensor y;
  conv2d_into(x, w, bias, p, y);
  return y;
}

void conv2d_into(const Tensor& x_in, const Tensor& w, const Tensor* bias, const ConvParams& p, Tensor& y,
                 const ConvEpilogue& e) {
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
    b = to_f32(*bias).contiguous();
  }
  if (std::isnan(e.lo) || std::isnan(e.hi) || e.lo > e.hi || !std::isfinite(e.res_scale))
    bad("conv2d", "epilogue clamp needs lo <= hi and a finite res_scale");
  Tensor r;
  if (e.residual) {
    const Shape want{Cout, Ho, Wo};
    if (!e.residual->defined() || e.residual->dtype() != DType::F32 || e.residual->shape() != want)
      bad("conv2d", "residual " + (e.residual->defined() ? shape_str(e.residual->shape()) : "undefined") +
                        " must be f32 " + shape_str(want));
    r = e.residual->contiguous();
  }
  const int64_t r_sh = e.pixel_shuffle;
  if (r_sh < 1 || Cout % (r_sh * r_sh))
    bad("conv2d", "pixel_shuffle " + std::to_string(r_sh) + " does not divide the " + std::to_string(Cout) +
                      " output channels into r^2 groups");
  const Shape out_shape{Cout / (r_sh * r_sh), Ho * r_sh, Wo * r_sh};
  const int wino = winograd_tile(p, Cin, Cout, Kh, Kw, Ho, Wo);  // conv_winograd.cpp's selection rule
  const bool direct = use_direct(p, Kh, Kw, Wo) && G == 1;
  const bool fused = r_sh == 1 || wino || (r_sh == 2 && direct);  // else: conv, then a separate shuffle
  const bool reuse = fused && y.defined() && y.dtype() == DType::F32 && y.is_contiguous() &&
                     y.numel() == Cout * Ho * Wo && y.buffer() != x.buffer() &&
                     (!r.defined() || y.buffer() != r.buffer());
  y = reuse ? y.reshape(fused ? out_shape : Shape{Cout, Ho, Wo})
            : Tensor::empty(fused ? out_shape : Shape{Cout, Ho, Wo});
  if (y.numel() == 0) return;
  const EpilogueRows ep{b.defined() ? b.data<float>() : nullptr, r.defined() ? r.data<float>() : nullptr,
                        e.res_scale, e.lo, e.hi, Ho * Wo};
  if (G > 1 && G == Cin)
    conv2d_depthwise(x, w, p, Ho, Wo, ep, y);
  else if (wino)
    conv2d_winograd(x, w, p, Ho, Wo, ep, e.constant_weights, r_sh, wino, y);
  else if (direct)
    conv2d_direct(x, w, p, Ho, Wo, ep, e.constant_weights, r_sh, y);
  else
    conv2d_im2col(x, w, p, Ho, Wo, ep, e.constant_weights, y);
  if (!fused) y = pixel_shuffle(y, r_sh);
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
    std::vector<float> row_max(kind == PoolKind::Max && stride[1] == 2 ? static_cast<size_t>(Wo) : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / Ho, oh = r % Ho;
      const float* plane = px + c * H * W;
      if (kind == PoolKind::Max && stride[1] == 2) {
        // ResNet's 3x3 / 2 stem pool, tap by tap over the whole output row (vectorizable; a
        // bounds check per value before). Same taps in the same order per output: same result.
        float* __restrict a = row_max.data();
        std::fill(a, a + Wo, -std::numeric_limits<float>::infinity());
        for (int64_t i = 0; i < kernel[0]; ++i) {
          const int64_t ih = oh * stride[0] - padding[0] + i;
          if (ih < 0 || ih >= H) continue;
          for (int64_t j = 0; j < kernel[1]; ++j) {
            const int64_t off = j - padding[1];  // input column 2 ow + off
            const int64_t ow0 = off >= 0 ? 0 : (-off + 1) / 2;
            const int64_t ow1 = W - 1 - off < 0 ? 0 : std::min(Wo, (W - 1 - off) / 2 + 1);
            const float* in = plane + ih * W;
            for (int64_t ow = ow0; ow < ow1; ++ow) a[ow] = std::max(a[ow], in[2 * ow + off]);
          }
        }
        std::copy(a, a + Wo, py + r * Wo);
        continue;
      }
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

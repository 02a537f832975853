#include "npu/sim_exec_conv.h"

#include <algorithm>
#include <stdexcept>

#include "aie_kernels/kernels.h"
#include "core/parallel.h"
#include "npu/aie_numerics.h"

namespace xdna::npu {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

aie::bf16 bf(float v) { return aie::to_bf16(v, aie::Rounding::NearestEven); }

}  // namespace

Tensor round_bf16(const Tensor& x) {
  Tensor y = x.contiguous().clone();
  float* p = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) p[i] = aie::to_float(bf(p[i]));
  return y;
}

std::string conv_sim_unsupported(const ConvSimLayer& l) {
  if (!l.w.defined() || l.w.ndim() != 4) throw std::invalid_argument("conv npu-sim: weight must be [Cout, Cin/g, K, K]");
  if (l.w.dim(2) != l.w.dim(3))
    return "a " + std::to_string(l.w.dim(2)) + "x" + std::to_string(l.w.dim(3)) + " kernel: the conv designs are square";
  const int64_t cout = l.w.dim(0), cin = l.w.dim(1) * l.groups;
  if (l.groups != 1 && !(l.groups == cin && cout == cin))
    return "groups " + std::to_string(l.groups) + ": the conv designs are dense or depthwise (multiplier 1)";
  return "";
}

ConvShape conv_sim_shape(const ConvSimLayer& l, int64_t c, int64_t h, int64_t w) {
  ConvShape s;
  s.height = h, s.width = w, s.c_in = c, s.c_out = l.w.dim(0), s.kernel = l.w.dim(2), s.stride = l.stride;
  s.depthwise = l.groups > 1;
  if (l.w.dim(1) * l.groups != c)
    throw std::invalid_argument("conv npu-sim: input has " + std::to_string(c) + " channels, the weight expects " +
                                std::to_string(l.w.dim(1) * l.groups));
  s.out_height = (h + l.pad[0] + l.pad[1] - s.kernel) / s.stride + 1;
  s.out_width = (w + l.pad[2] + l.pad[3] - s.kernel) / s.stride + 1;
  return s;
}

Tensor conv2d_npu_sim(const Tensor& x_in, const ConvSimLayer& l, ConvSimStats* stats, int columns) {
  if (const std::string why = conv_sim_unsupported(l); !why.empty())
    throw std::invalid_argument("conv npu-sim: " + why);
  if (x_in.ndim() != 3 || x_in.dtype() != DType::F32)
    throw std::invalid_argument("conv npu-sim: input must be f32 [C, H, W], got " + shape_str(x_in.shape()));
  const Tensor x = x_in.contiguous();
  const ConvShape s = conv_sim_shape(l, x.dim(0), x.dim(1), x.dim(2));
  const ConvTile t = choose_conv_tile(s);
  const Design d = conv_design(s, t, columns);  // validated: what the simulated NPU runs
  const int64_t K = s.kernel, H = s.height, W = s.width, Ho = s.out_height, Wo = s.out_width;
  const int64_t cin = s.depthwise ? s.c_in : conv_padded_c_in(s), cpo = conv_padded_c_out(s), ch = t.channels;
  const int64_t in_rows = (t.rows - 1) * s.stride + K, in_cols = (t.cols - 1) * s.stride + K;
  const int64_t n_ch = ceil_div(cpo, ch), n_col = ceil_div(Wo, t.cols);
  const int64_t cores = int64_t(columns) * 4, band = cores * t.rows, n_band = ceil_div(Ho, band);

  // Input as bf16 NHWC (channels padded with zeros), as the host writes activations to DDR.
  const int64_t cin_store = s.depthwise ? cpo : cin;
  std::vector<aie::bf16> xin(size_t(H * W * cin_store));
  const float* xp = x.data<float>();
  for (int64_t c = 0; c < s.c_in; ++c)
    for (int64_t i = 0; i < H * W; ++i) xin[size_t(i * cin_store + c)] = bf(xp[c * H * W + i]);
  // Weights and epilogue constants per channel tile, in the kernel's layout.
  const Tensor wc = l.w.contiguous();
  const float* wp = wc.data<float>();
  const Tensor bc = l.bias.defined() ? l.bias.contiguous() : Tensor();
  const float* bp = bc.defined() ? bc.data<float>() : nullptr;
  const int64_t w_elems = s.depthwise ? K * K * ch : K * K * cin * ch;
  std::vector<std::vector<aie::bf16>> wt(size_t(n_ch), std::vector<aie::bf16>(size_t(w_elems), aie::bf16{}));
  std::vector<std::vector<float>> epi(size_t(n_ch), std::vector<float>(size_t(ch + 3), 0.0f));
  for (int64_t ct = 0; ct < n_ch; ++ct) {
    for (int64_t j = 0; j < ch; ++j) {
      const int64_t co = ct * ch + j;
      if (co >= s.c_out) continue;  // padded channels: zero weights and bias
      epi[ct][j] = bp ? bp[co] : 0.0f;
      for (int64_t ky = 0; ky < K; ++ky)
        for (int64_t kx = 0; kx < K; ++kx) {
          if (s.depthwise) {
            wt[ct][size_t((ky * K + kx) * ch + j)] = bf(wp[(co * K + ky) * K + kx]);
          } else {
            for (int64_t ci = 0; ci < s.c_in; ++ci)
              wt[ct][size_t(((ky * K + kx) * cin + ci) * ch + j)] = bf(wp[((co * s.c_in + ci) * K + ky) * K + kx]);
          }
        }
    }
    epi[ct][ch] = l.lo, epi[ct][ch + 1] = l.hi, epi[ct][ch + 2] = l.neg_slope;
  }

  Tensor y = Tensor::empty({s.c_out, Ho, Wo});
  float* yp = y.data<float>();
  const int64_t tin_c = s.depthwise ? ch : cin;  // channels of a staged input window
  // Every (band, column tile, channel tile, core) is one core's kernel call; they are independent.
  const int64_t calls = n_band * n_col * n_ch * cores;
  parallel_for(calls, 1, [&](int64_t i0, int64_t i1) {
    std::vector<aie::bf16> win(size_t(in_rows * in_cols * tin_c)), out(size_t(t.rows * t.cols * ch));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t core = i % cores, ct = (i / cores) % n_ch, cc = (i / cores / n_ch) % n_col, bnd = i / cores / n_ch / n_col;
      const int64_t r0 = bnd * band + core * t.rows, c0 = cc * t.cols;
      if (r0 >= Ho) continue;  // an idle core of the last band
      // The input window: rows r0*s - pad_top .. , zero outside the image (the staged border).
      const int64_t iy0 = r0 * s.stride - l.pad[0], ix0 = c0 * s.stride - l.pad[2];
      for (int64_t wy = 0; wy < in_rows; ++wy)
        for (int64_t wx = 0; wx < in_cols; ++wx) {
          const int64_t iy = iy0 + wy, ix = ix0 + wx;
          aie::bf16* dst = &win[size_t((wy * in_cols + wx) * tin_c)];
          if (iy < 0 || iy >= H || ix < 0 || ix >= W) {
            std::fill(dst, dst + tin_c, aie::bf16{});
            continue;
          }
          const aie::bf16* src = &xin[size_t((iy * W + ix) * cin_store + (s.depthwise ? ct * ch : 0))];
          std::copy(src, src + tin_c, dst);
        }
      conv2d_bf16(win.data(), wt[ct].data(), epi[ct].data(), out.data(), int32_t(t.rows), int32_t(t.cols),
                  int32_t(in_cols), int32_t(tin_c), int32_t(ch), int32_t(K), int32_t(s.stride), s.depthwise ? 1 : 0);
      for (int64_t r = 0; r < t.rows && r0 + r < Ho; ++r)
        for (int64_t c = 0; c < t.cols && c0 + c < Wo; ++c)
          for (int64_t j = 0; j < ch && ct * ch + j < s.c_out; ++j)
            yp[((ct * ch + j) * Ho + r0 + r) * Wo + c0 + c] = aie::to_float(out[size_t((r * t.cols + c) * ch + j)]);
    }
  });
  if (stats) {
    ++stats->convs;
    stats->invocations += conv_invocations(s, t, columns);
    stats->designs.push_back(d.name);
  }
  return y;
}

}  // namespace xdna::npu

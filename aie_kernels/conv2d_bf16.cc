// conv2d_bf16: one core's output tile of a 2-D convolution (design family conv, see
// design_families_conv.cpp). npu (needs hardware and the toolchain, unverified here).
// Numerical reference: tests/npu/test_conv_sim.cpp's direct loop. 16-lane f32 accumulators, one lane per
// output channel; each lane adds its products in (ky, kx, ci) order with one f32 rounding per
// mac; then bias (f32 add), the activation (negative slope, then clamp to [lo, hi]) and the store
// to bf16 rounding to nearest even (as the other bf16 kernels: aie2p.md).
// Called by the emitted design.py as conv2d_bf16(in, w, epi, out, rows, cols, in_cols, c_in, ch,
// kernel, stride, depthwise):
//   in   [in_rows][in_cols][c_in] bf16, the tile's input window with its zero border already in
//        (in_rows = (rows - 1) stride + kernel, c_in = ch when depthwise);
//   w    dense: [kernel][kernel][c_in][ch] bf16; depthwise: [kernel][kernel][ch] bf16;
//   epi  f32: bias[ch], then lo, hi, negative slope;
//   out  [rows][cols][ch] bf16.  ch must be a multiple of 16.
#include "xdna_aie_api.h"

namespace {
constexpr int kConvLanes = 16;

// The 16 channels' epilogue from the accumulator to bf16.
void conv_store(const xk::accum<xk::accfloat, kConvLanes>& acc, const float* bias, const float* act,
                xk::bf16* out, xk::Rounding rnd) {
  for (int l = 0; l < kConvLanes; ++l) {
    float v = float(xk::lane(acc, l)) + bias[l];
    if (v < 0.0f) v = v * act[2];
    v = v < act[0] ? act[0] : v > act[1] ? act[1] : v;
    out[l] = xk::to_bf16(v, rnd);
  }
}

// The input value x broadcast to every lane (a vector from 16 copies: the same on both builds).
xk::vector<xk::bf16, kConvLanes> splat(xk::bf16 x) {
  xk::bf16 v[kConvLanes];
  for (int l = 0; l < kConvLanes; ++l) v[l] = x;
  return xk::load_v<kConvLanes>(v);
}
}  // namespace

extern "C" void conv2d_bf16(const xk::bf16* in, const xk::bf16* w, const float* epi, xk::bf16* out, int32_t rows,
                            int32_t cols, int32_t in_cols, int32_t c_in, int32_t ch, int32_t kernel, int32_t stride,
                            int32_t depthwise) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  const float* act = epi + ch;
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t c = 0; c < cols; ++c)
      for (int32_t co = 0; co < ch; co += kConvLanes) {
        xk::accum<xk::accfloat, kConvLanes> acc = xk::zeros<xk::accfloat, kConvLanes>();
        for (int32_t ky = 0; ky < kernel; ++ky)
          for (int32_t kx = 0; kx < kernel; ++kx) {
            const xk::bf16* px = in + (int64_t(r * stride + ky) * in_cols + (c * stride + kx)) * c_in;
            if (depthwise) {
              acc = xk::mac(acc, xk::load_v<kConvLanes>(px + co), xk::load_v<kConvLanes>(w + (ky * kernel + kx) * ch + co));
            } else {
              const xk::bf16* wk = w + int64_t(ky * kernel + kx) * c_in * ch + co;
              for (int32_t ci = 0; ci < c_in; ++ci)
                acc = xk::mac(acc, splat(px[ci]), xk::load_v<kConvLanes>(wk + int64_t(ci) * ch));
            }
          }
        conv_store(acc, epi + co, act, out + (int64_t(r) * cols + c) * ch + co, scope.mode);
      }
}

// The weights object as the conv designs send it (one core DMA channel carries both): the bf16
// weights [kernel][kernel][c_in][ch] (depthwise: [kernel][kernel][ch]), then the f32 epilogue
// constants (design_families_conv.cpp). The emitted design.py calls this entry point.
extern "C" void conv2d_bf16_packed(const xk::bf16* in, const xk::bf16* w_epi, xk::bf16* out, int32_t rows,
                                   int32_t cols, int32_t in_cols, int32_t c_in, int32_t ch, int32_t kernel,
                                   int32_t stride, int32_t depthwise) {
  const int64_t n_w = int64_t(kernel) * kernel * ch * (depthwise ? 1 : c_in);  // a multiple of 16: f32-aligned
  conv2d_bf16(in, w_epi, reinterpret_cast<const float*>(w_epi + n_w), out, rows, cols, in_cols, c_in, ch, kernel,
              stride, depthwise);
}

#include "pipeline/upscale.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "pipeline/conv_npu_sim.h"

namespace xdna {

namespace {

// Pixels [x0, x1) x [y0, y1) of `img` as [3, h, w] f32 in the model's input range.
Tensor crop_to_tensor(const Image& img, int x0, int y0, int x1, int y1, float input_max) {
  const int w = x1 - x0, h = y1 - y0;
  Tensor t = Tensor::empty({3, h, w});
  float* d = t.data<float>();
  const float k = input_max / 255.0f;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) d[(int64_t{c} * h + y) * w + x] = img.at(x0 + x, y0 + y, c) * k;
  return t;
}

uint8_t to_byte(float v, float k) {
  const float s = v * k;
  if (!(s > 0.0f)) return 0;  // NaN too
  if (s >= 255.0f) return 255;
  return static_cast<uint8_t>(std::nearbyint(s));  // round half to even, as tf.round
}

// The network on one tile, at the options' precision.
Tensor run_net(const Upscaler& up, const UpscaleOptions& opts, const Tensor& x) {
  if (opts.precision == "f32") return run_upscaler(up.net, x);
  if (opts.precision == "bf16") return run_upscaler_npu_sim(up.net, x, opts.sim_run);
  throw std::invalid_argument("upscale: precision '" + opts.precision + "' (f32 or bf16)");
}

}  // namespace

int auto_tile_size(const UpscalerNet& net, const UpscaleOptions& opts) {
  if (opts.tile > 0) return opts.tile;
  const double pixels = opts.memory_budget / std::max(net.peak_bytes_per_pixel, 1.0);
  const int side = static_cast<int>(std::sqrt(pixels)) - 2 * net.receptive_radius;
  return std::clamp(side, 32, 1024);
}

Tensor upscale_raw(const Upscaler& up, const Image& img) { return upscale_raw(up, img, UpscaleOptions{}); }

Tensor upscale_raw(const Upscaler& up, const Image& img, const UpscaleOptions& opts) {
  return run_net(up, opts, crop_to_tensor(img, 0, 0, img.width, img.height, up.input_max));
}

Image upscale_image(const Upscaler& up, const Image& img, const UpscaleOptions& opts) {
  if (img.width <= 0 || img.height <= 0 || img.rgb.size() != size_t(img.width) * img.height * 3)
    throw std::invalid_argument("upscale: the image is empty or inconsistent");
  const int s = up.net.scale, m = up.net.receptive_radius, tile = auto_tile_size(up.net, opts);
  if (double(img.width) * img.height * s * s > double(1 << 30))
    throw std::invalid_argument("upscale: a " + std::to_string(img.width) + "x" + std::to_string(img.height) + " image at x" +
                                std::to_string(s) + " would exceed 2^30 output pixels");
  Image out;
  out.width = img.width * s;
  out.height = img.height * s;
  out.rgb.resize(size_t(out.width) * out.height * 3);
  const float k = 255.0f / up.output_max;
  for (int ty = 0; ty < img.height; ty += tile)
    for (int tx = 0; tx < img.width; tx += tile) {
      const int x1 = std::min(tx + tile, img.width), y1 = std::min(ty + tile, img.height);
      const int cx0 = std::max(tx - m, 0), cy0 = std::max(ty - m, 0);
      const int cx1 = std::min(x1 + m, img.width), cy1 = std::min(y1 + m, img.height);
      const Tensor y = run_net(up, opts, crop_to_tensor(img, cx0, cy0, cx1, cy1, up.input_max));
      const int64_t H = y.dim(1), W = y.dim(2);
      if (H != int64_t{cy1 - cy0} * s || W != int64_t{cx1 - cx0} * s)
        throw std::runtime_error(up.net.origin + ": the output is " + shape_str(y.shape()) + " for a " +
                                 std::to_string(cx1 - cx0) + "x" + std::to_string(cy1 - cy0) +
                                 " input, not " + std::to_string(s) + "x larger");
      const float* p = y.data<float>();
      for (int oy = (ty - cy0) * s; oy < (y1 - cy0) * s; ++oy)
        for (int ox = (tx - cx0) * s; ox < (x1 - cx0) * s; ++ox) {
          uint8_t* dst = &out.rgb[((size_t(cy0) * s + oy) * out.width + size_t(cx0) * s + ox) * 3];
          for (int c = 0; c < 3; ++c) dst[c] = to_byte(p[(c * H + oy) * W + ox], k);
        }
    }
  return out;
}

double psnr_rgb(const Image& a, const Image& b) {
  if (a.width != b.width || a.height != b.height || a.rgb.size() != b.rgb.size())
    throw std::invalid_argument("psnr: images of different sizes");
  double se = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) {
    const double d = double(a.rgb[i]) - double(b.rgb[i]);
    se += d * d;
  }
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(255.0 * 255.0 / (se / double(a.rgb.size())));
}

}  // namespace xdna

// The image decoders (JPEG, PNG, WebP: what `npu classify` and an image upload go through) on
// arbitrary bytes, then a resize, crop and normalise of whatever decodes. Must throw
// std::invalid_argument or return a consistent image, never crash, over-read or leak (the
// longjmp-based libjpeg/libpng error paths are the point). The libraries themselves are not
// instrumented; our code around them is.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "pipeline/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xdna::ImageLimits limits;
  limits.max_pixels = 1 << 20;  // keeps each run fast; the cap's own path is exercised too
  try {
    const xdna::Image img = xdna::decode_image(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", limits);
    if (img.width <= 0 || img.height <= 0 || img.rgb.size() != size_t(img.width) * img.height * 3 ||
        (!img.alpha.empty() && img.alpha.size() != size_t(img.width) * img.height)) {
      std::fprintf(stderr, "decode_image returned an inconsistent image\n");
      std::abort();
    }
    xdna::ImagePreprocessConfig cfg;
    cfg.processor = "BitImageProcessor";
    cfg.do_convert_rgb = true;
    cfg.resample = static_cast<xdna::Resample>(size % 4);
    cfg.shortest_edge = 9;
    cfg.do_center_crop = true;
    cfg.crop_width = cfg.crop_height = 8;
    const xdna::Tensor t = xdna::preprocess_image(img, cfg);
    if (t.numel() != 3 * 8 * 8) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

// Image frontend for the vision models: decode JPEG / PNG / WebP to 8-bit RGB, then resize, crop,
// rescale and normalise as a Hugging Face preprocessor_config.json says, into the [N, 3, H, W]
// f32 pixel tensor the vision encoders take.
//
// What is matched, and how closely (measured in tests/pipeline/test_image.cpp, see docs/vision.md):
// - decode_image gives what Pillow's Image.open(f).convert("RGB") gives: alpha dropped (not
//   composited), grayscale replicated, palettes expanded, 16-bit colour reduced to its high byte,
//   16-bit grayscale clipped at 255 (Pillow's I;16 -> L). EXIF orientation is NOT applied, as
//   transformers' image processors do not apply it (only transformers.image_utils.load_image does).
// - resize_image is Pillow's Image.resize (separable convolution, support widened by the
//   downscale factor, fixed-point coefficients) for BILINEAR, BICUBIC and LANCZOS; NEAREST too.
// - preprocess_image follows transformers' PIL-backend processors step by step.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace xdna {

// 8-bit RGB, row-major HWC. `alpha` (one byte per pixel) is kept when the file had transparency
// (an alpha channel or a PNG tRNS chunk) for processors that composite onto white; else empty.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
  std::vector<uint8_t> alpha;
  uint8_t at(int x, int y, int c) const { return rgb[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

enum class ImageFormat { Unknown, Jpeg, Png, Webp };
const char* image_format_name(ImageFormat f);
ImageFormat detect_image_format(std::string_view bytes);  // by magic bytes, never the name

struct ImageLimits {
  int64_t max_pixels = 64ll << 20;  // 64 megapixels: refuse bigger headers before allocating
};

// Throws std::invalid_argument "<name>: <format>: <problem>" for anything it cannot decode.
Image decode_image(std::string_view bytes, const std::string& name = "image", const ImageLimits& limits = {});
Image load_image(const std::string& path, const ImageLimits& limits = {});

// Pillow's numbering (PIL.Image.Resampling), as preprocessor_config.json stores it.
enum class Resample { Nearest = 0, Lanczos = 1, Bilinear = 2, Bicubic = 3 };

Image resize_image(const Image& img, int width, int height, Resample filter);
// transformers' center_crop: offsets floor((in - out) / 2); zero padding where the crop is larger.
Image center_crop(const Image& img, int width, int height);
// transformers' convert_to_rgb: composite onto opaque white where there is alpha (Pillow's
// alpha_composite rounding); returns the image unchanged (alpha cleared) otherwise.
Image composite_on_white(const Image& img);

// The fields of a preprocessor_config.json that the supported processors read.
struct ImagePreprocessConfig {
  std::string processor = "ViTImageProcessor";  // image_processor_type
  bool do_convert_rgb = false;
  bool do_resize = true;
  Resample resample = Resample::Bilinear;
  int size_height = 224, size_width = 224;  // size {height, width} (when shortest_edge == 0)
  int shortest_edge = 0;                    // size {shortest_edge}: keep the aspect ratio
  double crop_pct = 0;                      // ConvNext: resize to shortest_edge / crop_pct, crop
  bool do_center_crop = false;
  int crop_height = 224, crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool rescale_offset = false;  // EfficientNet: x * factor - 1
  bool do_normalize = true;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  bool include_top = false;  // EfficientNet: divide by std a second time
};

// Parses preprocessor_config.json text; the processor's own defaults fill what it leaves out.
// Throws std::invalid_argument on unsupported processors or values.
ImagePreprocessConfig parse_preprocessor_config(const std::string& json_text);
ImagePreprocessConfig load_preprocessor_config(const std::string& path);

// [1, 3, H, W] f32; the batch helper needs every image to end at the same size (it throws if not).
Tensor preprocess_image(const Image& img, const ImagePreprocessConfig& cfg);
Tensor preprocess_images(const std::vector<Image>& imgs, const ImagePreprocessConfig& cfg);

}  // namespace xdna

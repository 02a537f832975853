// Resize / crop / rescale / normalise as transformers' PIL-backend image processors do.
//
// The resampler reimplements what Pillow's Image.resize does for 8-bit images (written from its
// documented behaviour, not its code): each axis is a 1-D convolution whose filter is stretched by
// the downscale factor (antialiasing), so an output sample at centre c = (i + 0.5) * in / out reads
// the inputs within support * max(in / out, 1) of c; weights are normalised to sum 1, then turned
// into 22-bit fixed point and rounded, and each pass rounds and clamps back to uint8. Horizontal
// first, then vertical, as Pillow does — the uint8 intermediate is part of what is matched.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "pipeline/image.h"

namespace xdna {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // headroom for sums of 8-bit samples times weights

double filter_support(Resample f) {
  switch (f) {
    case Resample::Bilinear: return 1.0;
    case Resample::Bicubic: return 2.0;
    case Resample::Lanczos: return 3.0;
    default: return 0.0;
  }
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double filter_weight(Resample f, double x) {
  x = std::fabs(x);
  switch (f) {
    case Resample::Bilinear: return x < 1.0 ? 1.0 - x : 0.0;
    case Resample::Bicubic: {  // Keys cubic with a = -0.5
      const double a = -0.5;
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
      if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
      return 0.0;
    }
    case Resample::Lanczos: return x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
    default: return 0.0;
  }
}

// For each output index: the first input index and fixed-point weights of the inputs it reads.
struct Taps {
  int width = 0;  // weights per output (the widest window)
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // [out][width]
};

Taps make_taps(int in, int out, Resample f) {
  const double scale = static_cast<double>(in) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support(f) * filterscale;
  Taps t;
  t.width = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  t.weights.assign(static_cast<size_t>(out) * t.width, 0);
  std::vector<double> k(t.width);
  for (int i = 0; i < out; i++) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in);
    const int n = std::min(hi - lo, t.width);
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
      k[j] = filter_weight(f, (j + lo - center + 0.5) / filterscale);
      sum += k[j];
    }
    for (int j = 0; j < n; j++) {
      const double w = sum != 0.0 ? k[j] / sum : k[j];
      const double fixed = w * (1 << kPrecisionBits);
      t.weights[static_cast<size_t>(i) * t.width + j] = static_cast<int32_t>(fixed < 0 ? std::trunc(fixed - 0.5) : std::trunc(fixed + 0.5));
    }
    t.first[i] = lo;
    t.count[i] = std::max(n, 0);
  }
  return t;
}

uint8_t fixed_to_u8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;  // the rounding half was added up front
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

// One separable pass along x (horizontal) or y.
Image resample_axis(const Image& src, int out, Resample f, bool horizontal) {
  const int in = horizontal ? src.width : src.height;
  const Taps t = make_taps(in, out, f);
  Image dst;
  dst.width = horizontal ? out : src.width;
  dst.height = horizontal ? src.height : out;
  dst.rgb.resize(static_cast<size_t>(dst.width) * dst.height * 3);
  for (int y = 0; y < dst.height; y++)
    for (int x = 0; x < dst.width; x++) {
      const int o = horizontal ? x : y;
      const int32_t* w = t.weights.data() + static_cast<size_t>(o) * t.width;
      for (int c = 0; c < 3; c++) {
        int64_t acc = int64_t{1} << (kPrecisionBits - 1);
        for (int j = 0; j < t.count[o]; j++) {
          const int s = t.first[o] + j;
          acc += static_cast<int64_t>(w[j]) * (horizontal ? src.at(s, y, c) : src.at(x, s, c));
        }
        dst.rgb[(static_cast<size_t>(y) * dst.width + x) * 3 + c] = fixed_to_u8(acc);
      }
    }
  return dst;
}

Image resize_nearest(const Image& src, int width, int height) {
  Image dst;
  dst.width = width;
  dst.height = height;
  dst.rgb.resize(static_cast<size_t>(width) * height * 3);
  const double sx = static_cast<double>(src.width) / width, sy = static_cast<double>(src.height) / height;
  for (int y = 0; y < height; y++) {
    const int iy = std::min(static_cast<int>((y + 0.5) * sy), src.height - 1);
    for (int x = 0; x < width; x++) {
      const int ix = std::min(static_cast<int>((x + 0.5) * sx), src.width - 1);
      for (int c = 0; c < 3; c++) dst.rgb[(static_cast<size_t>(y) * width + x) * 3 + c] = src.at(ix, iy, c);
    }
  }
  return dst;
}

}  // namespace

Image resize_image(const Image& img, int width, int height, Resample filter) {
  if (width <= 0 || height <= 0 || img.width <= 0 || img.height <= 0)
    throw std::invalid_argument("resize_image: cannot resize " + std::to_string(img.width) + "x" +
                                std::to_string(img.height) + " to " + std::to_string(width) + "x" +
                                std::to_string(height));
  Image out;
  if (width == img.width && height == img.height) {  // Pillow returns a copy, unfiltered
    out = img;
  } else if (filter == Resample::Nearest) {
    out = resize_nearest(img, width, height);
  } else {
    out = img;
    out.alpha.clear();
    if (width != img.width) out = resample_axis(out, width, filter, true);
    if (height != img.height) out = resample_axis(out, height, filter, false);
  }
  out.alpha.clear();
  return out;
}

Image center_crop(const Image& img, int width, int height) {
  if (width <= 0 || height <= 0) throw std::invalid_argument("center_crop: bad crop size");
  // floor division, also when the crop is larger than the image (zero padding then)
  auto floor_half = [](int d) { return d >= 0 ? d / 2 : -((-d + 1) / 2); };
  const int left = floor_half(img.width - width), top = floor_half(img.height - height);
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.assign(static_cast<size_t>(width) * height * 3, 0);
  for (int y = 0; y < height; y++) {
    const int sy = y + top;
    if (sy < 0 || sy >= img.height) continue;
    for (int x = 0; x < width; x++) {
      const int sx = x + left;
      if (sx < 0 || sx >= img.width) continue;
      for (int c = 0; c < 3; c++) out.rgb[(static_cast<size_t>(y) * width + x) * 3 + c] = img.at(sx, sy, c);
    }
  }
  return out;
}

Image composite_on_white(const Image& img) {
  Image out = img;
  out.alpha.clear();
  if (img.alpha.empty()) return out;
  for (size_t i = 0; i < img.alpha.size(); i++) {
    // Pillow's alpha_composite over opaque white in its 7-bit fixed point: the source weighs
    // a * 128, white weighs (255 - a) * 128, and x / 255 is taken as ((x >> 8) + x) >> 8.
    const uint32_t a = img.alpha[i];
    for (int c = 0; c < 3; c++) {
      const uint32_t t = img.rgb[i * 3 + c] * (a * 128) + 255u * ((255u - a) * 128) + (0x80u << 7);
      out.rgb[i * 3 + c] = static_cast<uint8_t>((((t >> 8) + t) >> 8) >> 7);
    }
  }
  return out;
}

// ---- preprocessor_config.json ----

namespace {

std::string base_processor_name(std::string name) {
  for (const char* suffix : {"Fast", "Pil"})
    if (name.size() > std::strlen(suffix) && name.ends_with(suffix)) name.resize(name.size() - std::strlen(suffix));
  return name;
}

void read_triple(const nlohmann::json& j, const char* key, float (&out)[3]) {
  if (!j.contains(key) || j[key].is_null()) return;
  const auto& v = j[key];
  if (v.is_number()) {
    out[0] = out[1] = out[2] = v.get<float>();
  } else if (v.is_array() && v.size() == 3) {
    for (int i = 0; i < 3; i++) out[i] = v[i].get<float>();
  } else {
    throw std::invalid_argument(std::string("preprocessor_config: ") + key + " must be a number or 3 numbers");
  }
}

}  // namespace

ImagePreprocessConfig parse_preprocessor_config(const std::string& json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("preprocessor_config: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("preprocessor_config: not a JSON object");
  ImagePreprocessConfig c;
  if (!j.contains("image_processor_type") || !j["image_processor_type"].is_string())
    throw std::invalid_argument("preprocessor_config: no image_processor_type");
  c.processor = base_processor_name(j["image_processor_type"].get<std::string>());
  bool default_to_square = true;
  // Each processor's class defaults (transformers 5.24, PIL backend).
  if (c.processor == "ViTImageProcessor") {
  } else if (c.processor == "BitImageProcessor") {  // DINOv2 uses it
    c.resample = Resample::Bicubic;
    c.shortest_edge = 224;
    c.do_center_crop = true;
    c.do_convert_rgb = true;
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f}, std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    std::copy(mean, mean + 3, c.mean);
    std::copy(std, std + 3, c.std);
    default_to_square = false;
  } else if (c.processor == "ConvNextImageProcessor") {  // ResNet uses it
    c.resample = Resample::Bicubic;
    c.shortest_edge = 384;
    c.crop_pct = 224.0 / 256.0;
    default_to_square = false;
  } else if (c.processor == "EfficientNetImageProcessor") {
    c.resample = Resample::Bicubic;
    c.size_height = c.size_width = 346;
    c.crop_height = c.crop_width = 289;
    c.include_top = true;
  } else {
    throw std::invalid_argument("preprocessor_config: unsupported image_processor_type " + c.processor +
                                " (supported: ViT, Bit, ConvNext, EfficientNet image processors)");
  }
  auto flag = [&](const char* key, bool& out) {
    if (j.contains(key) && j[key].is_boolean()) out = j[key].get<bool>();
  };
  flag("do_convert_rgb", c.do_convert_rgb);
  flag("do_resize", c.do_resize);
  flag("do_center_crop", c.do_center_crop);
  flag("do_rescale", c.do_rescale);
  flag("do_normalize", c.do_normalize);
  flag("rescale_offset", c.rescale_offset);
  flag("include_top", c.include_top);
  if (j.contains("resample") && j["resample"].is_number_integer()) {
    const int r = j["resample"].get<int>();
    if (r < 0 || r > 3) throw std::invalid_argument("preprocessor_config: unsupported resample " + std::to_string(r) + " (0-3 supported)");
    c.resample = static_cast<Resample>(r);
  }
  if (j.contains("rescale_factor") && j["rescale_factor"].is_number()) c.rescale_factor = j["rescale_factor"].get<double>();
  if (j.contains("crop_pct") && j["crop_pct"].is_number()) c.crop_pct = j["crop_pct"].get<double>();
  read_triple(j, "image_mean", c.mean);
  read_triple(j, "image_std", c.std);
  auto positive = [](const nlohmann::json& v, const char* what) {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > 65536)
      throw std::invalid_argument(std::string("preprocessor_config: ") + what + " must be a positive integer");
    return v.get<int>();
  };
  if (j.contains("size") && !j["size"].is_null()) {
    const auto& s = j["size"];
    if (s.is_number()) {  // an old config's plain int: square or shortest edge, per the processor
      if (default_to_square) c.size_height = c.size_width = positive(s, "size"), c.shortest_edge = 0;
      else c.shortest_edge = positive(s, "size");
    } else if (s.is_object() && s.contains("shortest_edge")) {
      if (s.contains("longest_edge")) throw std::invalid_argument("preprocessor_config: size.longest_edge is not supported");
      c.shortest_edge = positive(s["shortest_edge"], "size.shortest_edge");
    } else if (s.is_object() && s.contains("height") && s.contains("width")) {
      c.size_height = positive(s["height"], "size.height");
      c.size_width = positive(s["width"], "size.width");
      c.shortest_edge = 0;
    } else {
      throw std::invalid_argument("preprocessor_config: size must be {height, width} or {shortest_edge}");
    }
  }
  if (c.processor == "ConvNextImageProcessor" && c.do_resize && c.shortest_edge == 0)
    throw std::invalid_argument("preprocessor_config: ConvNext needs size.shortest_edge");
  if (j.contains("crop_size") && !j["crop_size"].is_null()) {
    const auto& s = j["crop_size"];
    if (s.is_number()) {
      c.crop_height = c.crop_width = positive(s, "crop_size");
    } else if (s.is_object() && s.contains("height") && s.contains("width")) {
      c.crop_height = positive(s["height"], "crop_size.height");
      c.crop_width = positive(s["width"], "crop_size.width");
    } else {
      throw std::invalid_argument("preprocessor_config: crop_size must be {height, width}");
    }
  }
  if (c.crop_pct < 0 || (c.processor == "ConvNextImageProcessor" && !(c.crop_pct > 0)))
    throw std::invalid_argument("preprocessor_config: crop_pct must be positive");
  for (float s : c.std)
    if (s == 0.0f) throw std::invalid_argument("preprocessor_config: image_std has a zero");
  return c;
}

ImagePreprocessConfig load_preprocessor_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument(path + ": cannot open preprocessor config");
  try {
    return parse_preprocessor_config(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

// ---- the pipeline ----

namespace {

// transformers' get_resize_output_image_size(default_to_square=False): the short side becomes
// `edge`, the long side int(edge * long / short).
void shortest_edge_size(int w, int h, int edge, int& out_w, int& out_h) {
  const bool wide = w > h;  // ties keep width as the short side, as transformers does
  const int shorter = wide ? h : w, longer = wide ? w : h;
  const int new_long = static_cast<int>(static_cast<double>(edge) * longer / shorter);
  out_w = wide ? new_long : edge;
  out_h = wide ? edge : new_long;
}

}  // namespace

Tensor preprocess_image(const Image& input, const ImagePreprocessConfig& c) {
  Image img = c.do_convert_rgb ? composite_on_white(input) : input;
  img.alpha.clear();
  if (c.do_resize) {
    int w = c.size_width, h = c.size_height;
    if (c.processor == "ConvNextImageProcessor") {
      if (c.shortest_edge < 384) {  // resize to shortest_edge / crop_pct, then crop the centre square
        shortest_edge_size(img.width, img.height, static_cast<int>(c.shortest_edge / c.crop_pct), w, h);
        img = center_crop(resize_image(img, w, h, c.resample), c.shortest_edge, c.shortest_edge);
      } else {  // warped to a square at 384 and above
        img = resize_image(img, c.shortest_edge, c.shortest_edge, c.resample);
      }
    } else {
      if (c.shortest_edge > 0) shortest_edge_size(img.width, img.height, c.shortest_edge, w, h);
      img = resize_image(img, w, h, c.resample);
    }
  }
  if (c.do_center_crop) img = center_crop(img, c.crop_width, c.crop_height);

  Tensor t = Tensor::empty({1, 3, img.height, img.width});
  float* out = t.data<float>();
  const size_t plane = static_cast<size_t>(img.width) * img.height;
  for (int ch = 0; ch < 3; ch++)
    for (size_t i = 0; i < plane; i++) {
      // transformers rescales in float64 and stores float32, then normalises in float32.
      float v = img.rgb[i * 3 + ch];
      if (c.do_rescale) {
        v = static_cast<float>(static_cast<double>(img.rgb[i * 3 + ch]) * c.rescale_factor);
        if (c.rescale_offset) v -= 1.0f;
      }
      if (c.do_normalize) v = (v - c.mean[ch]) / c.std[ch];
      if (c.include_top) v = v / c.std[ch];
      out[ch * plane + i] = v;
    }
  return t;
}

Tensor preprocess_images(const std::vector<Image>& imgs, const ImagePreprocessConfig& c) {
  if (imgs.empty()) throw std::invalid_argument("preprocess_images: no images");
  std::vector<Tensor> each;
  for (const Image& img : imgs) each.push_back(preprocess_image(img, c));
  const Shape one = each[0].shape();
  Tensor batch = Tensor::empty({static_cast<int64_t>(imgs.size()), 3, one[2], one[3]});
  const int64_t n = each[0].numel();
  for (size_t i = 0; i < each.size(); i++) {
    if (each[i].shape() != one)
      throw std::invalid_argument("preprocess_images: image " + std::to_string(i) + " preprocesses to " +
                                  shape_str(each[i].shape()) + ", image 0 to " + shape_str(one) +
                                  " (a batch needs one size: set size {height, width} or a center crop)");
    std::copy(each[i].data<float>(), each[i].data<float>() + n, batch.data<float>() + i * n);
  }
  return batch;
}

}  // namespace xdna

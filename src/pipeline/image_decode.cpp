// Decoding JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp) to 8-bit RGB the way Pillow's
// Image.open(f).convert("RGB") does. libjpeg and libpng report fatal errors through a callback
// that must not return; ours records the message and longjmps back to the decode function, whose
// frame holds only objects constructed before setjmp, so no destructor is skipped.
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>

#include "pipeline/image.h"

namespace xdna {

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Png: return "PNG";
    case ImageFormat::Webp: return "WebP";
    default: return "unknown format";
  }
}

ImageFormat detect_image_format(std::string_view b) {
  if (b.size() >= 3 && b.compare(0, 3, "\xFF\xD8\xFF") == 0) return ImageFormat::Jpeg;
  if (b.size() >= 8 && b.compare(0, 8, "\x89PNG\r\n\x1A\n") == 0) return ImageFormat::Png;
  if (b.size() >= 12 && b.compare(0, 4, "RIFF") == 0 && b.compare(8, 4, "WEBP") == 0) return ImageFormat::Webp;
  return ImageFormat::Unknown;
}

namespace {

[[noreturn]] void fail(const std::string& name, ImageFormat f, const std::string& problem) {
  throw std::invalid_argument(name + ": " + image_format_name(f) + ": " + problem);
}

void check_size(const std::string& name, ImageFormat f, int64_t w, int64_t h, const ImageLimits& limits) {
  if (w <= 0 || h <= 0) fail(name, f, "image has no pixels (" + std::to_string(w) + "x" + std::to_string(h) + ")");
  if (w * h > limits.max_pixels)
    fail(name, f, std::to_string(w) + "x" + std::to_string(h) + " pixels exceeds the limit of " +
                      std::to_string(limits.max_pixels) + " pixels");
}

// ---- JPEG ----

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  cinfo->err->format_message(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings are ignored as Pillow ignores them, except running out of data: Pillow refuses a
// truncated JPEG ("image file is truncated") where libjpeg would pad it with gray.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message, "truncated: the data ends before the image does");
    longjmp(err->jump, 1);
  }
}

Image decode_jpeg(std::string_view bytes, const std::string& name, const ImageLimits& limits) {
  Image img;
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  err.message[0] = 0;
  std::string problem;  // set before any longjmp can land here, so never skipped
  if (setjmp(err.jump)) {
    problem = err.message;
    jpeg_destroy_decompress(&cinfo);
    fail(name, ImageFormat::Jpeg, problem);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    std::snprintf(err.message, sizeof err.message, "CMYK JPEG is not supported (convert it to RGB first)");
    longjmp(err.jump, 1);
  }
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > limits.max_pixels) {
    std::snprintf(err.message, sizeof err.message, "%ux%u pixels exceeds the limit of %lld pixels", cinfo.image_width,
                  cinfo.image_height, static_cast<long long>(limits.max_pixels));
    longjmp(err.jump, 1);
  }
  cinfo.out_color_space = JCS_RGB;  // grayscale is replicated, as Pillow's L -> RGB
  jpeg_start_decompress(&cinfo);
  img.width = static_cast<int>(cinfo.output_width);
  img.height = static_cast<int>(cinfo.output_height);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img.rgb.data() + static_cast<size_t>(cinfo.output_scanline) * img.width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return img;
}

// ---- PNG ----

struct PngReader {
  std::string_view bytes;
  size_t at = 0;
  char message[256] = {};
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->bytes.size() - r->at) png_error(png, "truncated: the data ends before the image does");
  std::memcpy(out, r->bytes.data() + r->at, n);
  r->at += n;
}

Image decode_png(std::string_view bytes, const std::string& name, const ImageLimits& limits) {
  Image img;
  PngReader reader{bytes};
  std::vector<uint8_t> raw;
  std::vector<png_bytep> rows;
  std::string problem;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_on_error, png_on_warning);
  if (!png) fail(name, ImageFormat::Png, "out of memory");
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    problem = info ? reader.message : "out of memory";
    png_destroy_read_struct(&png, &info, nullptr);
    fail(name, ImageFormat::Png, problem);
  }
  png_set_read_fn(png, &reader, png_read_bytes);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (static_cast<int64_t>(w) * h > limits.max_pixels) {
    std::snprintf(reader.message, sizeof reader.message, "%ux%u pixels exceeds the limit of %lld pixels", w, h,
                  static_cast<long long>(limits.max_pixels));
    png_longjmp(png, 1);
  }
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  const bool gray16 = depth == 16 && color == PNG_COLOR_TYPE_GRAY;
  png_set_palette_to_rgb(png);
  png_set_expand_gray_1_2_4_to_8(png);
  // Pillow opens 16-bit grayscale as I;16 and ignores its tRNS key when converting to RGB.
  if (!gray16 && png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  const int out_depth = png_get_bit_depth(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  raw.resize(row_bytes * h);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; y++) rows[y] = raw.data() + y * row_bytes;
  png_read_image(png, rows.data());
  png_destroy_read_struct(&png, &info, nullptr);

  img.width = static_cast<int>(w);
  img.height = static_cast<int>(h);
  const size_t n = static_cast<size_t>(w) * h;
  img.rgb.resize(n * 3);
  const bool has_alpha = channels == 2 || channels == 4;
  if (has_alpha) img.alpha.resize(n);
  const int bps = out_depth == 16 ? 2 : 1;
  for (size_t i = 0; i < n; i++) {
    const uint8_t* p = raw.data() + i * channels * bps;
    // Sample c as 8 bits: Pillow keeps the high byte of 16-bit colour, but clips 16-bit gray.
    auto sample = [&](int c) -> uint8_t {
      if (bps == 1) return p[c];
      if (gray16) {
        const unsigned v = (p[2 * c] << 8) | p[2 * c + 1];
        return static_cast<uint8_t>(v > 255 ? 255 : v);
      }
      return p[2 * c];
    };
    const int color_channels = channels >= 3 ? 3 : 1;
    for (int c = 0; c < 3; c++) img.rgb[i * 3 + c] = sample(color_channels == 3 ? c : 0);
    if (has_alpha) img.alpha[i] = sample(channels - 1);
  }
  return img;
}

// ---- WebP ----

Image decode_webp(std::string_view bytes, const std::string& name, const ImageLimits& limits) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(data, bytes.size(), &features) != VP8_STATUS_OK)
    fail(name, ImageFormat::Webp, "malformed or truncated header");
  if (features.has_animation) fail(name, ImageFormat::Webp, "animated WebP is not supported");
  check_size(name, ImageFormat::Webp, features.width, features.height, limits);
  Image img;
  img.width = features.width;
  img.height = features.height;
  const size_t n = static_cast<size_t>(img.width) * img.height;
  std::vector<uint8_t> rgba(n * 4);
  if (!WebPDecodeRGBAInto(data, bytes.size(), rgba.data(), rgba.size(), img.width * 4))
    fail(name, ImageFormat::Webp, "malformed or truncated image data");
  img.rgb.resize(n * 3);
  if (features.has_alpha) img.alpha.resize(n);
  for (size_t i = 0; i < n; i++) {
    for (int c = 0; c < 3; c++) img.rgb[i * 3 + c] = rgba[i * 4 + c];
    if (features.has_alpha) img.alpha[i] = rgba[i * 4 + 3];
  }
  return img;
}

}  // namespace

Image decode_image(std::string_view bytes, const std::string& name, const ImageLimits& limits) {
  if (bytes.empty()) throw std::invalid_argument(name + ": empty file, not an image");
  const ImageFormat f = detect_image_format(bytes);
  Image img;
  switch (f) {
    case ImageFormat::Jpeg: img = decode_jpeg(bytes, name, limits); break;
    case ImageFormat::Png: img = decode_png(bytes, name, limits); break;
    case ImageFormat::Webp: img = decode_webp(bytes, name, limits); break;
    default:
      throw std::invalid_argument(name + ": not a JPEG, PNG or WebP image (unrecognised magic bytes)");
  }
  check_size(name, f, img.width, img.height, limits);
  return img;
}

Image load_image(const std::string& path, const ImageLimits& limits) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument(path + ": cannot open image file");
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return decode_image(bytes, path, limits);
}

}  // namespace xdna

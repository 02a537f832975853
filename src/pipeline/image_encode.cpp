// PNG writing for `npu upscale`: 8-bit RGB, no interlace, default compression.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "pipeline/upscale.h"

namespace xdna {

namespace {

struct PngWriter {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriter() { png_destroy_write_struct(&png, &info); }
};

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

// libpng reports fatal errors through longjmp; this handler just records the message.
void on_error(png_structp png, png_const_charp msg) {
  auto* what = static_cast<std::string*>(png_get_error_ptr(png));
  if (what) *what = msg ? msg : "unknown libpng error";
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

}  // namespace

void encode_png(const Image& img, const std::string& path) {
  if (img.width <= 0 || img.height <= 0 || img.rgb.size() != size_t(img.width) * img.height * 3)
    throw std::runtime_error(path + ": cannot write an empty or inconsistent image");
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) throw std::runtime_error(path + ": cannot open for writing");
  std::string error;
  PngWriter w;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &error, on_error, on_warning);
  if (!w.png) throw std::runtime_error(path + ": libpng: out of memory");
  w.info = png_create_info_struct(w.png);
  if (!w.info) throw std::runtime_error(path + ": libpng: out of memory");
  // Nothing with a destructor is created between setjmp and the libpng calls below.
  if (setjmp(png_jmpbuf(w.png))) throw std::runtime_error(path + ": png: " + error);
  png_init_io(w.png, f.get());
  png_set_IHDR(w.png, w.info, static_cast<png_uint_32>(img.width), static_cast<png_uint_32>(img.height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(w.png, w.info);
  for (int y = 0; y < img.height; ++y)
    png_write_row(w.png, const_cast<png_bytep>(&img.rgb[size_t(y) * img.width * 3]));
  png_write_end(w.png, nullptr);
  if (std::fflush(f.get()) != 0) throw std::runtime_error(path + ": write error (disk full?)");
}

}  // namespace xdna

// What the super-resolution tests share: a synthetic test image and the pulled esrgan-slim models.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "models/model_store.h"
#include "pipeline/upscale.h"

namespace uptest {

// A w x h RGB image of smooth gradients plus uniform noise in [0, noise), so a network sees
// structure and not only noise (the same seed gives the same image).
inline xdna::Image gradient_image(int w, int h, unsigned seed, int noise) {
  xdna::Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(size_t(w) * h * 3);
  std::mt19937 rng(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        img.rgb[(size_t(y) * w + x) * 3 + c] =
            static_cast<uint8_t>((x * 255 / w + y * 128 / h + c * 60 + int(rng() % unsigned(noise))) % 256);
  return img;
}

// The pulled model directory, or "" (then the test skips): $XDNA_ESRGAN_SLIM_DIR or the store.
inline std::string esrgan_slim_dir() {
  if (const char* p = std::getenv("XDNA_ESRGAN_SLIM_DIR")) return p;
  const std::string d = xdna::ModelStore(xdna::default_store_dir()).model_dir("esrgan-slim");
  return std::filesystem::is_regular_file(d + "/x2/model.json") ? d : "";
}

}  // namespace uptest

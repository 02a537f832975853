// What the `npu upscale` CLI tests share: a temporary directory and a deterministic test image.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "pipeline/image.h"

namespace xdna::test {

// A fresh directory under the system temp dir, named `prefix` + pid; removed on destruction.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix)
      : path(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// A w x h RGB image of diagonal gradients (every channel differs).
inline xdna::Image gradient(int w, int h) {
  xdna::Image img;
  img.width = w;
  img.height = h;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.rgb.push_back(static_cast<uint8_t>((x * 7 + y * 13 + c * 50) % 256));
  return img;
}

}  // namespace xdna::test

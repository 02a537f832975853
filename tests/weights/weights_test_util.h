// Helpers for the weight-format tests: byte builders for safetensors and GGUF, an exact-size
// in-memory Buffer (so AddressSanitizer catches any read past the end), temp directories.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/buffer.h"

namespace wtest {

using Bytes = std::vector<uint8_t>;

// Exactly `bytes.size()` bytes on the heap (a copy), unlike HeapBuffer which rounds up.
class VecBuffer final : public xdna::Buffer {
 public:
  explicit VecBuffer(const Bytes& bytes)
      : v_(new std::byte[bytes.size() ? bytes.size() : 1]), n_(bytes.size()) {
    if (n_) std::memcpy(v_.get(), bytes.data(), n_);
  }
  std::byte* data() override { return v_.get(); }
  size_t size() const override { return n_; }

 private:
  std::unique_ptr<std::byte[]> v_;
  size_t n_;
};

inline std::shared_ptr<xdna::Buffer> buf(const Bytes& b) { return std::make_shared<VecBuffer>(b); }

template <typename T>
void put(Bytes& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}
inline void put_str(Bytes& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
inline void put_floats(Bytes& b, const std::vector<float>& v) {
  for (float x : v) put(b, x);
}

// A safetensors file from a header and a data region.
inline Bytes safetensors_bytes(const nlohmann::json& header, const Bytes& data) {
  const std::string h = header.dump();
  Bytes b;
  put<uint64_t>(b, h.size());
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

inline void write_file(const std::filesystem::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}
inline void write_text(const std::filesystem::path& p, const std::string& s) {
  write_file(p, Bytes(s.begin(), s.end()));
}

// A fresh directory named after the running test, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           ("xdna_weights_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Runs fn and returns the exception message; fails the test if nothing was thrown.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace wtest

// Shared by the fuzz targets: the input as a Buffer of exactly its size, so that ASan flags a
// read one byte past the end (HeapBuffer rounds its allocation up to 64 bytes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"

namespace xdna::fuzz {

class ExactBuffer final : public Buffer {
 public:
  ExactBuffer(const uint8_t* data, size_t size) : bytes_(new std::byte[size]), size_(size) {
    if (size) std::memcpy(bytes_.get(), data, size);
  }
  std::byte* data() override { return bytes_.get(); }
  size_t size() const override { return size_; }
  bool writable() const override { return false; }

 private:
  std::unique_ptr<std::byte[]> bytes_;
  size_t size_;
};

// Touches the first and last byte of a tensor view: a view past the end of the file is an ASan
// report, not a silent wrong answer.
inline uint32_t touch(const Tensor& t) {
  const int64_t n = t.nbytes();
  if (n <= 0) return 0;
  const auto* p = reinterpret_cast<const volatile uint8_t*>(t.raw());
  return p[0] + p[n - 1];
}

}  // namespace xdna::fuzz

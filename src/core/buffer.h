// Memory a tensor points into: heap memory the engine owns, or a read-only file mapping
// (weights are views into the mapped checkpoint, never copied).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace xdna {

class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual std::byte* data() = 0;
  virtual size_t size() const = 0;
  virtual bool writable() const { return true; }
};

// 64-byte aligned heap allocation (one cache line; the alignment AVX-512 loads prefer).
class HeapBuffer final : public Buffer {
 public:
  explicit HeapBuffer(size_t bytes);
  ~HeapBuffer() override;
  HeapBuffer(const HeapBuffer&) = delete;
  HeapBuffer& operator=(const HeapBuffer&) = delete;
  std::byte* data() override { return ptr_; }
  size_t size() const override { return size_; }

 private:
  std::byte* ptr_ = nullptr;
  size_t size_ = 0;
};

// A whole file mapped read-only. Throws std::runtime_error naming the path on failure.
class MappedFile final : public Buffer {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile() override;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::byte* data() override { return ptr_; }
  size_t size() const override { return size_; }
  bool writable() const override { return false; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::byte* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace xdna

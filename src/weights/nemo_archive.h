// Tar archives as NeMo writes .nemo files (Python's tarfile: ustar, GNU long names or pax headers;
// plain, or gzip as older NeMo releases wrote them), read without extracting.
//
// A plain archive is memory-mapped and its members are zero-copy slices of the mapping (the
// torch checkpoint inside a .nemo then yields views, as a loose file does); a gzip archive is
// inflated into memory once. Every header is checksummed and every member bounds-checked:
// anything malformed -> std::invalid_argument naming the archive, the member and what is wrong.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"

namespace xdna {

struct TarMember {
  std::string name;  // as stored, with a leading "./" removed
  uint64_t offset = 0;  // of its bytes in the (decompressed) archive
  uint64_t size = 0;
};

// A read-only window [offset, offset + size) of another buffer, keeping it alive.
class BufferSlice final : public Buffer {
 public:
  BufferSlice(std::shared_ptr<Buffer> parent, uint64_t offset, uint64_t size);
  std::byte* data() override { return parent_->data() + offset_; }
  size_t size() const override { return size_; }
  bool writable() const override { return false; }

 private:
  std::shared_ptr<Buffer> parent_;
  uint64_t offset_ = 0;
  size_t size_ = 0;
};

class TarArchive {
 public:
  explicit TarArchive(const std::string& path);
  // For tests, fuzzing and in-memory data: `name` is used in error messages.
  TarArchive(std::shared_ptr<Buffer> bytes, const std::string& name);

  const std::string& name() const { return name_; }
  bool gzipped() const { return gzipped_; }
  // Regular files only, in archive order (directories, links and pax records are skipped).
  const std::vector<TarMember>& members() const { return members_; }
  const TarMember* find(const std::string& member) const;  // exact name; nullptr if absent
  // The one member whose base name ends with `suffix` ("tokenizer.model" matches
  // "a1b2_tokenizer.model" in any folder); nullptr if none, std::invalid_argument if several.
  const TarMember* find_suffix(const std::string& suffix) const;
  std::string read(const TarMember& m) const;                 // a copy of its bytes
  std::shared_ptr<Buffer> slice(const TarMember& m) const;  // zero-copy

 private:
  void parse();
  std::string name_;
  std::shared_ptr<Buffer> bytes_;
  bool gzipped_ = false;
  std::vector<TarMember> members_;
};

// True when the file starts like a gzip stream or holds a ustar/GNU tar header.
bool looks_like_tar(const std::string& path);

}  // namespace xdna

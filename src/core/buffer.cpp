#include "core/buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace xdna {

namespace {

// Buffers from this size up are 2 MiB aligned and advised as transparent huge pages: a GEMV
// streams 64 MiB+ of weights, and with 4 KiB pages every page is a TLB miss (a costly nested
// page walk under a hypervisor). At most one partly used 2 MiB page is wasted per buffer.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = size_t{8} << 20;

void advise_huge(void* p, size_t bytes) {
  // Advice only: without THP (or with it disabled) the call fails and the pages stay small.
  ::madvise(p, bytes, MADV_HUGEPAGE);
}

}  // namespace

HeapBuffer::HeapBuffer(size_t bytes) : size_(bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  const size_t align = rounded >= kHugeFrom ? kHugePage : 64;
  if (align == kHugePage) rounded = (rounded + kHugePage - 1) / kHugePage * kHugePage;
  ptr_ = static_cast<std::byte*>(std::aligned_alloc(align, rounded));
  if (!ptr_) throw std::bad_alloc();
  if (align == kHugePage) advise_huge(ptr_, rounded);
}

HeapBuffer::~HeapBuffer() { std::free(ptr_); }

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw std::runtime_error(path + ": cannot mmap: " + std::strerror(e));
    }
    ptr_ = static_cast<std::byte*>(p);
    // Lets the kernel back the mapping with huge page-cache folios where the filesystem can.
    if (size_ >= kHugeFrom) advise_huge(p, size_);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (ptr_) ::munmap(ptr_, size_);
}

}  // namespace xdna

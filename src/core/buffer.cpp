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

HeapBuffer::HeapBuffer(size_t bytes) : size_(bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  ptr_ = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
  if (!ptr_) throw std::bad_alloc();
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
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (ptr_) ::munmap(ptr_, size_);
}

}  // namespace xdna

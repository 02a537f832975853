#include "core/sha256.h"

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>

#include "core/buffer.h"

namespace xdna {

std::string sha256_hex(const void* data, size_t n) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data, n, digest, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: EVP_Digest failed");
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

std::string sha256_file(const std::string& path) {
  MappedFile f(path);
  return sha256_hex(f.data(), f.size());
}

}  // namespace xdna

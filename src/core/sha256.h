// SHA-256 of files and byte ranges (OpenSSL libcrypto), as lowercase hex.
#pragma once
#include <cstddef>
#include <string>

namespace xdna {

std::string sha256_hex(const void* data, size_t n);
std::string sha256_file(const std::string& path);  // memory-maps the file

}  // namespace xdna

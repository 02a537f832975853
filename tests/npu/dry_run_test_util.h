// What the dry-run tests share: reading an ioctl record's bytes back as its uapi structure.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace xdna::npu::test {

// The structure `T` the bytes hold (zero-filled past their end).
template <typename T>
T as(const std::vector<uint8_t>& b) {
  T v{};
  std::memcpy(&v, b.data(), std::min(sizeof v, b.size()));
  return v;
}

}  // namespace xdna::npu::test

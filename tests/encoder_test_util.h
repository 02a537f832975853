// Helpers shared by the encoder and embedding tests (tests/models, tests/pipeline).
#pragma once
#include <cmath>
#include <cstddef>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

// Real-weight tests skip themselves under AddressSanitizer (too slow there).
// GCC defines __SANITIZE_ADDRESS__, Clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define XDNA_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XDNA_UNDER_ASAN 1
#endif
#endif
#ifndef XDNA_UNDER_ASAN
#define XDNA_UNDER_ASAN 0
#endif

namespace xdna::testing {

inline const std::string kEncoderFixtureDir = std::string(XDNA_FIXTURE_DIR) + "/encoders/";

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

inline double cosine(const float* a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace xdna::testing

// Scalar references for the GGML block GEMV kernels, written from the block layouts: x quantized
// the way the GEMV prepares it (int8 per 32 values), random Q6_K rows, and Σ w·x̂ of a Q6_K row in
// double. Shared by test_gemm_ggml_rows.cpp and test_gemm_q6k_repack.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "host/gemm.h"

namespace ggml_ref {

struct Quantized {  // x as the GEMV prepares it for the GGML kernels
  std::vector<int8_t> q;
  std::vector<float> scale4, xsum16;
  std::vector<int32_t> neg8sum4;
};

inline Quantized quantize(const std::vector<float>& x) {
  const int64_t K = static_cast<int64_t>(x.size());
  Quantized r;
  r.q.resize(K);
  r.scale4.resize(K / 4);
  r.xsum16.resize(K / 16);
  r.neg8sum4.resize(K / 4);
  for (int64_t b = 0; b < K; b += 32) {
    float amax = 0;
    for (int64_t k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float inv = amax > 0 ? 127 / amax : 0;
    for (int64_t k = b; k < b + 32; ++k) r.q[k] = static_cast<int8_t>(std::nearbyint(x[k] * inv));
    for (int64_t j = b / 4; j < b / 4 + 8; ++j) r.scale4[j] = amax / 127;
  }
  for (int64_t j = 0; j < K / 4; ++j) r.neg8sum4[j] = -8 * (r.q[4 * j] + r.q[4 * j + 1] + r.q[4 * j + 2] + r.q[4 * j + 3]);
  for (int64_t j = 0; j < K / 16; ++j) {
    int sum = 0;
    for (int64_t k = 16 * j; k < 16 * j + 16; ++k) sum += r.q[k];
    r.xsum16[j] = r.scale4[j * 4] * static_cast<float>(sum);
  }
  return r;
}

inline std::vector<float> random_x(int64_t K, std::mt19937& rng) {  // uniform in [-2, 2)
  std::uniform_real_distribution<float> uni(-2.f, 2.f);
  std::vector<float> x(K);
  for (auto& v : x) v = uni(rng);
  return x;
}

// The XRow the GGML kernels read: x and its quantization `q` (both must outlive it).
inline xdna::host::XRow ggml_x(const std::vector<float>& x, const Quantized& q) {
  xdna::host::XRow r{x.data(), nullptr, nullptr, static_cast<int64_t>(x.size())};
  r.q_s8 = q.q.data();
  r.q_scale4 = q.scale4.data();
  r.q_neg8sum4 = q.neg8sum4.data();
  r.q_xsum16 = q.xsum16.data();
  return r;
}

// Q6_K super-block of 256 (210 bytes): ql[128], qh[64], int8 scales[16], f16 d. In half h
// (values 128h ..), for l < 32: value l = low nibble of ql[64h + l] | (qh[32h + l] bits 0-1) << 4,
// l + 32: low nibble of ql[64h + 32 + l] | bits 2-3, l + 64: high nibble of ql[64h + l] | bits
// 4-5, l + 96: high nibble of ql[64h + 32 + l] | bits 6-7; w = d · scale[v / 16] · (q - 32).
inline int q6_k_quant(const uint8_t* p, int v) {
  const int h = v / 128, j = v % 128, l = j % 32, part = j / 32;
  const uint8_t ql = p[64 * h + l + (part & 1) * 32], qh = p[128 + 32 * h + l];
  const int low = part < 2 ? ql & 15 : ql >> 4;
  return low | (((qh >> (2 * part)) & 3) << 4);
}

// Σ w·x̂ for a Q6_K row in double; *mag gets Σ |d·scale|·s_x·64·127 (the f32 rounding scale).
inline double reference_q6_k(const uint8_t* row, const Quantized& x, int64_t K, double* mag) {
  double sum = 0;
  *mag = 0;
  for (int64_t sb = 0; sb < K / 256; ++sb) {
    const uint8_t* p = row + sb * 210;
    uint16_t h;
    std::memcpy(&h, p + 208, 2);
    const double d = xdna::host::half_to_float(h);
    for (int v = 0; v < 256; ++v) {
      const int64_t k = sb * 256 + v;
      const double sc = d * static_cast<int8_t>(p[192 + v / 16]);
      sum += sc * (q6_k_quant(p, v) - 32) * x.q[k] * x.scale4[k / 4];
      *mag += std::fabs(sc) * x.scale4[k / 4] * 64 * 127;
    }
  }
  return sum;
}

// N random Q6_K rows of K values (finite scales), packed as a matrix.
inline std::vector<uint8_t> random_q6_k(int64_t N, int64_t K, std::mt19937& rng) {
  std::vector<uint8_t> bytes(N * K / 256 * 210);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < N * K / 256; ++b) {  // d of about 2^-12 .. 2^-9, either sign
    const uint16_t d = static_cast<uint16_t>(((rng() & 1) << 15) | ((3 + rng() % 4) << 10) | (rng() & 1023));
    std::memcpy(bytes.data() + b * 210 + 208, &d, 2);
  }
  return bytes;
}

// N x K Q6_K rows of all-extreme values: every quant byte `fill` (q = 0 or 63 where the bits say
// so), sub-block scales alternating 127 and -128, d = 2^-8.
inline std::vector<uint8_t> extreme_q6_k(int64_t N, int64_t K, uint8_t fill) {
  std::vector<uint8_t> bytes(N * K / 256 * 210, fill);
  for (int64_t b = 0; b < N * K / 256; ++b) {
    uint8_t* p = bytes.data() + b * 210;
    for (int s = 0; s < 16; ++s) p[192 + s] = s % 2 ? 0x80 : 0x7f;  // -128, 127
    const uint16_t d = 0x1c00;  // 2^-8
    std::memcpy(p + 208, &d, 2);
  }
  return bytes;
}

}  // namespace ggml_ref

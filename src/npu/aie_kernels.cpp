#include "npu/aie_kernels.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "core/numeric.h"

namespace xdna::aie {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

void gemv_bf16(const bf16* W, const bf16* x, bf16* y, int64_t rows, int64_t K, Rounding rnd) {
  check(rows >= 0 && K > 0 && K % kGemvLanes == 0,
        "gemv_bf16: K = " + std::to_string(K) + " is not a positive multiple of 16");
  for (int64_t r = 0; r < rows; ++r) {
    accum<float, kGemvLanes> acc;
    for (int64_t k = 0; k < K; k += kGemvLanes)
      acc = mac(acc, load_v<kGemvLanes>(W + r * K + k), load_v<kGemvLanes>(x + k));
    y[r] = to_bf16(reduce_add(acc), rnd);
  }
}

void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int64_t rows, int64_t K, int shift,
               Rounding rnd) {
  check(rows >= 0 && K > 0 && K % kGemvLanesI8 == 0,
        "gemv_int8: K = " + std::to_string(K) + " is not a positive multiple of 32");
  check(shift >= 0 && shift < 32, "gemv_int8: shift " + std::to_string(shift) + " outside 0..31");
  for (int64_t r = 0; r < rows; ++r) {
    accum<int32_t, kGemvLanesI8> acc;
    for (int64_t k = 0; k < K; k += kGemvLanesI8)
      acc = mac(acc, load_v<kGemvLanesI8>(W + r * K + k), load_v<kGemvLanesI8>(x + k));
    y[r] = srs_int8(reduce_add(acc), shift, rnd);
  }
}

void gemm_bfp16(const uint8_t* A, const uint8_t* B, float* C, int64_t m, int64_t k, int64_t n) {
  check(m > 0 && k > 0 && n > 0 && m % 8 == 0 && k % 8 == 0 && n % 8 == 0,
        "gemm_bfp16: m, k, n = " + std::to_string(m) + ", " + std::to_string(k) + ", " +
            std::to_string(n) + " are not positive multiples of 8");
  const int64_t kb = k / 8, tile = 72;
  for (int64_t i = 0; i < m / 8; ++i)
    for (int64_t j = 0; j < n / 8; ++j) {
      mmul_bfp16_888 mm;
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) mm.c.lane[r * 8 + c] = C[(i * 8 + r) * n + j * 8 + c];
      for (int64_t b = 0; b < kb; ++b) mm.mac(A + (i * kb + b) * tile, B + (j * kb + b) * tile);
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) C[(i * 8 + r) * n + j * 8 + c] = mm.c.lane[r * 8 + c];
    }
}

void pack_bfp16_a(const float* A, int64_t m, int64_t k, uint8_t* out) {
  check(m % 8 == 0 && k % 8 == 0, "pack_bfp16_a: m and k must be multiples of 8");
  for (int64_t i = 0; i < m / 8; ++i)
    for (int64_t b = 0; b < k / 8; ++b)
      for (int r = 0; r < 8; ++r)
        bfp16_encode(A + (i * 8 + r) * k + b * 8, 8, out + ((i * (k / 8) + b) * 8 + r) * 9);
}

void pack_bfp16_b(const float* B, int64_t k, int64_t n, uint8_t* out) {
  check(k % 8 == 0 && n % 8 == 0, "pack_bfp16_b: k and n must be multiples of 8");
  float col[8];
  for (int64_t j = 0; j < n / 8; ++j)
    for (int64_t b = 0; b < k / 8; ++b)
      for (int c = 0; c < 8; ++c) {
        for (int t = 0; t < 8; ++t) col[t] = B[(b * 8 + t) * n + j * 8 + c];
        bfp16_encode(col, 8, out + ((j * (k / 8) + b) * 8 + c) * 9);
      }
}

}  // namespace xdna::aie

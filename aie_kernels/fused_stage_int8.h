// What the int8-weight fused stage kernels add to fused_stage.h (decode_layer_int8.cc,
// lm_head_int8.cc). npu (needs hardware and the toolchain, unverified here).
//
// A matrix slice of R rows x k int8 values travels as [R rows of k bytes][R f32 per-row weight
// scales, zero padded to a whole 32-byte block] (design_families_fused.cpp, Stages::wbytes; the
// host packs it so: src/npu/sim_exec_pack.cpp). Streams are taken in 32-byte blocks: 16 bf16 values
// (gammas) or 32 int8 values (rows; k % 32 == 0, so a block never straddles a row); a matrix's
// rows as runs of blocks (to the end of the object or of the rows), each row's piece of a run
// one mac_run.
// Numerics, as npu-sim's unfused int8 MatMul (docs/npu-sim.md) up to its output store: the
// vector a matrix multiplies is quantized per row (sx = max|x| / 127, q = x / sx rounded to
// nearest even, clamped to +-127: core/numeric.cpp quantize_int8), each row's products are
// summed exactly in 32-bit lanes (gemv_int8's 32-lane accumulator and pairwise reduction), and
// the row's value is float(sum) * sx * scale, stored to bf16 (round to nearest even). The
// unfused MatMul instead stores the sum through SRS to int8 with a shift chosen over the whole
// dispatch (a stand-in for calibration); a fused core sees only its own rows, so it keeps the
// exact sum (no 8-bit output step).
#pragma once
#include <cmath>

#include "fused_stage.h"

namespace xk_fused {

constexpr int32_t kBlockBytes = 32;  // one stream block
constexpr int32_t kI8Lanes = 32;
using Acc32 = xk::accum<xk::acc32, kI8Lanes>;

inline int64_t scale_bytes(int32_t rows) { return round_up(rows * 4, kBlockBytes); }
inline int64_t i8_matrix_bytes(int32_t rows, int32_t k) { return int64_t(rows) * k + scale_bytes(rows); }

// max |x[i]| over n values (0 for none; NaN never taken), compared as bit patterns: with the
// sign cleared they order as the values do (+0 to Inf), NaN patterns (above Inf's) are skipped.
// The same value as a float max, in integer code that vectorises.
inline float abs_max(const xk::bf16* x, int32_t n) {
  int16_t m = 0;
  for (int32_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, x + i, 2);
    const int16_t a = int16_t(b & 0x7FFF);
    const int16_t v = a > 0x7F80 ? int16_t(0) : a;
    m = m < v ? v : m;
  }
  const uint32_t f32 = uint32_t(uint16_t(m)) << 16;  // the bf16 as f32 bits
  float amax;
  std::memcpy(&amax, &f32, 4);
  return amax;
}

// v saturated to [-lim, lim] (lim a positive integer) and rounded to nearest even, as an int8;
// NaN gives 0. The values of std::nearbyint then the clamp, in code that vectorises (no float
// compares): the clamp compares magnitudes as bit patterns (ordered as the values), and the
// rounding adds and subtracts 1.5 * 2^23 (|v| <= lim < 2^22: the add lands where f32 steps are 1,
// rounding the fraction away to nearest even; the subtraction is exact). Clamping first changes
// nothing: lim is an integer.
inline int8_t round_saturate(float v, float lim) {
  uint32_t b, l;
  std::memcpy(&b, &v, 4);
  std::memcpy(&l, &lim, 4);
  uint32_t mag = b & 0x7FFFFFFFu;
  mag = mag > 0x7F800000u ? 0u : mag > l ? l : mag;  // NaN: 0
  b = (b & 0x80000000u) | mag;
  std::memcpy(&v, &b, 4);
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  return int8_t(int32_t((v + kShift) - kShift));
}

// x quantized per row into q; returns its scale (0 for an all-zero x: q all zero).
inline float quantize_row(const xk::bf16* x, int8_t* q, int32_t n) {
  const float sx = abs_max(x, n) / 127.0f;
  if (sx == 0.0f) {
    for (int32_t i = 0; i < n; ++i) q[i] = 0;
    return sx;
  }
  for (int32_t i = 0; i < n; ++i) q[i] = round_saturate(xk::to_float(x[i]) / sx, 127.0f);
  return sx;
}

// int4 KV cache rows (decode_layer_int8_kv4.cc): x quantized per row to signed int4,
// scale = max|x| / 7, q = x / scale rounded to nearest even and saturated to +-7 (symmetric as
// quantize_row's +-127: the row's max maps to +-7, so -8 would only ever come from float
// rounding), packed two a byte, value 2i in the low nibble of byte i (core/dtype.h DType::I4).
// Returns the scale (0 for an all-zero x: every value 0). n even.
inline float quantize_row_int4(const xk::bf16* x, uint8_t* packed, int32_t n) {
  const float sx = abs_max(x, n) / 7.0f;
  for (int32_t i = 0; i < n; i += 2) {
    uint8_t b = 0;
    for (int32_t j = 0; j < 2; ++j) {
      const int8_t v = sx == 0.0f ? int8_t(0) : round_saturate(xk::to_float(x[i + j]) / sx, 7.0f);
      b |= uint8_t((v & 0xF) << (4 * j));
    }
    packed[i / 2] = b;
  }
  return sx;
}

// n int4 values (n even) from `packed` (low nibble first) into q, sign-extended.
inline void unpack_int4(const uint8_t* packed, int8_t* q, int32_t n) {
  for (int32_t i = 0; i < n; i += 2) {
    const uint8_t b = packed[i / 2];
    q[i] = int8_t(int8_t(uint8_t(b << 4)) >> 4);
    q[i + 1] = int8_t(int8_t(b) >> 4);
  }
}

// The n bytes (whole 32-byte blocks) at byte e of a row-major [rows][k] int8 matrix, against q:
// each row's piece of the run through one mac_run (the accumulator in registers across it), a
// row's accumulator starting at column 0 and kept in `acc` between runs; each row the run ends
// has its exact sum in sums[row].
inline void gemv_i8_run(Acc32& acc, const uint8_t* blk, int64_t e, int64_t n, int32_t k, const int8_t* q,
                        int32_t* sums) {
  while (n > 0) {
    const int32_t col = int32_t(e % k);
    const int32_t len = n < k - col ? int32_t(n) : k - col;
    const Acc32 a = xk::mac_run(col == 0 ? xk::zeros<xk::acc32, kI8Lanes>() : acc,
                                reinterpret_cast<const int8_t*>(blk), q + col, len / kI8Lanes);
    acc = a;
    if (col + len == k) sums[e / k] = xk::reduce_add_pairwise(a);
    blk += len, e += len, n -= len;
  }
}
// The bytes of a run from byte e to the end of its segment at `end`, at most n.
inline int32_t run_bytes(int64_t e, int64_t end, int32_t n) { return end - e < n ? int32_t(end - e) : n; }

// One 32-byte block at byte e of a matrix's scales part: the scales of rows < rows kept.
inline void take_scales(float* scales, const uint8_t* blk, int64_t e, int32_t rows) {
  for (int32_t i = 0; i < kBlockBytes / 4; ++i)
    if (e / 4 + i < rows) std::memcpy(scales + e / 4 + i, blk + 4 * i, 4);
}

// A row's value from its exact sum: (sum * sx) * scale in f32, stored to bf16.
inline xk::bf16 dequant(int32_t sum, float sx, float scale, xk::Rounding rnd) {
  return xk::to_bf16(float(sum) * sx * scale, rnd);
}
inline void dequant_rows(xk::bf16* out, const int32_t* sums, const float* scales, int32_t rows, float sx,
                         xk::Rounding rnd) {
  for (int32_t r = 0; r < rows; ++r) out[r] = dequant(sums[r], sx, scales[r], rnd);
}

}  // namespace xk_fused

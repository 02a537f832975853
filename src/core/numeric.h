// Number-format conversions: f16, bf16, the AIE2P bfp16ebs8 block format, symmetric int8/int4,
// and the GGML block formats read from GGUF. Scalar reference code: it defines the numerics
// (SIMD kernels in src/host must match it). Layouts: docs/formats.md.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace xdna {

// bf16: the top 16 bits of an f32. Rounds to nearest, ties to even; NaN stays NaN (quiet),
// Inf stays Inf; values that round past the largest bf16 become Inf.
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t b);
// The AIE2P default when no rounding mode is set: round toward minus infinity.
uint16_t f32_to_bf16_floor(float x);

// IEEE binary16, round to nearest even, with subnormals, Inf and NaN.
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);

// bfp16ebs8: blocks of 8 values stored as 9 bytes: exponent byte E (the largest biased f32
// exponent in the block), then 8 two's-complement int8 mantissas m, value = m * 2^(E-127) / 64.
// Encoding truncates the two's-complement mantissa, i.e. floors (as mlir-aie's helper and the
// hardware do); f32 denormals flush to 0; a block holding NaN or Inf is stored with E = 255 and
// decodes to 8 NaNs. n must be a multiple of 8 (else std::invalid_argument).
constexpr int kBfp16BlockValues = 8;
constexpr int kBfp16BlockBytes = 9;
void bfp16_encode(const float* x, int64_t n, uint8_t* out);
void bfp16_decode(const uint8_t* in, int64_t n, float* out);

// Symmetric int8 over a [rows, cols] matrix: scale = max|x| / 127 per group of `group` values
// along a row (group == cols: per output channel). scales has rows * (cols / group) entries.
// q = x / scale rounded to nearest even; an all-zero group gets scale 0; NaN/Inf input throws.
void quantize_int8(const float* x, int64_t rows, int64_t cols, int64_t group, int8_t* q,
                   float* scales);
// Symmetric int4 in [-8, 7] with scale = max|x| / 7 per group; two values per byte, the even
// index in the low nibble. cols and group must be even.
void quantize_int4(const float* x, int64_t rows, int64_t cols, int64_t group, uint8_t* q,
                   float* scales);

// Dequantize n consecutive values of one row of any dtype into f32. For int8/int4, `scales`
// points at the row's scales and `group` is the group size; other dtypes ignore both.
void dequantize_row(DType t, const void* src, float* dst, int64_t n, const float* scales = nullptr,
                    int64_t group = 0);
// Encode n f32 values into a row of dtype t (plain types, bfp16; not int8/int4, which need scales,
// and not the GGML formats, which the engine reads but does not write).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace xdna

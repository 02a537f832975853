// GGML block formats as stored in GGUF files, decoded to f32. Written from the published GGML
// block layouts (byte maps in docs/formats.md); checked bit for bit against the `gguf` Python
// package's dequantizers by tests/core/test_numeric.cpp.
//
// All multi-byte fields are little-endian and blocks are packed (no alignment), so fields are
// read byte by byte: a tensor inside a mapped GGUF file can start at any offset.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace xdna::ggml {

// The engine dtypes that are GGML block formats (LLM weights as GGUF files hold them).
constexpr bool is_block_dtype(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K;
}

constexpr int kQ8_0Values = 32, kQ8_0Bytes = 34;   // f16 d; int8 q[32]
constexpr int kQ4_0Values = 32, kQ4_0Bytes = 18;   // f16 d; u8 q[16] (two 4-bit values each)
constexpr int kQ5_0Values = 32, kQ5_0Bytes = 22;   // f16 d; u8 qh[4] (5th bits); u8 qs[16] (low 4 bits)
constexpr int kSuperValues = 256;                  // K-quant super-block
constexpr int kQ4_KBytes = 144;  // f16 d, dmin; u8 scales[12]; u8 q[128]
constexpr int kQ5_KBytes = 176;  // f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 q[128]
constexpr int kQ6_KBytes = 210;  // u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d

// Each decodes `blocks` consecutive blocks into blocks * (values per block) floats.
void dequantize_q8_0(const uint8_t* src, int64_t blocks, float* dst);
void dequantize_q4_0(const uint8_t* src, int64_t blocks, float* dst);
void dequantize_q5_0(const uint8_t* src, int64_t blocks, float* dst);
void dequantize_q4_k(const uint8_t* src, int64_t blocks, float* dst);
void dequantize_q5_k(const uint8_t* src, int64_t blocks, float* dst);
void dequantize_q6_k(const uint8_t* src, int64_t blocks, float* dst);

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed scale bytes of a Q4_K / Q5_K
// super-block (SIMD kernels that work on the raw blocks need the same unpacking).
void k_scale_min(const uint8_t* scales12, int j, uint8_t* scale, uint8_t* min);

}  // namespace xdna::ggml

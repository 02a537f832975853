#include "core/ggml_blocks.h"

#include "core/numeric.h"

// Each value is (d * sub-block scale) * q - (dmin * sub-block min) in f32, GGML's and gguf-py's
// order. Every product here is exact in f32 (an f16 significand has 11 bits, a scale at most 7,
// a quant at most 6: 24 bits at most), so only the final subtraction rounds: results are identical
// in any evaluation order, with or without fused multiply-add, and SIMD versions can match
// these bit for bit.

namespace xdna::ggml {

namespace {
float load_f16(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }
}  // namespace

void dequantize_q8_0(const uint8_t* src, int64_t blocks, float* dst) {
  for (int64_t b = 0; b < blocks; ++b, src += kQ8_0Bytes, dst += kQ8_0Values) {
    const float d = load_f16(src);
    const uint8_t* q = src + 2;
    for (int i = 0; i < kQ8_0Values; ++i) dst[i] = float(int8_t(q[i])) * d;
  }
}

void dequantize_q4_0(const uint8_t* src, int64_t blocks, float* dst) {
  // Byte i holds value i (low nibble) and value i + 16 (high nibble), each stored plus 8.
  for (int64_t b = 0; b < blocks; ++b, src += kQ4_0Bytes, dst += kQ4_0Values) {
    const float d = load_f16(src);
    const uint8_t* q = src + 2;
    for (int i = 0; i < 16; ++i) {
      dst[i] = float((q[i] & 0x0F) - 8) * d;
      dst[i + 16] = float((q[i] >> 4) - 8) * d;
    }
  }
}

void dequantize_q5_0(const uint8_t* src, int64_t blocks, float* dst) {
  // As Q4_0 (value i in the low nibble of byte i, value i + 16 in the high one), plus a fifth bit
  // per value: bit i of the little-endian u32 qh belongs to value i; stored plus 16.
  for (int64_t b = 0; b < blocks; ++b, src += kQ5_0Bytes, dst += kQ5_0Values) {
    const float d = load_f16(src);
    const uint32_t qh = uint32_t(src[2]) | uint32_t(src[3]) << 8 | uint32_t(src[4]) << 16 | uint32_t(src[5]) << 24;
    const uint8_t* q = src + 6;
    for (int i = 0; i < 16; ++i) {
      dst[i] = float(int((q[i] & 0x0F) | ((qh >> i) & 1) << 4) - 16) * d;
      dst[i + 16] = float(int((q[i] >> 4) | ((qh >> (i + 16)) & 1) << 4) - 16) * d;
    }
  }
}

void k_scale_min(const uint8_t* s, int j, uint8_t* scale, uint8_t* min) {
  // Bytes 0-3: scales 0-3 (low 6 bits) + top 2 bits of scales 4-7; bytes 4-7: mins 0-3 + top
  // 2 bits of mins 4-7; bytes 8-11: low 4 bits of scale 4-7 (low nibble) and min 4-7 (high).
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = uint8_t((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *min = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

void dequantize_q4_k(const uint8_t* src, int64_t blocks, float* dst) {
  // 8 sub-blocks of 32. Each 32-byte run of q holds two sub-blocks: low nibbles the first,
  // high nibbles the second.
  for (int64_t b = 0; b < blocks; ++b, src += kQ4_KBytes) {
    const float d = load_f16(src), dmin = load_f16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int pair = 0; pair < 4; ++pair, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      k_scale_min(scales, 2 * pair, &sc0, &m0);
      k_scale_min(scales, 2 * pair + 1, &sc1, &m1);
      const float d0 = d * float(sc0), min0 = dmin * float(m0);
      const float d1 = d * float(sc1), min1 = dmin * float(m1);
      for (int i = 0; i < 32; ++i) *dst++ = d0 * float(q[i] & 0x0F) - min0;
      for (int i = 0; i < 32; ++i) *dst++ = d1 * float(q[i] >> 4) - min1;
    }
  }
}

void dequantize_q5_k(const uint8_t* src, int64_t blocks, float* dst) {
  // As Q4_K, plus a fifth bit per value: bit s of qh[i] belongs to value i of sub-block s.
  for (int64_t b = 0; b < blocks; ++b, src += kQ5_KBytes) {
    const float d = load_f16(src), dmin = load_f16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* q = src + 48;
    for (int pair = 0; pair < 4; ++pair, q += 32) {
      const int s0 = 2 * pair, s1 = 2 * pair + 1;
      uint8_t sc0, m0, sc1, m1;
      k_scale_min(scales, s0, &sc0, &m0);
      k_scale_min(scales, s1, &sc1, &m1);
      const float d0 = d * float(sc0), min0 = dmin * float(m0);
      const float d1 = d * float(sc1), min1 = dmin * float(m1);
      for (int i = 0; i < 32; ++i)
        *dst++ = d0 * float((q[i] & 0x0F) | (((qh[i] >> s0) & 1) << 4)) - min0;
      for (int i = 0; i < 32; ++i)
        *dst++ = d1 * float((q[i] >> 4) | (((qh[i] >> s1) & 1) << 4)) - min1;
    }
  }
}

void dequantize_q6_k(const uint8_t* src, int64_t blocks, float* dst) {
  // Two halves of 128 values. In a half, value i + 32k (k = 0..3, i < 32) takes its low 4 bits
  // from ql[i + 32 (k & 1)] (low nibble for k < 2, high for k >= 2) and its top 2 bits from
  // qh[i] bits 2k..2k+1; it is stored plus 32. 16 int8 scales, one per 16 values.
  for (int64_t b = 0; b < blocks; ++b, src += kQ6_KBytes) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_f16(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int i = 0; i < 32; ++i) {
        const int s = i / 16;
        const int q0 = ((ql[i] & 0x0F) | (((qh[i] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[i + 32] & 0x0F) | (((qh[i] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)) - 32;
        dst[i] = d * float(sc[s]) * float(q0);
        dst[i + 32] = d * float(sc[s + 2]) * float(q1);
        dst[i + 64] = d * float(sc[s + 4]) * float(q2);
        dst[i + 96] = d * float(sc[s + 6]) * float(q3);
      }
    }
  }
}

}  // namespace xdna::ggml

// Portable kernels: the fallback for CPUs without AVX2, and the numerics the SIMD paths match.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/cpu.h"
#include "core/numeric.h"
#include "host/gemm.h"

namespace xdna::host {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {  // zero or subnormal: man · 2^-24
    f = std::ldexp(static_cast<float>(man), -24);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man << 13))
                         : (sign | ((exp + 112) << 23) | (man << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16_rne(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

const float* bfp16_scale_table() {
  static const auto table = [] {
    static float t[256];
    for (int e = 0; e < 256; ++e) t[e] = std::ldexp(1.0f, e - 133);
    return t;
  }();
  return table;
}

namespace {

inline int int4_at(const uint8_t* w, int64_t k) {
  const int nib = (w[k >> 1] >> ((k & 1) * 4)) & 0xf;
  return (nib ^ 8) - 8;
}

void sgemm_scalar(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                  int64_t nr, bool accumulate) {
  constexpr int MR = 4, NR = 4;
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += a[k * MR + i] * b[k * NR + j];
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.f) + acc[i][j];
}

float dot_f32(const float* w, const XRow& x) {
  float s = 0;
  for (int64_t k = 0; k < x.k; ++k) s += w[k] * x.x[k];
  return s;
}

float dot_f16(const uint16_t* w, const XRow& x) {
  float s = 0;
  for (int64_t k = 0; k < x.k; ++k) s += half_to_float(w[k]) * x.x[k];
  return s;
}

float dot_bf16(const uint16_t* w, const XRow& x) {
  float s = 0;
  for (int64_t k = 0; k < x.k; ++k) s += bf16_bits_to_float(w[k]) * x.x[k];
  return s;
}

float dot_i8(const int8_t* w, const float* scales, int64_t group, const XRow& x) {
  float s = 0;
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    float gs = 0;
    for (int64_t k = g0; k < g0 + group; ++k) gs += static_cast<float>(w[k]) * x.x[k];
    s += gs * scales[g0 / group];
  }
  return s;
}

float dot_i4(const uint8_t* w, const float* scales, int64_t group, const XRow& x) {
  float s = 0;
  for (int64_t g0 = 0; g0 < x.k; g0 += group) {
    float gs = 0;
    for (int64_t k = g0; k < g0 + group; ++k) gs += static_cast<float>(int4_at(w, k)) * x.x[k];
    s += gs * scales[g0 / group];
  }
  return s;
}

float dot_bfp16(const uint8_t* w, const XRow& x) {
  const float* scale = bfp16_scale_table();
  float s = 0;
  for (int64_t b = 0; b < x.k / 8; ++b) {
    const uint8_t* blk = w + b * 9;
    float bs = 0;
    for (int i = 0; i < 8; ++i) bs += static_cast<float>(static_cast<int8_t>(blk[1 + i])) * x.x[b * 8 + i];
    s += bs * scale[blk[0]];
  }
  return s;
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

void pack_panel(const float* const* src, int64_t nr, int64_t NR, int64_t kc, float* dst) {
  for (int64_t k = 0; k < kc; ++k) {
    for (int64_t c = 0; c < nr; ++c) dst[k * NR + c] = src[c][k];
    for (int64_t c = nr; c < NR; ++c) dst[k * NR + c] = 0.f;
  }
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16_rne(src[i]);
}

}  // namespace

const IsaKernels& scalar_kernels() {
  static const IsaKernels k = {"scalar", 4, 4, sgemm_scalar, 0, 0, nullptr, dot_f32, dot_f16,
                               dot_bf16, dot_i8, dot_i4, dot_bfp16, nullptr, nullptr, f16_to_f32, bf16_to_f32,
                               pack_panel, f32_to_bf16};
  return k;
}

const IsaKernels& active_kernels() {
  switch (active_isa()) {
    case Isa::Avx512:
      if (has_avx512_bf16()) return avx512_kernels();
      {
        static const IsaKernels no_bf16 = [] {
          IsaKernels k = avx512_kernels();
          k.bf16_mr = k.bf16_nr = 0;
          k.bf16gemm = nullptr;
          return k;
        }();
        return no_bf16;
      }
    case Isa::Avx2: return avx2_kernels();
    case Isa::Scalar: break;
  }
  return scalar_kernels();
}

void dequant_range(const IsaKernels& kern, const WeightRows& w, int64_t n, int64_t k0,
                   int64_t len, float* out) {
  const uint8_t* row = w.row(n);
  switch (w.dtype) {
    case DType::F32: std::memcpy(out, row + k0 * 4, len * 4); return;
    case DType::F16: kern.f16_to_f32(reinterpret_cast<const uint16_t*>(row) + k0, out, len); return;
    case DType::BF16: kern.bf16_to_f32(reinterpret_cast<const uint16_t*>(row) + k0, out, len); return;
    case DType::I8: {
      const int8_t* q = reinterpret_cast<const int8_t*>(row);
      const float* sc = w.row_scales(n);
      for (int64_t k = k0; k < k0 + len; ++k) out[k - k0] = static_cast<float>(q[k]) * sc[k / w.group];
      return;
    }
    case DType::I4: {
      const float* sc = w.row_scales(n);
      for (int64_t k = k0; k < k0 + len; ++k)
        out[k - k0] = static_cast<float>(int4_at(row, k)) * sc[k / w.group];
      return;
    }
    case DType::BFP16: {
      const float* scale = bfp16_scale_table();
      for (int64_t k = k0; k < k0 + len; ++k) {
        const uint8_t* blk = row + (k / 8) * 9;
        out[k - k0] = static_cast<float>(static_cast<int8_t>(blk[1 + k % 8])) * scale[blk[0]];
      }
      return;
    }
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      // GGML blocks: the reference decoder (k0 is block-aligned: GEMM K blocks are multiples of 256).
      dequantize_row(w.dtype, row + dtype_bytes(w.dtype, k0), out, len);
      return;
    case DType::I32: break;
  }
  throw std::invalid_argument("matmul: no kernel for weight dtype " + std::string(dtype_name(w.dtype)));
}

}  // namespace xdna::host

// Shared between conv.cpp and its per-ISA kernels (conv_avx2.cpp, conv_avx512.cpp): the patch
// packing and the epilogue are compiled once per instruction set (conv_kernels_impl.h), so that
// their copies and clamps use the ISA's full vector width. Not part of the public API.
#pragma once
#include <cstdint>

namespace xdna::host {

// The geometry one group's patch packing needs.
struct PatchGeom {
  const float* x;  // the group's first input plane
  int64_t cin, H, W, Kh, Kw, Wo;
  int64_t stride[2], padding[2], dilation[2];
};

// The epilogue on output rows: y[o, p0 : p0 + n] = clamp(scale (y + bias[o]) + residual, lo, hi).
struct EpilogueRows {
  const float* bias;      // [Cout] or nullptr
  const float* residual;  // like y, or nullptr
  float scale, lo, hi;
  int64_t P;  // y's row length (positions)
};

// One instruction set's versions (conv_kernels_impl.h).
struct ConvKernels {
  void (*pack_patches)(const PatchGeom& g, int64_t p0, int64_t n, int64_t NR, float* dst);
  // rows o .. o + rows of y, positions p0 .. p0 + n
  void (*epilogue)(const EpilogueRows& ep, float* y, int64_t o, int64_t rows, int64_t p0, int64_t n);
};
const ConvKernels& conv_kernels_generic();
const ConvKernels& conv_kernels_avx2();
const ConvKernels& conv_kernels_avx512();

}  // namespace xdna::host

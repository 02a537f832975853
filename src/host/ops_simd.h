// Row kernels of the host ops, one set per instruction set (ops_avx512.cpp, ops_avx2.cpp; the
// portable versions live in ops.cpp). ops.cpp picks a set at run time from xdna::active_isa().
// All match the portable loops to ~1 ulp: same exp_approx / erf_approx algorithms, in vectors.
#pragma once
#include <cstdint>

namespace xdna::host {

struct RowKernels {
  void (*gelu)(const float* x, float* y, int64_t n);
  void (*gelu_tanh)(const float* x, float* y, int64_t n);
  void (*silu)(const float* x, float* y, int64_t n);
  void (*softmax_row)(float* x, int64_t d);  // in place; an all -inf row becomes zeros
  void (*layer_norm_row)(const float* x, const float* w, const float* b, float* y, int64_t d,
                         float eps);  // b may be null
  void (*rms_norm_row)(const float* x, const float* w, float* y, int64_t d, float eps,
                       float offset);
};

extern const RowKernels kRowKernelsAvx512;
extern const RowKernels kRowKernelsAvx2;

}  // namespace xdna::host

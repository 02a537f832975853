// Matrix multiply on the host: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]).
// w is laid out [out, in] as checkpoints store it, in any weight dtype: f32, f16, bf16,
// int8 / int4 with scales, bfp16, or the GGML block formats. x and y are f32, contiguous.
// M == 1 takes the GEMV path (bandwidth-bound: streams w once); M > 1 the blocked GEMM path.
#pragma once
#include "core/tensor.h"

namespace xdna::host {

void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
Tensor matmul(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr);

}  // namespace xdna::host

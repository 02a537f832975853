// Matrix multiply on the host: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]).
// w is laid out [out, in] as checkpoints store it, in any weight dtype: f32, f16, bf16,
// int8 / int4 with scales, bfp16, or the GGML block formats. x and y are f32, contiguous.
// M == 1 takes the GEMV path (bandwidth-bound: streams w once); M > 1 the blocked GEMM path.
#pragma once
#include <memory>

#include "core/tensor.h"

namespace xdna::host {

void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
Tensor matmul(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr);

// Packs constant (read-only, mapped) weights w [out, in] for the GEMM now and keeps the panels
// while the handle lives, past the packed-weight cache's size bound: a model larger than the
// bound holds its own packs this way instead of re-packing per call. nullptr for weights that are
// never cached (writable buffers).
std::shared_ptr<void> pin_packed_weights(const Tensor& w);

}  // namespace xdna::host

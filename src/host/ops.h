// Host implementations of the elementwise, normalisation, activation, position and shape ops
// (see docs/ops.md for the op set). Activations are f32; inputs may be strided views (they are
// packed first); small parameter tensors (norm weights, biases, embedding tables) may be any
// dtype. Results are new packed tensors except where a function says it returns a view.
// Wrong shapes throw std::invalid_argument naming the op and the shapes.
#pragma once
#include <span>

#include "core/op.h"
#include "core/tensor.h"

namespace xdna::host {

// An f32 packed copy (or the tensor itself when it already is f32 and packed).
Tensor to_f32(const Tensor& t);

// Elementwise a + b / a * b. b has a's shape or a suffix of it ([D] against [T, D]) and is
// repeated over a's leading dimensions.
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);

// Over the last dimension D; w and b are [D]. rms_norm computes x / rms(x) * (offset + w):
// offset 0 for Llama-style weights, 1 for Gemma's (1 + w) form.
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps);
Tensor rms_norm(const Tensor& x, const Tensor& w, float eps, float offset = 0.0f);

Tensor gelu(const Tensor& x);       // 0.5 x (1 + erf(x / sqrt 2))
Tensor gelu_tanh(const Tensor& x);  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
Tensor silu(const Tensor& x);       // x * sigmoid(x)
Tensor relu(const Tensor& x);

// Softmax over the last dimension, stable for large values. A row that is -inf everywhere
// (fully masked) gives zeros rather than NaN.
Tensor softmax(const Tensor& x);
// The same, in place on `n` rows of `d` packed floats (attention uses it on its score rows).
void softmax_rows(float* x, int64_t n, int64_t d);

// Rotary position embedding on x [T, H, D]: row t sits at position `position + t`. The first
// rope_dims (0 = all D, must be even) values of each head are rotated, the rest pass through.
// Frequency of pair i: theta^(-2i / rope_dims). Layout picks which values form a pair.
Tensor rope(const Tensor& x, int64_t position, float theta, int64_t rope_dims, RopeLayout layout);

// Rows of `table` [V, D] (any dtype, packed rows) picked by `ids` (i32, any shape) -> ids.shape
// + [D], f32. Out-of-range ids throw.
Tensor embedding(const Tensor& table, const Tensor& ids);

// Shape ops. axis may be negative. slice / transpose return views; reshape returns a view of
// packed input and a packed copy otherwise; concat copies.
Tensor concat(std::span<const Tensor> xs, int64_t axis);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor reshape(const Tensor& x, const Shape& shape);

}  // namespace xdna::host

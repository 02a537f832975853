// The op set: every model lowers into these, and every backend implements some of them.
// Terms (op, graph, backend, placement) are defined in docs/architecture.md.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/tensor.h"

namespace xdna {

enum class OpKind : uint8_t {
  MatMul,        // y = x · wᵀ (+ bias); w is [out, in] as checkpoints store it, any weight dtype
  Add,           // elementwise, with broadcasting of the second input over leading dims
  Mul,
  Scale,         // y = x * attrs.scale
  LayerNorm,     // inputs: x, weight, [bias]
  RMSNorm,       // inputs: x, weight; attrs.rms_offset = 1 for Gemma's (1 + w) form
  Gelu,          // erf form
  GeluTanh,      // tanh approximation
  Silu,
  Relu,
  Softmax,       // over the last dimension
  Rope,          // x [T, H, D], [inv_freq [rope_dims / 2]]; attrs.rope_*; positions from attrs.position
  Attention,     // q [T, Hq, D], k/v [S, Hkv, D]; GQA when Hq > Hkv; causal or not; window
  Conv1d,        // x [Cin, L], w [Cout, Cin/groups, K], [bias]
  Conv2d,        // x [Cin, H, W], w [Cout, Cin/groups, Kh, Kw], [bias]
  PixelShuffle,  // [C*r*r, H, W] -> [C, H*r, W*r]
  Pool2d,        // max or average
  Embedding,     // table [V, D], ids (i32) -> [N, D]
  Concat,
  Slice,
  Transpose,
  Reshape,
  KvWrite,       // cache [S, H, D], x [T, H, D]: rows [attrs.start, +T) of cache := x, in place;
                 // returns the view of cache rows [0, attrs.start + T) (see docs/ops.md)
  Count_,
};

std::string_view op_name(OpKind k);

enum class RopeLayout : uint8_t {
  Interleaved,  // pairs (x0,x1),(x2,x3)... : GPT-J / original RoFormer / GGML "normal"
  HalfSplit,    // pairs (x_i, x_{i+d/2}) : GPT-NeoX / Llama in Hugging Face / GGML "neox"
};

enum class PoolKind : uint8_t { Max, Avg, GlobalAvg };

// Attributes of one op instance. Plain data: each op reads only the fields its comment names.
struct OpAttrs {
  float eps = 1e-5f;
  float scale = 1.0f;
  float rms_offset = 0.0f;
  int64_t axis = -1;
  // attention
  bool causal = false;
  int64_t window = 0;     // sliding-window size in tokens (0 = unlimited); a band when not causal
  int64_t q_offset = 0;   // position of the first query row within the key sequence
  float softcap = 0.0f;   // logit soft-capping (0 = off)
  float attn_scale = 0.0f;  // logit scale (0 = 1/sqrt(head_dim))
  // rope
  RopeLayout rope_layout = RopeLayout::HalfSplit;
  float rope_theta = 10000.0f;
  int64_t rope_dims = 0;  // rotated dimensions per head (0 = all)
  int64_t position = 0;   // position of the first row
  // conv / pool
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
  PoolKind pool = PoolKind::Max;
  int64_t upscale = 1;
  // shape ops
  int64_t start = 0, end = 0;
  int64_t dim0 = 0, dim1 = 1;
  Shape shape;
};

}  // namespace xdna

#include "host/host_backend.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/attention.h"
#include "host/conv.h"
#include "host/kv_cache.h"
#include "host/matmul.h"
#include "host/ops.h"

namespace xdna {

bool HostBackend::supports(const Node& node, std::span<const Tensor>) const {
  return node.op < OpKind::Count_;
}

// Throws unless the node has between lo and hi inputs.
static void arity(const Node& n, std::span<const Tensor> in, size_t lo, size_t hi) {
  if (in.size() < lo || in.size() > hi)
    throw std::invalid_argument(std::string(op_name(n.op)) + " '" + n.name + "': takes " +
                                std::to_string(lo) + (hi > lo ? "-" + std::to_string(hi) : "") +
                                " inputs, got " + std::to_string(in.size()));
}

// x [..., K] · wᵀ -> [..., N]: leading dimensions are flattened into the rows of one GEMM.
static Tensor matmul_nd(const Tensor& x, const Tensor& w, const Tensor* bias) {
  if (x.ndim() < 1 || w.ndim() != 2 || x.dim(-1) != w.dim(1))
    throw std::invalid_argument("matmul: x " + shape_str(x.shape()) + " does not match w " +
                                shape_str(w.shape()));
  const int64_t K = x.dim(-1), M = K ? x.numel() / K : 0;
  Tensor y = host::matmul(x.contiguous().reshape({M, K}), w, bias);
  Shape out = x.shape();
  out.back() = w.dim(0);
  return y.reshape(out);
}

// Rope with explicit frequencies (llama3 / linear scaling, GGUF rope_freqs): pair i of each head
// turns by pos * inv_freq[i]; the first 2 * inv_freq.numel() values of each head are rotated.
static Tensor rope_with_freqs(const Tensor& x_in, const Tensor& freqs_in, int64_t position,
                              RopeLayout layout) {
  const Tensor freqs = host::to_f32(freqs_in);
  Tensor y = host::to_f32(x_in);
  if (y.buffer() == x_in.buffer()) y = y.clone();  // never rotate the caller's tensor in place
  const int64_t half = freqs.numel();
  if (y.ndim() != 3 || freqs.ndim() != 1 || 2 * half > y.dim(2) || position < 0)
    throw std::invalid_argument("rope: expects x [T, H, D] and inv_freq [<= D/2] at a position >= 0, got x " +
                                shape_str(y.shape()) + ", inv_freq " + shape_str(freqs.shape()));
  const int64_t T = y.dim(0), H = y.dim(1), D = y.dim(2);
  const float* f = freqs.data<float>();
  std::vector<float> c(half), s(half);
  for (int64_t t = 0; t < T; ++t) {
    const float pos = float(position + t);  // f32 angles, as transformers computes them
    for (int64_t i = 0; i < half; ++i) {
      c[i] = std::cos(pos * f[i]);
      s[i] = std::sin(pos * f[i]);
    }
    for (int64_t h = 0; h < H; ++h) {
      float* v = y.data<float>() + (t * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = layout == RopeLayout::HalfSplit ? i : 2 * i;
        const int64_t i1 = layout == RopeLayout::HalfSplit ? i + half : 2 * i + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = a * c[i] - b * s[i];
        v[i1] = b * c[i] + a * s[i];
      }
    }
  }
  return y;
}

// Writes x [T, H, D] into rows [start, start + T) of cache [S, H, D] (f32, f16 or bf16: x is
// rounded to the cache's type; writable, any strides with rows of D packed) and returns the view
// of rows [0, start + T): the KV cache grows inside the graph, no copy of the prefix per step.
static Tensor kv_write(const Tensor& cache, const Tensor& x_in, int64_t start) {
  const Tensor x = host::to_f32(x_in);
  const DType ct = cache.dtype();
  if (cache.ndim() != 3 || x.ndim() != 3 || (ct != DType::F32 && ct != DType::F16 && ct != DType::BF16) ||
      cache.strides()[2] != 1 || !cache.writable() || x.dim(1) != cache.dim(1) || x.dim(2) != cache.dim(2) ||
      start < 0 || start + x.dim(0) > cache.dim(0))
    throw std::invalid_argument("kv_write: cannot write x " + shape_str(x.shape()) + " at row " +
                                std::to_string(start) + " of cache " + shape_str(cache.shape()) + " " +
                                std::string(dtype_name(ct)) +
                                " (needs a writable f32, f16 or bf16 cache with packed rows and room)");
  // One D-row per (position, head), at the cache's strides (a KvCache is head-major).
  const int64_t H = x.dim(1), D = x.dim(2), esize = dtype_bytes(ct, 1);
  const int64_t pos = cache.strides()[0], head = cache.strides()[1];
  for (int64_t t = 0; t < x.dim(0); ++t)
    for (int64_t h = 0; h < H; ++h)
      host::kv_store(x.data<float>() + (t * H + h) * D, ct, cache.raw() + ((start + t) * pos + h * head) * esize, D);
  return cache.slice(0, 0, start + x.dim(0));
}

Tensor HostBackend::compute(const Node& n, std::span<const Tensor> in) {
  const OpAttrs& a = n.attrs;
  const auto opt = [&](size_t i) { return in.size() > i ? &in[i] : nullptr; };
  switch (n.op) {
    case OpKind::MatMul:
      arity(n, in, 2, 3);
      return matmul_nd(in[0], in[1], opt(2));
    case OpKind::Add:
      arity(n, in, 2, 2);
      return host::add(in[0], in[1]);
    case OpKind::Mul:
      arity(n, in, 2, 2);
      return host::mul(in[0], in[1]);
    case OpKind::Scale:
      arity(n, in, 1, 1);
      return host::scale(in[0], a.scale);
    case OpKind::LayerNorm:
      arity(n, in, 2, 3);
      return host::layer_norm(in[0], in[1], opt(2), a.eps);
    case OpKind::RMSNorm:
      arity(n, in, 2, 2);
      return host::rms_norm(in[0], in[1], a.eps, a.rms_offset);
    case OpKind::Gelu:
      arity(n, in, 1, 1);
      return host::gelu(in[0]);
    case OpKind::GeluTanh:
      arity(n, in, 1, 1);
      return host::gelu_tanh(in[0]);
    case OpKind::Silu:
      arity(n, in, 1, 1);
      return host::silu(in[0]);
    case OpKind::Relu:
      arity(n, in, 1, 1);
      return host::relu(in[0]);
    case OpKind::Softmax:
      arity(n, in, 1, 1);
      if (a.axis != -1 && a.axis != in[0].ndim() - 1)
        throw std::invalid_argument("softmax '" + n.name + "': only the last axis is supported");
      return host::softmax(in[0]);
    case OpKind::Rope:
      arity(n, in, 1, 2);
      if (in.size() == 2) return rope_with_freqs(in[0], in[1], a.position, a.rope_layout);
      return host::rope(in[0], a.position, a.rope_theta, a.rope_dims, a.rope_layout);
    case OpKind::Attention: {
      arity(n, in, 3, 4);
      host::AttentionParams p;
      p.causal = a.causal;
      p.q_offset = a.q_offset;
      p.window = a.window;
      p.softcap = a.softcap;
      p.scale = a.attn_scale;
      return host::attention(in[0], in[1], in[2], p, opt(3));
    }
    case OpKind::Conv1d:
      arity(n, in, 2, 3);
      return host::conv1d(in[0], in[1], opt(2), a.stride[0], a.padding[0], a.dilation[0], a.groups);
    case OpKind::Conv2d: {
      arity(n, in, 2, 3);
      host::ConvParams p;
      for (int i = 0; i < 2; ++i) {
        p.stride[i] = a.stride[i];
        p.padding[i] = a.padding[i];
        p.dilation[i] = a.dilation[i];
      }
      p.groups = a.groups;
      return host::conv2d(in[0], in[1], opt(2), p);
    }
    case OpKind::PixelShuffle:
      arity(n, in, 1, 1);
      return host::pixel_shuffle(in[0], a.upscale);
    case OpKind::Pool2d:
      arity(n, in, 1, 1);
      return host::pool2d(in[0], a.pool, a.kernel, a.stride, a.padding);
    case OpKind::Embedding:
      arity(n, in, 2, 2);
      return host::embedding(in[0], in[1]);
    case OpKind::Concat:
      arity(n, in, 1, 1024);
      return host::concat(in, a.axis);
    case OpKind::Slice:
      arity(n, in, 1, 1);
      return host::slice(in[0], a.axis, a.start, a.end);
    case OpKind::Transpose:
      arity(n, in, 1, 1);
      return host::transpose(in[0], a.dim0, a.dim1);
    case OpKind::Reshape:
      arity(n, in, 1, 1);
      return host::reshape(in[0], a.shape);
    case OpKind::KvWrite:
      arity(n, in, 2, 2);
      return kv_write(in[0], in[1], a.start);
    case OpKind::Count_:
      break;
  }
  throw std::invalid_argument("host backend: unknown op kind " +
                              std::to_string(static_cast<int>(n.op)));
}

}  // namespace xdna

#include "host/host_backend.h"

#include <stdexcept>
#include <string>

#include "host/attention.h"
#include "host/conv.h"
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
      arity(n, in, 1, 1);
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
    case OpKind::Count_:
      break;
  }
  throw std::invalid_argument("host backend: unknown op kind " +
                              std::to_string(static_cast<int>(n.op)));
}

}  // namespace xdna

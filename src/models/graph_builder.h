// What the encoder and decoder lowerings share: weights enter an xdna::Graph as constant inputs,
// and a few helpers add the ops every forward pass uses. Each model adds its own (norms, ...).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/op.h"
#include "core/tensor.h"
#include "models/spec.h"  // Activation

namespace xdna {

// A 1-D i32 tensor holding v (token ids, positions).
Tensor i32_tensor(const std::vector<int32_t>& v);
// The op that computes a spec's activation.
OpKind activation_op(Activation a);

struct GraphBuilder {
  Graph g;
  ValueId constant(const std::string& name, const Tensor& t) { return g.input(name, t); }
  // x · wᵀ (+ b when b is defined).
  ValueId matmul(ValueId x, const Tensor& w, const Tensor& b, const std::string& name);
  // Elements [start, end) along `axis` (a view; the next op makes it contiguous).
  ValueId slice(ValueId x, int64_t axis, int64_t start, int64_t end, const std::string& name);
  ValueId reshape(ValueId x, Shape shape, const std::string& name);
};

}  // namespace xdna

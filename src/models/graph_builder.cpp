#include "models/graph_builder.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace xdna {

Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

OpKind activation_op(Activation a) {
  switch (a) {
    case Activation::Gelu: return OpKind::Gelu;
    case Activation::GeluTanh: return OpKind::GeluTanh;
    case Activation::Relu: return OpKind::Relu;
    case Activation::Silu: return OpKind::Silu;
  }
  throw std::logic_error("activation_op: unknown activation");
}

ValueId GraphBuilder::matmul(ValueId x, const Tensor& w, const Tensor& b, const std::string& name) {
  std::vector<ValueId> in{x, constant(name + ".w", w)};
  if (b.defined()) in.push_back(constant(name + ".b", b));
  return g.add(OpKind::MatMul, in, {}, name);
}

ValueId GraphBuilder::slice(ValueId x, int64_t axis, int64_t start, int64_t end, const std::string& name) {
  OpAttrs a;
  a.axis = axis;
  a.start = start;
  a.end = end;
  return g.add(OpKind::Slice, {x}, a, name);
}

ValueId GraphBuilder::reshape(ValueId x, Shape shape, const std::string& name) {
  OpAttrs a;
  a.shape = std::move(shape);
  return g.add(OpKind::Reshape, {x}, a, name);
}

}  // namespace xdna

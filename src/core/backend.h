// A backend is a small table of operations: a name, which ops it can run, and how to run one.
// The host backend runs every op; the NPU backends (npu-sim, npu) run what their designs cover,
// and the executor places everything else on the host and says so.
#pragma once
#include <span>
#include <string_view>

#include "core/op.h"
#include "core/tensor.h"

namespace xdna {

struct Node;

class Backend {
 public:
  virtual ~Backend() = default;
  // "host", "npu-sim (modelled)" or "npu": what run reports print.
  virtual std::string_view name() const = 0;
  virtual bool supports(const Node& node, std::span<const Tensor> inputs) const = 0;
  // Computes the node's output. Inputs are in the order the node lists them.
  virtual Tensor compute(const Node& node, std::span<const Tensor> inputs) = 0;
};

}  // namespace xdna

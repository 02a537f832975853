// The host backend: runs every op of the op set on the CPU (src/host kernels). It is the last
// backend of every executor, so whatever an NPU backend cannot run lands here.
#pragma once
#include "core/backend.h"
#include "core/graph.h"

namespace xdna {

class HostBackend final : public Backend {
 public:
  std::string_view name() const override { return "host"; }
  bool supports(const Node& node, std::span<const Tensor> inputs) const override;
  // Inputs and attributes per op are listed in docs/ops.md. Results may be views of the inputs
  // (slice, transpose, reshape); every op accepts strided inputs.
  Tensor compute(const Node& node, std::span<const Tensor> inputs) override;
};

}  // namespace xdna

// The NPU backend (AMD XDNA2 through the amdxdna driver). It has no designs yet, so it supports
// no op: an executor given [npu, host] runs everything on the host and reports each op as a
// fallback. Designs are added op by op in later work.
#pragma once
#include "core/backend.h"
#include "core/graph.h"

namespace xdna {

class NpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "npu"; }
  bool supports(const Node& node, std::span<const Tensor> inputs) const override;
  Tensor compute(const Node& node, std::span<const Tensor> inputs) override;
};

}  // namespace xdna

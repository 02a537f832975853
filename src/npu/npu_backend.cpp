#include "npu/npu_backend.h"

#include <stdexcept>
#include <string>

namespace xdna {

bool NpuBackend::supports(const Node&, std::span<const Tensor>) const { return false; }

Tensor NpuBackend::compute(const Node& node, std::span<const Tensor>) {
  throw std::logic_error("npu backend has no design for " + std::string(op_name(node.op)) +
                         " ('" + node.name + "')");
}

}  // namespace xdna

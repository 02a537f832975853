#include "core/op.h"

#include <array>

namespace xdna {

std::string_view op_name(OpKind k) {
  static constexpr std::array<std::string_view, static_cast<size_t>(OpKind::Count_)> names = {
      "matmul", "add",      "mul",       "scale",         "layer_norm", "rms_norm",
      "gelu",   "gelu_tanh", "silu",     "relu",          "softmax",    "rope",
      "attention", "conv1d", "conv2d",   "pixel_shuffle", "pool2d",     "embedding",
      "concat", "slice",    "transpose", "reshape", "kv_write"};
  return names.at(static_cast<size_t>(k));
}

}  // namespace xdna

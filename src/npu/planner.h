// The planner: places a graph's nodes as npu-sim would, without computing anything. It infers
// every value's shape from the graph's inputs and constants, asks the design cache for each
// node (the same decision NpuSimBackend::supports makes), and prices the NPU invocations with
// the cost model. Every time it reports is modelled (kModelledLabel).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/graph.h"
#include "npu/sim_backend.h"

namespace xdna::npu {

struct PlannedOp {
  std::string node;
  OpKind op;
  Shape out_shape;
  bool on_npu = false;
  std::string design;  // design name when on the NPU
  std::string reason;  // host fallback reason
  double modelled_us = 0;  // design time of this invocation (no dispatch / reconfiguration)
};

struct Plan {
  std::vector<PlannedOp> ops;
  CostReport cost;
  XclbinPolicy policy = XclbinPolicy::Single;
  int npu_ops() const;
  int host_ops() const;
  std::string text() const;  // a table, one line per op, then the modelled totals
  nlohmann::json to_json() const;
};

// Output shape and dtype of a node from its inputs' (throws naming the node when it cannot).
ValueInfo infer_output(const Node& node, std::span<const ValueInfo> inputs);

Plan plan_graph(const Graph& g, XclbinPolicy policy = XclbinPolicy::Single);

}  // namespace xdna::npu

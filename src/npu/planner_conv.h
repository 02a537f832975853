// Conv-model plans: places a conv classifier's or upscaler's layers (in execution order) on the
// conv designs (design_families.h, "Conv designs") without computing anything, and prices one
// image with the cost model. Every time it reports is modelled (kModelledLabel).
//
// Dispatches: consecutive NPU convs share one instruction stream; an op that stays on the host
// between two of them ends the dispatch (its input has to come back to the host first).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "npu/design_families.h"
#include "npu/sim_backend.h"

namespace xdna::npu {

// One op of the model (the CLI fills these from a ConvNet / UpscalerNet; the npu layer does not
// depend on the model loaders).
struct ConvModelOp {
  std::string name;
  std::string kind;          // "conv", or the host op: "add", "concat", "pixel_shuffle", "pool", ...
  ConvShape shape;           // convs
  std::string unsupported;   // convs: why no conv design takes it ("" = placeable)
  std::string host_reason;   // other ops: why it runs on the host
  std::string out_shape;     // for the report, e.g. "32x112x112"
};

struct ConvPlanInput {
  std::string name, family;
  int64_t height = 0, width = 0;  // the input image
  std::vector<ConvModelOp> ops;
};

struct ConvPlannedOp {
  ConvModelOp op;
  bool on_npu = false;
  std::string design;
  ConvTile tile;
  int64_t invocations = 0;
  double modelled_us = 0;  // design time of all its invocations (no dispatch / reconfiguration)
  int64_t ddr_bytes = 0;
  std::string reason;  // host: why
};

struct ConvPlan {
  std::string name, family;
  int64_t height = 0, width = 0;
  XclbinPolicy policy = XclbinPolicy::Single;
  std::vector<ConvPlannedOp> ops;
  CostReport cost;  // one image, modelled
  int npu_ops() const;
  int host_ops() const;
  int64_t macs = 0;  // the placed convs' MACs (unpadded)
  std::string text() const;
  nlohmann::json to_json() const;
};

// Throws std::invalid_argument naming the op whose shape is invalid.
ConvPlan plan_conv_model(const ConvPlanInput& in, XclbinPolicy policy = XclbinPolicy::Single, int columns = 8);

}  // namespace xdna::npu

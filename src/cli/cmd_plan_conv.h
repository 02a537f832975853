// `npu plan MODEL` for conv models (conv classifiers and upscalers): the conv-model planner
// (npu/planner_conv.h) on the model's layers; cmd_plan.cpp calls it first.
#pragma once
#include <string>

namespace xdna::cli {

struct ConvPlanCliOptions {
  std::string model, store;
  std::string image_size;  // "HxW"; empty: the classifier's own size, 256x256 for upscalers
  std::string xclbin = "single";
  bool json = false, measure_host = false;
};

// True when MODEL is a conv classifier or an upscaler (and the plan was printed); false when it
// is something else (the caller tries the other model kinds).
bool run_conv_plan_if_conv_model(const ConvPlanCliOptions& o);

}  // namespace xdna::cli

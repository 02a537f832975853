// Conv models on npu-sim (issue 9): the conv classifiers' and upscalers' layer walks with every
// conv a conv design takes run by npu-sim (npu/sim_exec_conv.h: bf16 operands, f32 accumulation,
// bf16 activations) and the other ops on the host in f32, each with its reason. The same op list
// feeds the planner (npu/planner_conv.h), so `npu plan` and the npu-sim run place ops alike.
#pragma once
#include <map>
#include <string>

#include "core/graph.h"
#include "models/convnet.h"
#include "models/upscaler.h"
#include "npu/planner_conv.h"
#include "npu/sim_exec_conv.h"

namespace xdna {

struct ConvSimRun {
  npu::ConvSimStats stats;                     // the npu-sim convs
  std::map<std::string, std::string> host_ops;  // op kind -> why it ran on the host
  RunReport report;                            // every op: where it ran, host wall time
};

// x [3, H, W] in the model's input range -> [3, H s, W s] (bf16-valued where a conv wrote it).
Tensor run_upscaler_npu_sim(const UpscalerNet& net, const Tensor& x, ConvSimRun* run = nullptr);
// pixels [N, 3, H, W] -> logits [N, labels] (the pooling + classifier head in f32 on the host).
Tensor convnet_forward_npu_sim(const ConvNet& net, const Tensor& pixels, ConvSimRun* run = nullptr);

// The host ops of a conv run's report (node names end in their kind: "block3.add", "head") ->
// why each kind stays on the host.
std::map<std::string, std::string> conv_host_reasons(const RunReport& report);

// The op lists the planner places, for an input image of height x width.
npu::ConvPlanInput upscaler_plan_input(const UpscalerNet& net, int64_t height, int64_t width, const std::string& name);
npu::ConvPlanInput convnet_plan_input(const ConvNet& net, int64_t height, int64_t width, const std::string& name);

}  // namespace xdna

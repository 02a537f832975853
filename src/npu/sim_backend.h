// npu-sim: a backend that runs ops as the NPU would, on the host. For each op it picks the
// design family that covers it (design_families.h), generates the design for the op's shape and
// validates it (cached per shape), then computes the result with the AIE2P numerics of the
// kernels (aie_numerics.h / aie_kernels.h) and charges the cost model (cost_model.h) for the
// dispatch. Every time it reports is modelled, never measured: reports carry kModelledLabel.
// What is and is not modelled: docs/npu-sim.md.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/backend.h"
#include "core/graph.h"
#include "npu/cost_model.h"
#include "npu/design.h"

namespace xdna::npu {

// What a placement decision looks at: an input's shape and dtype (and int8 scale grouping).
struct ValueInfo {
  Shape shape;
  DType dtype = DType::F32;
  int64_t group = 0;  // int8/int4: scale group size (0: no scales)
};
ValueInfo value_info(const Tensor& t);

// How designs map to xclbins. Single: one xclbin holds every design the model uses (as AMD's
// fused decode layer does), so a change of design costs a configure. PerDesign: each design is
// its own xclbin, so a change of design costs an xclbin switch.
enum class XclbinPolicy : uint8_t { Single, PerDesign };
const char* xclbin_policy_name(XclbinPolicy p);

// The numerics an NPU-placed op runs with.
enum class SimPath : uint8_t {
  GemvBf16, GemmBf16, MatmulBfp16, MatmulInt8,  // MatMul
  Add, Mul, Scale, Silu, Gelu,                  // elementwise
  LayerNorm, RMSNorm, Softmax,
  Attention,  // encoder_attention design (sim_exec_encoder.h)
};

// The decision for one node: a validated design, or the reason it stays on the host.
struct OpChoice {
  bool on_npu = false;
  std::string reason;  // why not (host fallback)
  std::shared_ptr<const Design> design;
  std::string xclbin;
  SimPath path = SimPath::Add;
  int64_t rows = 0, k = 0, n = 0, k_pad = 0;  // MatMul: M, K, N, K padded to the design
};

// Generates, validates and caches one design per (family, shape); remembers refusals too.
class DesignCache {
 public:
  explicit DesignCache(XclbinPolicy policy = XclbinPolicy::Single) : policy_(policy) {}
  OpChoice choose(const Node& node, std::span<const ValueInfo> inputs);
  XclbinPolicy policy() const { return policy_; }

 private:
  std::shared_ptr<const Design> get(const std::string& key, const std::function<Design()>& make,
                                    std::string& error);
  XclbinPolicy policy_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Design>> designs_;
  std::map<std::string, std::string> errors_;
};

// Modelled cost of a sequence of NPU invocations. Additive split of the total:
// compute (design time while cores are busy) + exposed DMA (design time beyond compute: the
// transfers compute does not hide) + dispatch overhead + reconfiguration (configures and
// xclbin switches).
struct CostReport {
  std::string_view label = kModelledLabel;
  RunCost run;           // model_run over the invocations
  double compute_s = 0;  // sum over invocations of min(compute, design total)
  double exposed_dma_s = 0;
  double reconfig_s = 0;  // configure + xclbin switch
  std::map<std::string, int> designs;  // design name -> invocations
  std::string text() const;
  nlohmann::json to_json() const;
};
CostReport cost_report(std::span<const Invocation> invocations);

class NpuSimBackend final : public Backend {
 public:
  explicit NpuSimBackend(XclbinPolicy policy = XclbinPolicy::Single) : cache_(policy) {}
  std::string_view name() const override { return kModelledLabel; }
  bool supports(const Node& node, std::span<const Tensor> inputs) const override;
  Tensor compute(const Node& node, std::span<const Tensor> inputs) override;

  // Modelled cost of every dispatch since construction (or the last reset).
  CostReport cost() const { return cost_report(invocations_); }
  size_t dispatches() const { return invocations_.size(); }
  void reset_cost() { invocations_.clear(); }
  // Why ops went to the host: op name -> reason (the latest refusal per op kind).
  const std::map<std::string, std::string>& refusals() const { return refusals_; }

 private:
  struct PreparedWeight;
  const PreparedWeight& prepare(const Tensor& w, const OpChoice& c);

  mutable DesignCache cache_;
  mutable std::map<std::string, std::string> refusals_;
  std::vector<Invocation> invocations_;
  std::vector<std::shared_ptr<const Design>> keep_;  // keeps invocation designs alive
  std::map<std::string, std::shared_ptr<PreparedWeight>> weights_;
};

}  // namespace xdna::npu

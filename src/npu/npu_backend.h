// The NPU backend (AMD XDNA2 through the amdxdna driver). It places ops exactly as npu-sim does
// (the same DesignCache decision, so `--device npu` runs the plan `--device npu-sim` models) and
// runs a placed op through the DeviceRuntime when the artifacts directory holds the compiled
// design. Everything else stays on the host with a reason (refusals(): "no NPU runtime", "no
// compiled artifact for design <name> in <dir>", or npu-sim's own reason), so the executor's
// report shows every op that fell back and the command can say why.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph.h"
#include "npu/runtime/device_runtime.h"
#include "npu/sim_backend.h"

namespace xdna {

class NpuBackend final : public Backend {
 public:
  // Without a runtime (no device) it supports no op.
  explicit NpuBackend(std::unique_ptr<npu::DeviceRuntime> runtime = nullptr,
                      npu::XclbinPolicy policy = npu::XclbinPolicy::Single);
  ~NpuBackend() override;
  void set_runtime(std::unique_ptr<npu::DeviceRuntime> runtime);
  npu::DeviceRuntime* runtime() const { return runtime_.get(); }

  std::string_view name() const override { return "npu"; }
  bool supports(const Node& node, std::span<const Tensor> inputs) const override;
  Tensor compute(const Node& node, std::span<const Tensor> inputs) override;

  // The placement decision with its reason (empty when the op runs on the NPU).
  std::string refusal(const Node& node, std::span<const Tensor> inputs) const;
  // Why ops went to the host: op name -> reason (the latest refusal per op kind).
  const std::map<std::string, std::string>& refusals() const { return refusals_; }
  // Designs run on the device since construction: design name -> invocations.
  const std::map<std::string, int64_t>& dispatches() const { return dispatches_; }

 private:
  npu::OpChoice choose(const Node& node, std::span<const Tensor> inputs) const;

  std::unique_ptr<npu::DeviceRuntime> runtime_;
  mutable npu::DesignCache cache_;
  mutable std::map<std::string, std::string> refusals_;
  std::map<std::string, int64_t> dispatches_;
};

namespace npu {

// The host arguments of one design invocation, laid out as the design's HostArgs (one byte
// vector per Design::args entry, each exactly its size): how NpuBackend feeds DeviceRuntime::run.
// Covered paths: bf16 GEMV (weights [N_pad][K_pad] bf16 rows, x [K_pad] bf16, y [N_pad] bf16),
// the row-streaming designs (elementwise, norms, softmax: inputs and output as flat bf16,
// zero-padded; norm gamma then beta as bf16 in "const"; scale's factor as one f32 in "const").
// Returns the empty string when `c.path` is covered, else why not (then `args` is untouched).
std::string pack_reason(SimPath path);  // "" when pack_args covers `path`, else why not
std::string pack_args(const Node& node, std::span<const Tensor> inputs, const OpChoice& c,
                      std::vector<std::vector<uint8_t>>& args);
// Reads the output argument ("y" or "out": bf16) back into an f32 tensor of `shape`, adding a
// MatMul's f32 bias on the host as npu-sim does.
Tensor unpack_output(const Node& node, std::span<const Tensor> inputs, const OpChoice& c,
                     const std::vector<std::vector<uint8_t>>& args, const Shape& shape);

}  // namespace npu

}  // namespace xdna

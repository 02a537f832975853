// The mock-free dry run of one decode token: the planner's invocations for a decoder, turned
// into an artifacts directory (design.json, a shared xclbin whose PDIs are labelled placeholders,
// our instruction streams, a manifest) and run through DeviceRuntime over DryRunIo with
// zero-filled buffers. The result is the exact ioctl transcript the runtime would send to the
// amdxdna driver, with every structure decoded field by field (tests compare it with goldens:
// tests/fixtures/npu_dry_run/). The token goes through DeviceRuntime::run_sequence: with the
// default options one EXEC_CMD per CMD_CHAIN (all of a token's invocations fit one chain), with
// Submission::PerCommand one EXEC_CMD per invocation.
#pragma once
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "npu/artifacts/manifest.h"
#include "npu/design.h"
#include "npu/driver/driver_io.h"
#include "npu/planner.h"
#include "npu/runtime/device_runtime.h"
#include "npu/sim_exec_decoder.h"

namespace xdna::npu {

// Decoder shapes from the models' config.json, without weights.
DecoderPlanInput gemma3_270m_plan_input();  // google/gemma-3-270m: 18 layers, 5 local : 1 global
DecoderPlanInput qwen3_06b_plan_input();    // Qwen/Qwen3-0.6B: 28 layers

// The designs of one decode token, in invocation order, regenerated from the plan's design
// names with the generators the planner calls (design_families.h). Throws naming a design the
// plan lists that no generator reproduces.
std::vector<Design> decode_token_designs(const DecoderPlan& plan);

// An artifacts directory for `designs` in `work_dir`: <design>/design.json, <design>/insts.bin
// (our lowering), <name>.xclbin with one DPU CU per distinct design whose PDI is a text
// placeholder labelled as such (no toolchain here), and manifest.json; returns the loaded
// (hash-checked) manifest. The PDIs make it useless on hardware, by design.
artifacts::Manifest write_placeholder_artifacts(const std::vector<Design>& designs, const std::string& work_dir,
                                                const std::string& name, int columns = 8);

struct DecodeDryRun {
  DecoderPlan plan;
  std::vector<Design> invocations;
  std::vector<driver::IoctlRecord> records;      // every ioctl of the run, in order
  std::vector<driver::SubmittedCommand> submissions;  // every command BO at EXEC_CMD time (chains)
  std::vector<driver::SubmittedCommand> commands;     // the invocations' packets, in order
  std::map<uint64_t, std::string> insts_sha256;  // instruction BO device address -> sha256
  nlohmann::json transcript;                     // the golden form (decoded, deterministic)
};

// Writes the artifacts into `work_dir` (created; must be empty or absent) and runs one token.
DecodeDryRun decode_dry_run(const DecoderPlanInput& model, const DecoderPlanOptions& options,
                            const std::string& work_dir, DeviceRuntimeOptions runtime = {});

// The same run for any list of invocations (plan left empty; transcript without model fields).
DecodeDryRun dry_run_designs(std::vector<Design> invocations, const std::string& work_dir, int columns = 8,
                             DeviceRuntimeOptions runtime = {});

// `--device npu`'s fused decode (runtime/fused_decoder.h) over DryRunIo: placeholder artifacts for
// the token designs, the DeviceFusedDecoder built on them (the weights uploaded once), then one
// decode() per id from `state` (e.g. positions a prefill filled). npu (needs hardware, unverified
// here): DryRunIo computes nothing, so the logits and new K/V rows are zero.
struct FusedDeviceDryRun {
  std::vector<driver::IoctlRecord> load_records;  // the decoder's construction (after the device open)
  std::vector<DecodeDryRun> tokens;               // per token: its ioctls, chain, commands, transcript
  std::vector<std::vector<float>> logits;         // per token
  std::map<uint32_t, std::vector<uint8_t>> bo_contents;  // every BO alive at the end, by handle
  SimDecoderState state{SimDecoderModel{}, 0};    // after the last token
};
FusedDeviceDryRun fused_device_dry_run(const SimDecoderModel& m, SimDecoderState state, std::span<const int32_t> ids,
                                       const std::string& work_dir, DeviceRuntimeOptions runtime = {});

// One ioctl record decoded by name: {"call", "request", "in": {...}, "out": {...}, "payload": ...}.
// User-space pointers (qos_p, param_val, args, buffer) are shown as "<user pointer>": they differ
// per process, and what they point to is decoded under "payload".
nlohmann::json describe_record(const driver::IoctlRecord& r);
// A command buffer decoded: header fields, cu mask, and the START_CU / START_NPU payload, or a
// CMD_CHAIN's command count, submit/error index and sub-command BO handles.
nlohmann::json describe_command(const std::vector<uint32_t>& words);

}  // namespace xdna::npu

// Options `npu generate` and `npu chat` share: the model, the context, sampling, the device.
#pragma once
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/config.h"
#include "cli/server_client.h"
#include "host/host_backend.h"
#include "host/kv_cache.h"
#include "npu/artifacts/manifest.h"
#include "npu/device_lock.h"
#include "npu/driver/driver_io.h"
#include "npu/npu_backend.h"
#include "npu/runtime/device_runtime.h"
#include "npu/sim_backend.h"
#include "pipeline/llm.h"
#include "pipeline/llm_npu_fused.h"

namespace xdna::cli {

struct LlmCliOptions {
  std::string model = "gemma3-270m";
  std::string store;
  int64_t context = 0;                 // 0 = the model's maximum, capped by kv_budget_mib
  uint64_t kv_budget_mib = 1024;       // KV cache budget
  std::string kv_type;                 // "" = config kv_type, else default_kv_dtype (f16)
  int64_t max_tokens = 256;
  SamplingParams sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};
  std::optional<uint64_t> seed;        // none: a random seed (reported by --json)
  std::vector<std::string> stop;
  std::string device = "host";
  std::string fallback;  // --fallback: "" (config npu_fallback, else none), none, host, npu-sim
  std::string npu_weights;  // --npu-weights: "" (int8), bf16 or int8: the fused decode plan's weights
  std::string npu_kv;       // --npu-kv: "" (int8 with int8 weights, else bf16), bf16 or int8: the plan's KV cache
  ServerFlags server;
};

inline void add_device_options(CLI::App* cmd, std::string& device, std::string& fallback);

inline void add_llm_options(CLI::App* cmd, LlmCliOptions& o) {
  cmd->add_option("--model,-m", o.model,
                  "Model: a store name (e.g. gemma3-270m), a GGUF file, a Hugging Face checkpoint "
                  "directory or a baked file")
      ->capture_default_str();
  cmd->add_option("--store", o.store, kStoreHelp);
  cmd->add_option("--context", o.context, "Context length in tokens (default: the model's maximum, "
                                          "capped by --kv-budget)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-budget", o.kv_budget_mib, "KV cache memory budget in MiB (0 = no cap)")
      ->capture_default_str();
  cmd->add_option("--kv-type", o.kv_type,
                  "KV cache element type: f32, f16 or bf16 (default: config kv_type, else f16, as llama.cpp; "
                  "f16/bf16 hold half the bytes of f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Tokens to generate at most (0 = until the context is full)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--temperature,-t", o.sampling.temperature, "Sampling temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", o.sampling.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o.sampling.top_p, "Nucleus sampling: smallest set with this mass (1 = off)")
      ->capture_default_str();
  cmd->add_option("--min-p", o.sampling.min_p, "Drop tokens below min-p x the top probability (0 = off)")
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", o.sampling.repetition_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o.sampling.presence_penalty, "OpenAI presence penalty");
  cmd->add_option("--frequency-penalty", o.sampling.frequency_penalty, "OpenAI frequency penalty");
  cmd->add_option("--seed", o.seed, "Random seed (same seed, same output; default: random)");
  cmd->add_option("--stop", o.stop, "Stop string (repeatable); not included in the output");
  add_device_options(cmd, o.device, o.fallback);
  cmd->add_option("--npu-weights", o.npu_weights,
                  "With --device npu-sim or npu, the fused decode plan's weight precision: int8 (default, the "
                  "planner's default plan: f32/f16/bf16 weights quantized per row) or bf16")
      ->check(CLI::IsMember({"bf16", "int8"}));
  cmd->add_option("--npu-kv", o.npu_kv,
                  "With --device npu-sim or npu, the fused decode plan's KV cache: int8 (default with int8 weights: "
                  "each cached K/V row int8 with an f32 scale, half the KV bytes) or bf16 (the default with bf16 "
                  "weights)")
      ->check(CLI::IsMember({"bf16", "int8"}));
  add_server_options(cmd, o.server);
}

// The fused decode plan's precisions: weights (--npu-weights, "" = int8) and KV cache (--npu-kv,
// "" = int8 with int8 weights, else bf16: the int8 KV cache passed the int8 plan's accuracy gate,
// docs/npu-sim.md).
struct NpuFusedChoice {
  DType weights = DType::I8, kv = DType::BF16;
};
// Throws std::runtime_error naming the flag when it is given with --device host (nothing would
// read it), or --npu-kv int8 with --npu-weights bf16 (no such design).
inline NpuFusedChoice resolve_npu_weights(const LlmCliOptions& o) {
  if (!o.npu_weights.empty() && o.device == "host")
    throw std::runtime_error("--npu-weights " + o.npu_weights + " applies to --device npu-sim or npu, not host");
  if (!o.npu_kv.empty() && o.device == "host")
    throw std::runtime_error("--npu-kv " + o.npu_kv + " applies to --device npu-sim or npu, not host");
  NpuFusedChoice c;
  c.weights = o.npu_weights == "bf16" ? DType::BF16 : DType::I8;
  c.kv = o.npu_kv == "int8" || (o.npu_kv.empty() && c.weights == DType::I8) ? DType::I8 : DType::BF16;
  if (c.kv == DType::I8 && c.weights != DType::I8)
    throw std::runtime_error("--npu-kv int8 needs --npu-weights int8 (the int8 KV cache design has int8 weights)");
  return c;
}

// Why these options must run in this process rather than on a server (empty: they need not).
inline std::string llm_in_process_reason(const LlmCliOptions& o) {
  if (o.device != "host") return "--device " + o.device + " is a choice of this process";
  if (!o.npu_weights.empty()) return "--npu-weights is a choice of this process";
  if (!o.npu_kv.empty()) return "--npu-kv is a choice of this process";
  if (!o.store.empty()) return "--store names a store of this process";
  if (o.context != 0 || o.kv_budget_mib != 1024 || !o.kv_type.empty())
    return "--context, --kv-budget and --kv-type shape this process's KV cache";
  return "";
}

// The request fields of an OpenAI completion that match `o` and `seed` (the same draw as in-process).
inline nlohmann::json llm_request_json(const LlmCliOptions& o, uint64_t seed) {
  const SamplingParams& s = o.sampling;
  nlohmann::json j = {{"model", o.model},
                      {"temperature", s.temperature},
                      {"top_k", s.top_k},
                      {"top_p", s.top_p},
                      {"min_p", s.min_p},
                      {"repetition_penalty", s.repetition_penalty},
                      {"presence_penalty", s.presence_penalty},
                      {"frequency_penalty", s.frequency_penalty},
                      {"seed", static_cast<int64_t>(seed)},  // the server reads it back as uint64
                      // 0 = until the context is full: the server stops there too.
                      {"max_tokens", o.max_tokens ? o.max_tokens : int64_t{1} << 40}};
  if (!o.stop.empty()) j["stop"] = o.stop;
  return j;
}

// The text of one streamed completion event (chat: delta.content; completions: text).
inline std::string streamed_text(const nlohmann::json& event) {
  if (!event.contains("choices") || !event["choices"].is_array() || event["choices"].empty()) return "";
  const nlohmann::json& c = event["choices"][0];
  if (c.contains("delta") && c["delta"].is_object()) {
    const nlohmann::json& d = c["delta"];
    return d.contains("content") && d["content"].is_string() ? d["content"].get<std::string>() : "";
  }
  return c.contains("text") && c["text"].is_string() ? c["text"].get<std::string>() : "";
}

inline std::unique_ptr<LanguageModel> load_llm(const LlmCliOptions& o) {
  LoadOptions lo;
  lo.context_length = o.context;
  lo.memory_budget_bytes = o.kv_budget_mib << 20;
  if (const auto kv = resolve_kv_type(o.kv_type)) lo.kv_dtype = host::kv_dtype_from_name(*kv);
  return LanguageModel::load(resolve_model_path(o.model, resolve_store(o.store)), lo);
}

// The backends of --device, in order of preference (host last). --device npu takes the device's
// single-tenant lock (npu/device_lock.h), held as long as this object, and runs NpuBackend over a
// DeviceRuntime on the node with the artifacts of config `npu_artifacts` (or the default
// directory); ops without a compiled artifact run on the host and are reported per op. When the
// NPU is missing or busy it fails, unless a fallback is allowed (--fallback host|npu-sim or config
// `npu_fallback`): then the fallback is said on stderr and mark() makes every op of the run report
// a fallback, so no fallback is silent.
struct DeviceBackends {
  HostBackend host;
  npu::NpuSimBackend sim;
  NpuBackend device;
  std::optional<npu::DeviceLock> lock;
  std::string requested, used;  // --device, and what runs ("npu", "npu-sim" or "host")
  std::string fallback_reason;  // why the requested device is not used (empty: it is)
  std::string artifacts_note;   // --device npu: the artifacts directory, or why none loaded
  std::shared_ptr<NpuSimFusedDecode> fused;  // npu-sim: the fused decode, or why not (fused_decode())

  // `fallback`: the --fallback flag ("" = config npu_fallback, else "none").
  std::vector<Backend*> list(const std::string& name, const std::string& fallback = "") {
    requested = used = name.empty() ? "host" : name;
    if (name == "npu-sim") return {&sim, &host};
    if (name != "npu") return {};
    try {
      const std::optional<std::string> node = npu::find_accel_node();
      if (!node)
        throw std::runtime_error("--device npu: no NPU device (no /dev/accel/accel* node; `npu doctor` "
                                 "says whether the amdxdna driver sees one)");
      lock.emplace(npu::DeviceLock::acquire(*node));
      const std::string dir = resolve_npu_artifacts();
      npu::artifacts::Manifest manifest;
      manifest.dir = dir;
      try {
        manifest = npu::artifacts::load_manifest(dir);
        artifacts_note = std::to_string(manifest.designs.size()) + " compiled design(s) in " + dir;
      } catch (const std::exception& e) {  // no artifacts: the device runs nothing, said per op
        artifacts_note = std::string("no artifacts loaded: ") + e.what();
        std::fprintf(stderr, "npu: %s; ops without a compiled design run on the host\n", artifacts_note.c_str());
      }
      device.set_runtime(std::make_unique<npu::DeviceRuntime>(npu::driver::open_kernel_io(*node), manifest));
      return {&device, &host};
    } catch (const std::runtime_error& e) {
      lock.reset();
      const std::string fb = resolve_npu_fallback(fallback);
      if (fb == "none")
        throw std::runtime_error(std::string(e.what()) +
                                 "\nTo run anyway, allow a fallback: --fallback host, --fallback npu-sim "
                                 "(or config key npu_fallback)");
      fallback_reason = e.what();
      used = fb;
      std::fprintf(stderr, "npu: %s\nnpu: falling back to %s (%s): every op is reported as a fallback\n", e.what(),
                   fb.c_str(), fallback.empty() ? "config npu_fallback" : ("--fallback " + fb).c_str());
      if (fb == "npu-sim") return {&sim, &host};
      return {};
    }
  }
  // On npu-sim, decode tokens run through the fused plan (`weights`: resolve_npu_weights) when
  // every layer allows it, else op by op with the reason in placement_text()
  // (pipeline/llm_npu_fused.h). Null off npu-sim.
  std::shared_ptr<NpuSimFusedDecode> fused_decode(const LanguageModel& lm, NpuFusedChoice c) {
    if (used == "npu-sim" && !fused) fused = NpuSimFusedDecode::prepare(lm, c.weights, c.kv);
    // --device npu: the same plan on the device (npu (needs hardware, unverified here))
    if (used == "npu" && !fused && device.runtime())
      fused = NpuSimFusedDecode::prepare(lm, *device.runtime(), c.weights, c.kv);
    return fused;
  }
  // After a run: when a device fallback was taken, every op ran in its place.
  void mark(RunReport& report) const {
    if (fallback_reason.empty()) return;
    for (OpRecord& r : report.ops) r.fallback = true;
  }
  // {"requested","used","fallback","fallback_reason","op_fallback_reasons"}: where ops ran and why not.
  nlohmann::json placement_json() const {
    nlohmann::json j = {{"requested", requested},
                        {"used", used},
                        {"fallback", !fallback_reason.empty()},
                        {"fallback_reason", fallback_reason.empty() ? nlohmann::json(nullptr)
                                                                    : nlohmann::json(fallback_reason)}};
    if (used == "npu-sim") j["op_fallback_reasons"] = sim.refusals();
    if ((used == "npu-sim" || used == "npu") && fused) j["decode"] = fused->placement_json();
    if (used == "npu") {
      j["op_fallback_reasons"] = device.refusals();
      j["artifacts"] = artifacts_note;
      j["dispatches"] = device.dispatches();
    }
    return j;
  }
  // The text of placement_json for stderr (empty for a plain host run).
  std::string placement_text() const {
    std::string s;
    if (!fallback_reason.empty())
      s += "npu: ran on " + used + " instead of " + requested + ": " + fallback_reason + "\n";
    const std::map<std::string, std::string>* why =
        used == "npu" ? &device.refusals() : used == "npu-sim" ? &sim.refusals() : nullptr;
    if (why)
      for (const auto& [op, reason] : *why) s += "npu: " + op + " on the host: " + reason + "\n";
    if ((used == "npu-sim" || used == "npu") && fused) s += fused->placement_text();
    return s;
  }
};

// --device, --fallback and the old --allow-host-fallback (= --fallback host).
inline void add_device_options(CLI::App* cmd, std::string& device, std::string& fallback) {
  cmd->add_option("--device", device,
                  "Where ops run: host, npu-sim (modelled NPU, unsupported ops on the host) or "
                  "npu (needs /dev/accel and compiled artifacts; unsupported ops on the host)")
      ->check(CLI::IsMember({"host", "npu-sim", "npu"}))
      ->capture_default_str();
  CLI::Option* fb = cmd->add_option("--fallback", fallback,
                                    "With --device npu, when the NPU is missing or busy: none (fail), host or "
                                    "npu-sim (default: config npu_fallback, else none); a fallback is reported")
                        ->check(CLI::IsMember({"none", "host", "npu-sim"}));
  cmd->add_flag_callback("--allow-host-fallback", [&fallback] { fallback = "host"; },
                         "Same as --fallback host")
      ->excludes(fb);
}

inline GenerateRequest make_request(const LlmCliOptions& o, std::vector<int32_t> prompt) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling = o.sampling;
  r.sampling.seed = o.seed ? *o.seed : std::random_device{}();
  r.max_tokens = o.max_tokens;
  r.stop = o.stop;
  return r;
}

}  // namespace xdna::cli

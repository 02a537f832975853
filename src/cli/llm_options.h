// Options `npu generate` and `npu chat` share: the model, the context, sampling, the device.
#pragma once
#include <cstdio>
#include <filesystem>
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
#include "npu/device_lock.h"
#include "npu/npu_backend.h"
#include "npu/sim_backend.h"
#include "pipeline/llm.h"

namespace xdna::cli {

struct LlmCliOptions {
  std::string model = "gemma3-270m";
  std::string store;
  int64_t context = 0;                 // 0 = the model's maximum, capped by kv_budget_mib
  uint64_t kv_budget_mib = 1024;       // KV cache budget
  int64_t max_tokens = 256;
  SamplingParams sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};
  std::optional<uint64_t> seed;        // none: a random seed (reported by --json)
  std::vector<std::string> stop;
  std::string device = "host";
  bool allow_host_fallback = false;  // --device npu, NPU missing or busy: the host instead of an error
  ServerFlags server;
};

inline void add_host_fallback_flag(CLI::App* cmd, bool& allow) {
  cmd->add_flag("--allow-host-fallback", allow,
                "With --device npu: run on the host when the NPU is missing or another engine holds it");
}

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
  cmd->add_option("--device", o.device,
                  "Where ops run: host, npu-sim (modelled NPU, unsupported ops on the host) or "
                  "npu (needs /dev/accel)")
      ->check(CLI::IsMember({"host", "npu-sim", "npu"}))
      ->capture_default_str();
  add_host_fallback_flag(cmd, o.allow_host_fallback);
  add_server_options(cmd, o.server);
}

// Why these options must run in this process rather than on a server (empty: they need not).
inline std::string llm_in_process_reason(const LlmCliOptions& o) {
  if (o.device != "host") return "--device " + o.device + " is a choice of this process";
  if (!o.store.empty()) return "--store names a store of this process";
  if (o.context != 0 || o.kv_budget_mib != 1024) return "--context and --kv-budget size this process's KV cache";
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
  return LanguageModel::load(resolve_model_path(o.model, resolve_store(o.store)), lo);
}

// The backends of --device, in order of preference (host last). --device npu takes the device's
// single-tenant lock (npu/device_lock.h), held as long as this object; when the NPU is missing or
// another engine holds it, `allow_host_fallback` runs on the host instead (said on stderr).
struct DeviceBackends {
  HostBackend host;
  npu::NpuSimBackend sim;
  NpuBackend device;
  std::optional<npu::DeviceLock> lock;
  std::vector<Backend*> list(const std::string& name, bool allow_host_fallback = false) {
    if (name == "npu-sim") return {&sim, &host};
    if (name != "npu") return {};
    try {
      const std::optional<std::string> node = npu::find_accel_node();
      if (!node)
        throw std::runtime_error("--device npu needs hardware: no /dev/accel device "
                                 "(use --device npu-sim for the modelled NPU)");
      lock.emplace(npu::DeviceLock::acquire(*node));
      return {&device, &host};
    } catch (const std::runtime_error& e) {
      if (!allow_host_fallback) throw;
      std::fprintf(stderr, "npu: %s\nnpu: running on the host instead (--allow-host-fallback)\n", e.what());
      return {};
    }
  }
};


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

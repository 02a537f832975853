// Options `npu generate` and `npu chat` share: the model, the context, sampling, the device.
#pragma once
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/config.h"
#include "host/host_backend.h"
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
};

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
}

inline std::unique_ptr<LanguageModel> load_llm(const LlmCliOptions& o) {
  LoadOptions lo;
  lo.context_length = o.context;
  lo.memory_budget_bytes = o.kv_budget_mib << 20;
  return LanguageModel::load(resolve_model_path(o.model, resolve_store(o.store)), lo);
}

// The backends of --device, in order of preference (host last).
struct DeviceBackends {
  HostBackend host;
  npu::NpuSimBackend sim;
  NpuBackend device;
  std::vector<Backend*> list(const std::string& name) {
    if (name == "npu-sim") return {&sim, &host};
    if (name == "npu") {
      if (!std::filesystem::exists("/dev/accel"))
        throw std::runtime_error("--device npu needs hardware: no /dev/accel device "
                                 "(use --device npu-sim for the modelled NPU)");
      return {&device, &host};
    }
    return {};
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

// `npu perplexity --model M --file TEXT [--context N] [--chunks K] [--json]`: the model's
// perplexity on a text file, measured like llama.cpp's llama-perplexity (non-overlapping windows
// of N tokens from an empty cache, first token BOS, second half of each window scored; see
// src/pipeline/perplexity.h).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/llm_options.h"
#include "pipeline/perplexity.h"

namespace xdna::cli {

namespace {

struct PerplexityCliOptions {
  std::string model = "gemma3-270m";
  std::string store;
  std::string file;
  int64_t context = 512;
  int64_t chunks = 0;
  bool json = false;
  std::string device = "host";
};

void run_perplexity(const PerplexityCliOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) throw std::runtime_error("perplexity: cannot read " + o.file);
  std::stringstream text;
  text << in.rdbuf();

  const auto t0 = std::chrono::steady_clock::now();
  LoadOptions lo;
  lo.context_length = o.context;
  const std::unique_ptr<LanguageModel> lm =
      LanguageModel::load(resolve_model_path(o.model, resolve_store(o.store)), lo);
  const std::vector<int32_t> ids = lm->tokenizer().encode(text.str(), false).ids;

  DeviceBackends devices;
  PerplexityOptions po;
  po.context = o.context;
  po.max_windows = o.chunks;
  po.backends = devices.list(o.device);
  po.progress = [&](int64_t done, int64_t all, double ppl) {
    if (!o.json) std::fprintf(stderr, "window %lld/%lld: perplexity so far %.4f\n",
                              static_cast<long long>(done), static_cast<long long>(all), ppl);
  };
  const auto t1 = std::chrono::steady_clock::now();
  const PerplexityResult r = perplexity(*lm, ids, po);
  const auto t2 = std::chrono::steady_clock::now();
  const double eval_s = std::chrono::duration<double>(t2 - t1).count();
  const double evaluated = double(r.windows * o.context);

  if (!o.json) {
    std::printf("%s: perplexity %.4f (mean nll %.5f) over %lld scored tokens, %lld windows of %lld "
                "(text %lld tokens); %.1f s, %.0f tok/s\n",
                lm->name().c_str(), r.perplexity, r.mean_nll, static_cast<long long>(r.scored_tokens),
                static_cast<long long>(r.windows), static_cast<long long>(o.context),
                static_cast<long long>(r.text_tokens), eval_s, evaluated / eval_s);
    return;
  }
  const nlohmann::json out = {
      {"model", lm->name()},
      {"file", o.file},
      {"method", "non-overlapping windows, first token BOS, second half scored (llama-perplexity)"},
      {"context", o.context},
      {"text_tokens", r.text_tokens},
      {"windows", r.windows},
      {"scored_tokens", r.scored_tokens},
      {"perplexity", r.perplexity},
      {"mean_nll", r.mean_nll},
      {"window_nll", r.window_nll},
      {"load_s", std::chrono::duration<double>(t1 - t0).count()},
      {"eval_s", eval_s},
      {"tokens_per_s", evaluated / eval_s},
      {"device", o.device},
  };
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity of an LLM on a text file (llama-perplexity's method: windows of "
                    "--context tokens, second half of each scored)");
  cmd->add_option("--model,-m", o->model, "Model: a store name, a GGUF file, a Hugging Face "
                                          "checkpoint directory or a baked file")
      ->capture_default_str();
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_option("--file,-f", o->file, "The text (UTF-8)")->required();
  cmd->add_option("--context,-c", o->context, "Window length in tokens (even)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "Evaluate at most this many windows (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "One JSON object: perplexity, mean nll, per-window nll, timings");
  cmd->add_option("--device", o->device, "Where ops run: host, npu-sim or npu")
      ->check(CLI::IsMember({"host", "npu-sim", "npu"}))
      ->capture_default_str();
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace xdna::cli

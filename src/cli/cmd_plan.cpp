// `npu plan MODEL [--tokens T] [--batch B] [--json] [--xclbin single|per-design]
// [--measure-host]`: where an encoder's ops would run on the NPU (npu-sim's designs) and what the
// cost model says they cost, without computing anything. Every NPU figure is modelled; with
// --measure-host the same forward pass is also timed on the host backend (measured).
// For a decoder (a GGUF file, an HF checkpoint of a decoder family, or a store name holding one):
// `npu plan MODEL [--weights int8|bfp16|bf16] [--context N] [--json]` prints the decode plan per
// layer (fused whole-layer designs where they fit) and the modelled tok/s.
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "models/decoder_spec.h"
#include "npu/planner.h"
#include "pipeline/llm.h"
#include "weights/gguf.h"
#include "pipeline/embed.h"

namespace xdna::cli {

namespace {

struct PlanCliOptions {
  std::string model;
  std::string store;
  int64_t tokens = 128;
  int64_t batch = 1;
  bool json = false;
  std::string xclbin = "single";
  bool measure_host = false;
  std::string weights = "int8";
  int64_t context = 1024;
  bool context_given = false;
};

namespace fs = std::filesystem;

// The decoder spec at a path (a .gguf, a directory with one, or an HF decoder checkpoint), or
// nothing when the path holds something else (an encoder). Errors in a decoder file propagate.
std::optional<DecoderSpec> decoder_spec_at(const std::string& path) {
  std::string gguf;
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".gguf") gguf = path;
  if (fs::is_directory(path) && !fs::exists(fs::path(path) / "config.json"))
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".gguf") gguf = e.path().string();
  if (!gguf.empty()) return decoder_spec_from_gguf(GgufFile(gguf));
  if (!fs::is_directory(path)) return std::nullopt;
  std::ifstream in(fs::path(path) / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(in, nullptr, false);
  if (cfg.is_discarded() || !cfg.contains("model_type")) return std::nullopt;
  const std::string type = cfg["model_type"].get<std::string>();
  if (type != "llama" && type != "qwen3" && type != "gemma3" && type != "gemma3_text") return std::nullopt;
  return decoder_spec_from_config(cfg, (fs::path(path) / "config.json").string());
}

void run_decoder_plan(const PlanCliOptions& o, const std::string& path, const DecoderSpec& spec) {
  npu::DecoderPlanInput in;
  in.name = fs::path(path).filename().string();
  if (in.name.empty()) in.name = path;
  in.family = spec.family;
  in.layers = spec.layers;
  in.vocab = spec.vocab_size;
  in.shape = {spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, spec.intermediate, 1,
              spec.qk_norm, spec.act != Activation::Silu};
  in.layer_is_local = spec.layer_is_local;
  in.sliding_window = spec.sliding_window;
  npu::DecoderPlanOptions opts;
  opts.weights = o.weights == "bf16" ? DType::BF16 : o.weights == "bfp16" ? DType::BFP16 : DType::I8;
  opts.context = o.context;
  // The default (1024) shrinks to a smaller model's maximum; an explicit --context must fit.
  if (!o.context_given && spec.max_positions > 0) opts.context = std::min<int64_t>(o.context, spec.max_positions);
  else if (spec.max_positions > 0 && o.context > spec.max_positions)
    throw std::invalid_argument("plan: --context " + std::to_string(o.context) + " exceeds the model's " +
                                std::to_string(spec.max_positions) + " positions");
  const npu::DecoderPlan plan = npu::plan_decoder(in, opts);
  if (o.json)
    std::printf("%s\n", plan.to_json().dump(2).c_str());
  else
    std::printf("%s", plan.text().c_str());
}

void run_plan(const PlanCliOptions& o) {
  std::string path;
  try {
    path = resolve_model_path(o.model, resolve_store(o.store));
  } catch (const std::runtime_error&) {
    // Not found as a decoder: the encoder loader below reports what it tried.
  }
  if (!path.empty())
    if (const std::optional<DecoderSpec> spec = decoder_spec_at(path)) return run_decoder_plan(o, path, *spec);
  const EmbeddingModel model = EmbeddingModel::load(o.model, resolve_store(o.store));
  const Encoder& enc = model.encoder();
  if (o.tokens > enc.spec().max_positions)
    throw std::invalid_argument("plan: --tokens " + std::to_string(o.tokens) + " exceeds the model's " +
                                std::to_string(enc.spec().max_positions) + " positions");
  // Token values do not change the plan; any id inside the vocabulary will do.
  const int32_t id = int32_t(std::min<int64_t>(100, enc.weights().word.dim(0) - 1));
  const std::vector<std::vector<int32_t>> ids(size_t(o.batch), std::vector<int32_t>(size_t(o.tokens), id));
  EncoderGraph eg = enc.lower(ids);
  const npu::XclbinPolicy policy =
      o.xclbin == "single" ? npu::XclbinPolicy::Single : npu::XclbinPolicy::PerDesign;
  const npu::Plan plan = npu::plan_graph(eg.graph, policy);

  double host_ms = -1;
  if (o.measure_host) {
    std::vector<double> ms;
    enc.forward(ids);  // warm-up
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      enc.forward(ids);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    host_ms = ms[ms.size() / 2];
  }
  if (o.json) {
    nlohmann::json j = plan.to_json();
    j["model"] = model.name();
    j["batch"] = o.batch;
    j["tokens"] = o.tokens;
    if (host_ms >= 0) j["host_measured_ms"] = host_ms;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: batch %lld x %lld tokens\n%s", model.name().c_str(), (long long)o.batch,
              (long long)o.tokens, plan.text().c_str());
  if (host_ms >= 0)
    std::printf("host backend (measured, this CPU): %.2f ms per forward pass (median of 5)\n", host_ms);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Place an encoder's or decoder's ops on npu-sim designs and price them with the cost model "
              "(modelled, nothing is run)");
  cmd->add_option("model", o->model, "A store name, a Hugging Face checkpoint directory or a baked file")
      ->required();
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_option("--tokens,-t", o->tokens, "Tokens per sequence")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--batch,-b", o->batch, "Sequences")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->add_option("--xclbin", o->xclbin,
                  "single: one xclbin holds every design (a design change = configure); "
                  "per-design: one xclbin per design (a design change = xclbin switch)")
      ->check(CLI::IsMember({"single", "per-design"}))
      ->capture_default_str();
  cmd->add_option("--weights", o->weights, "Decoders: weight precision on the NPU")
      ->check(CLI::IsMember({"int8", "bfp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option_function<int64_t>(
         "--context", [o](const int64_t& v) { o->context = v, o->context_given = true; },
         "Decoders: KV positions read per decode token (default 1024, or the model's maximum if smaller)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--measure-host", o->measure_host,
                "Also time the same forward pass on the host backend (measured)");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace xdna::cli

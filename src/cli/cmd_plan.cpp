// `npu plan MODEL [--tokens T] [--batch B] [--json] [--xclbin single|per-design]
// [--measure-host]`: where an encoder's ops would run on the NPU (npu-sim's designs) and what the
// cost model says they cost, without computing anything. Every NPU figure is modelled; with
// --measure-host the same forward pass is also timed on the host backend (measured).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "npu/planner.h"
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
};

void run_plan(const PlanCliOptions& o) {
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
      "plan", "Place an encoder's ops on npu-sim designs and price them with the cost model "
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
  cmd->add_flag("--measure-host", o->measure_host,
                "Also time the same forward pass on the host backend (measured)");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace xdna::cli

// `npu embed [--model M] [--json] [--max-length N] [--device host|npu-sim|npu] TEXT...`: sentence embeddings from the
// command line; with no TEXT, one input per line of stdin. Truncation is never silent: a warning
// per truncated input on stderr, and "truncated" in the JSON output.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/llm_options.h"  // DeviceBackends
#include "cli/server_client.h"
#include "pipeline/classify.h"
#include "pipeline/embed.h"

namespace xdna::cli {

namespace {

struct EmbedCliOptions {
  std::string model = "all-minilm-l6-v2";
  std::string store;
  bool json = false;
  size_t max_length = 0;
  size_t batch = 32;
  std::string device = "host";
  std::string fallback;  // --fallback ("" = config npu_fallback, else none)
  std::vector<std::string> texts;
  std::vector<std::string> images;  // --image: files for a vision model (in this process)
  ServerFlags server;
};

// One embedding vector as a text line: "%.7g" values separated by spaces.
void print_vector(const std::vector<float>& v) {
  std::string line;
  char buf[32];
  for (size_t d = 0; d < v.size(); ++d) {
    std::snprintf(buf, sizeof buf, d ? " %.7g" : "%.7g", v[d]);
    line += buf;
  }
  std::printf("%s\n", line.c_str());
}

// What the server cannot do for this run (empty: it can).
std::string in_process_reason(const EmbedCliOptions& o) {
  if (o.device != "host") return "--device " + o.device + " is a choice of this process";
  if (!o.store.empty()) return "--store names a store of this process";
  if (o.json) return "--json reports this process's op placement";
  if (o.max_length) return "--max-length is not part of the embeddings API";
  return "";
}

// The same text output as in-process, from POST /v1/embeddings in batches of --batch.
void embed_on_server(ServerClient& server, const EmbedCliOptions& o, const std::vector<std::string>& texts) {
  for (size_t b0 = 0; b0 < texts.size(); b0 += o.batch) {
    const size_t b1 = std::min(texts.size(), b0 + o.batch);
    httplib::Headers headers;
    const nlohmann::json reply = server.post_json(
        "/v1/embeddings",
        {{"model", o.model}, {"input", std::vector<std::string>(texts.begin() + b0, texts.begin() + b1)}}, &headers);
    const nlohmann::json& data = reply.at("data");
    if (!data.is_array() || data.size() != b1 - b0)
      throw std::runtime_error("embed: the server returned " + std::to_string(data.size()) + " embeddings for " +
                               std::to_string(b1 - b0) + " inputs");
    if (auto t = headers.find("X-Npu-Truncated"); t != headers.end())
      std::fprintf(stderr, "npu embed: warning: input(s) %s of batch at %zu truncated to the model's max length\n",
                   t->second.c_str(), b0);
    for (const nlohmann::json& item : data) print_vector(item.at("embedding").get<std::vector<float>>());
  }
}

// --image FILE...: one vector per image from a vision model (ImageModel::embed_images, unit length).
void run_embed_images(const EmbedCliOptions& o) {
  if (!o.texts.empty()) throw std::runtime_error("embed: give TEXT or --image, not both");
  std::vector<Image> images;
  for (const std::string& path : o.images) images.push_back(load_image(path));
  const ImageModel model = ImageModel::load(o.model, resolve_store(o.store));
  for (const std::string& note : model.notes()) std::fprintf(stderr, "npu embed: note: %s\n", note.c_str());
  DeviceBackends devices;
  ImageRunOptions ro;
  ro.backends = devices.list(o.device, o.fallback);
  ro.batch = o.batch;
  RunReport report;
  const std::vector<std::vector<float>> vectors = model.embed_images(images, /*normalize=*/true, ro, &report);
  devices.mark(report);
  if (o.device != "host") std::fprintf(stderr, "%s", devices.placement_text().c_str());
  if (!o.json) {
    for (const std::vector<float>& v : vectors) print_vector(v);
    return;
  }
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"index", i}, {"image", o.images[i]}, {"embedding", vectors[i]}});
  std::printf("%s\n", nlohmann::json({{"model", model.name()},
                                      {"path", model.path()},
                                      {"family", model.network().family()},
                                      {"dimensions", model.dimensions()},
                                      {"pooling", model.network().pooling()},
                                      {"normalized", true},
                                      {"notes", model.notes()},
                                      {"data", data},
                                      {"device", o.device},
                                      {"run", run_summary_json(report)},
                                      {"placement", devices.placement_json()}})
                           .dump()
                           .c_str());
}

void run_embed(const EmbedCliOptions& o) {
  if (!o.images.empty()) return run_embed_images(o);
  std::vector<std::string> texts = o.texts;
  if (texts.empty()) {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      texts.push_back(line);
    }
    if (texts.empty()) throw std::runtime_error("embed: no TEXT arguments and nothing on stdin");
  }
  if (std::optional<ServerClient> server = choose_server("embed", o.server, o.model, in_process_reason(o)))
    return embed_on_server(*server, o, texts);
  const EmbeddingModel model = EmbeddingModel::load(o.model, resolve_store(o.store));
  EmbedOptions eo;
  eo.max_length = o.max_length;
  // Where ops run: host only; npu-sim then host (modelled NPU); npu then host (real device).
  DeviceBackends devices;
  eo.backends = devices.list(o.device, o.fallback);

  nlohmann::json data = nlohmann::json::array();
  RunReport all;
  size_t prompt_tokens = 0;
  for (size_t b0 = 0; b0 < texts.size(); b0 += o.batch) {
    const size_t b1 = std::min(texts.size(), b0 + o.batch);
    EmbedResult r = model.embed({texts.begin() + b0, texts.begin() + b1}, eo);
    for (size_t i = b0; i < b1; ++i) {
      const EmbeddingItem& it = r.items[i - b0];
      prompt_tokens += it.tokens;
      if (it.truncated)
        std::fprintf(stderr, "npu embed: warning: input %zu truncated from %zu to %zu tokens\n", i,
                     it.original_tokens, it.tokens);
      if (o.json) {
        data.push_back({{"index", i},
                        {"embedding", it.vector},
                        {"tokens", it.tokens},
                        {"original_tokens", it.original_tokens},
                        {"truncated", it.truncated}});
      } else {
        print_vector(it.vector);
      }
    }
    all.ops.insert(all.ops.end(), r.report.ops.begin(), r.report.ops.end());
  }
  devices.mark(all);  // a device fallback: every op is one
  if (devices.used == "npu-sim" && !o.json)  // stdout stays embeddings only
    std::fprintf(stderr, "%s%s", all.summary().c_str(), devices.sim.cost().text().c_str());
  if (o.device != "host") std::fprintf(stderr, "%s", devices.placement_text().c_str());
  if (o.json) {
    nlohmann::json out = {
        {"model", model.name()},
        {"path", model.path()},
        {"family", model.spec().family},
        {"dimensions", model.dimensions()},
        {"pooling", pooling_name(model.head().pooling)},
        {"normalized", model.head().normalize},
        {"max_length", o.max_length ? o.max_length : model.max_length()},
        {"data", data},
        {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}},
        {"device", o.device},
        {"run", run_summary_json(all)},
        {"placement", devices.placement_json()},
    };
    if (devices.used == "npu-sim") {
      out["npu_sim"] = devices.sim.cost().to_json();
      out["npu_sim"]["fallback_reasons"] = devices.sim.refusals();
    }
    std::printf("%s\n", out.dump().c_str());
  }
}

}  // namespace

void add_embed_command(CLI::App& app) {
  auto o = std::make_shared<EmbedCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Sentence embeddings of TEXT arguments, or of each stdin line when none are given");
  cmd->add_option("--model,-m", o->model,
                  "Model: a store name, a Hugging Face checkpoint directory or a baked file")
      ->capture_default_str();
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_flag("--json", o->json,
                "JSON output: embeddings, token counts, truncation, where the ops ran");
  cmd->add_option("--max-length", o->max_length,
                  "Tokens per input, special tokens included (default: the model's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", o->batch, "Inputs per forward pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_device_options(cmd, o->device, o->fallback);
  add_server_options(cmd, o->server);
  cmd->add_option("--image", o->images,
                  "Image files to embed with a vision model (--model: a ViT / DINOv2 directory or store name)");
  cmd->add_option("text", o->texts, "Texts to embed (default: lines of stdin)");
  cmd->callback([o] { run_embed(*o); });
}

}  // namespace xdna::cli

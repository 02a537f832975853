// `npu serve`: the OpenAI- and Ollama-compatible HTTP server (src/serve/server.h), loopback by
// default. Flags: docs/cli.md; every flag also has a config-file key (src/cli/config.h).
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/config.h"
#include "host/kv_cache.h"
#include "serve/server.h"

namespace xdna::cli {

namespace {

struct ServeOptions {
  std::string host, store, api_key, max_memory, max_body, max_audio, kv_type;
  int port = -1;  // -1: not given on the command line
  int max_queue = -1, max_batch = -1;
  double request_timeout_s = -1;
  std::vector<std::string> preload;
  bool quiet = false;
};

}  // namespace

// "8GiB", "512M", "1.5g", "1048576": bytes. Throws std::invalid_argument naming the text.
uint64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + text + "' is not a size (examples: 8GiB, 512MiB, 1048576)");
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb") scale = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb") scale = 1024.0 * 1024 * 1024;
  if (scale == 0 || !(value > 0) || value * scale > 1e18)
    throw std::invalid_argument("'" + text + "' is not a size (examples: 8GiB, 512MiB, 1048576)");
  return static_cast<uint64_t>(value * scale);
}

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI- and Ollama-compatible HTTP API (Ctrl-C stops it)");
  auto o = std::make_shared<ServeOptions>();
  cmd->add_option("--host", o->host, "Address to bind (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->port, "TCP port (default 11435; 0 picks a free one)")->check(CLI::Range(0, 65535));
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on every endpoint");
  cmd->add_option("--max-memory", o->max_memory,
                  "Memory for resident models, e.g. 8GiB (least recently used evicted past it; default 8GiB)");
  cmd->add_option("--max-queue", o->max_queue, "Requests that may wait per model before 429 (default 16)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--max-batch", o->max_batch, "LLM sequences decoded together per model (default 4)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--request-timeout", o->request_timeout_s,
                  "Seconds a request may wait for its model and run (default 600)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-body", o->max_body, "Largest JSON request body, e.g. 16MiB (default 16MiB)");
  cmd->add_option("--max-audio", o->max_audio, "Largest audio upload, e.g. 25MiB (default 25MiB)");
  cmd->add_option("--kv-type", o->kv_type,
                  "LLM KV cache element type: f32, f16 or bf16 (default: config kv_type, else f32; f16/bf16 "
                  "halve the cache's memory)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--preload", o->preload, "Load these store models before listening (repeatable)");
  cmd->add_flag("--quiet", o->quiet, "No request log lines on stderr");
  cmd->callback([o] {
    const Config& cfg = global_config();
    serve::ServerOptions opts;
    opts.host = !o->host.empty() ? o->host : cfg.host.value_or("127.0.0.1");
    opts.port = o->port >= 0 ? o->port : cfg.port.value_or(11435);
    opts.store_dir = resolve_store(o->store);
    opts.api_key = !o->api_key.empty() ? o->api_key : cfg.api_key.value_or("");
    try {
      // flag > config file > built-in default
      const auto size = [](const std::string& flag, const std::optional<std::string>& config, uint64_t& out) {
        if (!flag.empty()) out = parse_byte_size(flag);
        else if (config) out = parse_byte_size(*config);
      };
      size(o->max_memory, cfg.max_memory, opts.model_budget_bytes);
      size(o->max_body, cfg.max_body, opts.max_body_bytes);
      size(o->max_audio, cfg.max_audio, opts.max_audio_bytes);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(std::string("npu serve: ") + e.what());
    }
    opts.max_queue = o->max_queue >= 0 ? o->max_queue : cfg.max_queue.value_or(opts.max_queue);
    opts.max_batch = o->max_batch >= 1 ? o->max_batch : cfg.max_batch.value_or(opts.max_batch);
    opts.request_timeout_s = o->request_timeout_s > 0 ? o->request_timeout_s : cfg.request_timeout.value_or(opts.request_timeout_s);
    opts.preload = o->preload;
    opts.log_requests = !o->quiet;
    serve::Server server(opts);
    serve::add_all_routes(server);
    if (const auto kv = resolve_kv_type(o->kv_type)) server.models().set_llm_kv_dtype(host::kv_dtype_from_name(*kv));
    for (const std::string& name : opts.preload) {
      bool found = false;
      try {
        found = server.models().load(name);
      } catch (const std::exception& e) {  // too large for --max-memory, or unreadable files
        throw std::runtime_error("npu serve: --preload " + name + ": " + e.what());
      }
      if (!found)
        throw std::runtime_error("npu serve: --preload " + name + ": no such model in the store " +
                                 server.store().root() + " (`npu model ls` lists it, `npu model pull` adds to it)");
      std::printf("npu serve: preloaded %s\n", name.c_str());
    }
    const int port = server.bind();
    std::printf("npu serve: listening on http://%s:%d (%s; store %s, %zu models)\n", opts.host.c_str(), port,
                npu_summary(server.npu()).c_str(), server.store().root().c_str(), server.store().list().size());
    std::fflush(stdout);
    serve::run_until_signal(server);
    std::printf("npu serve: stopped\n");
  });
}

}  // namespace xdna::cli

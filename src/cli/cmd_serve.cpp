// `npu serve`: the OpenAI-compatible HTTP server (src/serve/server.h), loopback by default.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/config.h"
#include "serve/server.h"

namespace xdna::cli {

namespace {

struct ServeOptions {
  std::string host, store;
  int port = -1;  // -1: not given on the command line
};

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API (Ctrl-C stops it)");
  auto o = std::make_shared<ServeOptions>();
  cmd->add_option("--host", o->host, "Address to bind (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->port, "TCP port (default 11435; 0 picks a free one)")->check(CLI::Range(0, 65535));
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->callback([o] {
    const Config& cfg = global_config();
    serve::ServerOptions opts;
    opts.host = !o->host.empty() ? o->host : cfg.host.value_or("127.0.0.1");
    opts.port = o->port >= 0 ? o->port : cfg.port.value_or(11435);
    opts.store_dir = resolve_store(o->store);
    serve::Server server(opts);
    serve::add_all_routes(server);
    const int port = server.bind();
    std::printf("npu serve: listening on http://%s:%d (%s; store %s, %zu models)\n", opts.host.c_str(), port,
                npu_summary(server.npu()).c_str(), server.store().root().c_str(), server.store().list().size());
    std::fflush(stdout);
    serve::run_until_signal(server);
    std::printf("npu serve: stopped\n");
  });
}

}  // namespace xdna::cli

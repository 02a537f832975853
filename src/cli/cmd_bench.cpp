// PLACEHOLDER during development: replaced by the real command before landing.
#include "cli/commands.h"
namespace xdna::cli {
void add_bench_command(CLI::App& app) { app.add_subcommand("bench", "(not built yet)"); }
}  // namespace xdna::cli

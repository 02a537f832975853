// PLACEHOLDER during development: replaced by the real command before landing.
#include "cli/commands.h"
namespace xdna::cli {
void add_checkpoint_command(CLI::App& app) { app.add_subcommand("checkpoint", "(not built yet)"); }
}  // namespace xdna::cli

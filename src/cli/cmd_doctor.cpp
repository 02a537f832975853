// PLACEHOLDER during development: replaced by the real command before landing.
#include "cli/commands.h"
namespace xdna::cli {
void add_doctor_command(CLI::App& app) { app.add_subcommand("doctor", "(not built yet)"); }
}  // namespace xdna::cli

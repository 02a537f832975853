// `npu design ...`: NPU designs as files. `dump` prints a design's instruction stream (or a
// toolchain-built insts.bin) in readable form (cmd_design_dump.cpp); `emit` writes a design as
// input for the open toolchain and `package` turns the toolchain's outputs into the artifacts
// directory the device runtime loads (cmd_design_emit.cpp). Terms: docs/architecture.md.
#include "cli/commands.h"

namespace xdna::cli {

void add_design_command(CLI::App& app) {
  CLI::App* design = app.add_subcommand("design", "NPU designs: print instruction streams, emit toolchain input, "
                                                  "package compiled artifacts");
  design->require_subcommand(1);
  add_design_dump_command(*design);
  add_design_emit_command(*design);
}

}  // namespace xdna::cli

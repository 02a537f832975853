// `npu`: the engine's command-line entry point. Global options apply to every subcommand.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/cpu.h"
#include "core/parallel.h"

int main(int argc, char** argv) {
  CLI::App app{"xdna-engine: inference on the AMD XDNA2 NPU, with a fast host backend"};
  app.require_subcommand(1);
  int threads = 0;
  std::string isa;
  app.add_option("--threads", threads, "Host threads (default: one per core)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--isa", isa, "Lower the host instruction set (scalar, avx2, avx512)")
      ->check(CLI::IsMember({"scalar", "avx2", "avx512"}));
  app.set_version_flag("--version", "npu 0.1.0");

  xdna::cli::add_doctor_command(app);
  xdna::cli::add_bench_command(app);
  xdna::cli::add_checkpoint_command(app);
  xdna::cli::add_model_command(app);
  xdna::cli::add_serve_command(app);

  app.parse_complete_callback([&] {
    xdna::set_num_threads(threads);
    if (isa == "scalar") xdna::force_isa(xdna::Isa::Scalar);
    if (isa == "avx2") xdna::force_isa(xdna::Isa::Avx2);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// `npu`: the engine's command-line entry point. Global options apply to every subcommand.
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/config.h"
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
  std::string config_path;
  app.add_option("--config", config_path,
                 "JSON config file (default: $XDG_CONFIG_HOME/xdna-engine/config.json if present)");
  app.set_version_flag("--version", std::string("npu ") + XDNA_VERSION);

  xdna::cli::add_doctor_command(app);
  xdna::cli::add_bench_command(app);
  xdna::cli::add_checkpoint_command(app);
  xdna::cli::add_model_command(app);
  xdna::cli::add_serve_command(app);
  xdna::cli::add_embed_command(app);
  xdna::cli::add_plan_command(app);
  xdna::cli::add_generate_command(app);
  xdna::cli::add_chat_command(app);
  xdna::cli::add_perplexity_command(app);
  xdna::cli::add_transcribe_command(app);
  xdna::cli::add_upscale_command(app);
  xdna::cli::add_classify_command(app);
  xdna::cli::add_design_command(app);

  app.parse_complete_callback([&] {
    xdna::cli::set_global_config(xdna::cli::load_config(config_path));  // flags override it
    if (app.count("--threads") == 0) threads = xdna::cli::global_config().threads.value_or(0);
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

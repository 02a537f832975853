// Each `npu` subcommand lives in its own cmd_*.cpp and registers itself on the app here.
#pragma once
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace xdna::cli {

void add_doctor_command(CLI::App& app);      // cmd_doctor.cpp
void add_bench_command(CLI::App& app);       // cmd_bench.cpp
void add_bench_embed_command(CLI::App& bench);  // cmd_bench_embed.cpp, under `bench`
void add_bench_llm_command(CLI::App& bench);    // cmd_bench_llm.cpp, under `bench`
void add_bench_upscale_command(CLI::App& bench);  // cmd_bench_upscale.cpp, under `bench`
void add_checkpoint_command(CLI::App& app);  // cmd_checkpoint.cpp
void add_model_command(CLI::App& app);       // cmd_model.cpp
void add_serve_command(CLI::App& app);       // cmd_serve.cpp
void add_embed_command(CLI::App& app);       // cmd_embed.cpp
void add_plan_command(CLI::App& app);        // cmd_plan.cpp
void add_generate_command(CLI::App& app);    // cmd_generate.cpp
void add_chat_command(CLI::App& app);        // cmd_chat.cpp
void add_perplexity_command(CLI::App& app);  // cmd_perplexity.cpp
void add_transcribe_command(CLI::App& app);  // cmd_transcribe.cpp
void add_upscale_command(CLI::App& app);     // cmd_upscale.cpp
void add_classify_command(CLI::App& app);    // cmd_classify.cpp
void add_design_command(CLI::App& app);      // cmd_design.cpp
void add_design_dump_command(CLI::App& design);  // cmd_design_dump.cpp, under `design`
void add_design_emit_command(CLI::App& design);  // cmd_design_emit.cpp, under `design` (emit, package)

// "8GiB", "512M", "1048576" -> bytes (cmd_serve.cpp). Throws std::invalid_argument naming the text.
uint64_t parse_byte_size(const std::string& text);

}  // namespace xdna::cli

// `npu design emit`: writes designs as IRON input for the open toolchain (one directory per
// design: design.py, design.json, Makefile). Input: a design JSON file, or a family with its
// shape. `npu design package`: copies what the toolchain built (design.json, <name>.xclbin,
// insts.bin per design directory) into the artifacts layout and writes manifest.json.
// docs/npu-toolchain.md.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "cli/commands.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/artifacts/manifest.h"
#include "npu/design_families.h"

namespace xdna::cli {

namespace {

namespace fs = std::filesystem;

struct EmitOptions {
  std::string design_json, out, family, dtype = "bf16";
  int64_t n = 0, k = 0, m = 0, rows = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0,
          intermediate = 0, vocab = 0, context = 1;
  int columns = 8;
};

npu::Design make_design(const EmitOptions& o) {
  if (!o.design_json.empty()) return npu::load_design(o.design_json);
  const auto dt = dtype_from_name(o.dtype);
  if (!dt) throw std::invalid_argument("unknown --dtype '" + o.dtype + "'");
  const std::string& f = o.family;
  if (f == "gemv") return npu::gemv_design(*dt, o.n, o.k, o.columns);
  if (f == "gemm") return npu::gemm_design(*dt, o.m, o.k, o.n, o.columns, std::min(4, o.columns));  // rows <= columns
  if (f == "rmsnorm") return npu::norm_design(npu::NormKind::RMS, o.rows, o.hidden, o.columns);
  if (f == "lm_head") return npu::lm_head_design(*dt, o.vocab, o.hidden, o.columns);
  if (f == "decode_layer") {
    npu::DecodeLayerShape s;
    s.hidden = o.hidden, s.heads = o.heads, s.kv_heads = o.kv_heads, s.head_dim = o.head_dim;
    s.intermediate = o.intermediate, s.context = o.context;
    return npu::decode_layer_design(*dt, s, o.columns);
  }
  throw std::invalid_argument("--family '" + f + "': expected gemv, gemm, rmsnorm, lm_head or decode_layer");
}

void run_emit(const EmitOptions& o) {
  if (o.design_json.empty() == o.family.empty())
    throw std::invalid_argument("design emit: give either DESIGN.json or --family");
  const npu::Design d = make_design(o);
  npu::validate_design(d);
  const std::string dir = (fs::path(o.out) / d.name).string();
  for (const std::string& p : npu::emit_design_dir(d, dir)) std::cout << p << "\n";
  const auto sources = npu::kernel_sources(d);
  std::cout << "kernel sources:";
  for (const std::string& k : sources) std::cout << " " << k;
  std::cout << (sources.empty() ? " none\n" : " (npu: needs hardware and the toolchain, unverified here)\n");
  const auto missing = npu::missing_kernels(d);
  std::cout << "missing kernels:";
  for (const std::string& m : missing) std::cout << " " << m;
  std::cout << (missing.empty() ? " none\n" : "\n");
}

void run_package(const std::string& from, const std::string& to, const std::string& toolchain) {
  if (!fs::is_directory(from)) throw std::invalid_argument("design package: --from " + from + " is not a directory");
  npu::artifacts::Manifest m;
  m.toolchain = toolchain;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_directory() && fs::exists(e.path() / "design.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) throw std::invalid_argument("design package: no design directories (with design.json) in " + from);
  std::string missing;
  for (const fs::path& dir : dirs) {
    const npu::Design d = npu::load_design((dir / "design.json").string());
    for (const std::string& f : {d.name + ".xclbin", std::string("insts.bin")})
      if (!fs::is_regular_file(dir / f)) missing += "\n  " + (dir / f).string();
  }
  if (!missing.empty()) throw std::runtime_error("design package: toolchain outputs missing (run make in each):" + missing);
  fs::create_directories(to);
  for (const fs::path& dir : dirs) {
    const npu::Design d = npu::load_design((dir / "design.json").string());
    const fs::path out = fs::path(to) / d.name;
    fs::create_directories(out);
    for (const std::string& f : {std::string("design.json"), d.name + ".xclbin", std::string("insts.bin")})
      fs::copy_file(dir / f, out / f, fs::copy_options::overwrite_existing);
    npu::artifacts::Entry e;
    e.design = d.name;
    e.family = d.family;
    e.params = d.params;
    e.kernel = "MLIR_AIE";  // aiecc's default xclbin kernel (CU) name
    e.xclbin = d.name + "/" + d.name + ".xclbin";
    e.insts = d.name + "/insts.bin";
    m.designs.push_back(e);
    // The kernel sources the design's cores were built from (aie_kernels/ of this repository).
    std::cout << d.name << ": kernel sources:";
    const auto sources = npu::kernel_sources(d);
    for (const std::string& k : sources) std::cout << " " << k;
    for (const std::string& k : npu::missing_kernels(d)) std::cout << " " << k << " (not written)";
    std::cout << (sources.empty() && npu::missing_kernels(d).empty() ? " mlir-aie library only\n" : "\n");
  }
  npu::artifacts::save_manifest(m, to);
  const auto loaded = npu::artifacts::load_manifest(to);  // what the runtime will do
  std::cout << "packaged " << loaded.designs.size() << " design(s) into " << loaded.dir << "\n";
}

}  // namespace

void add_design_emit_command(CLI::App& design) {
  auto o = std::make_shared<EmitOptions>();
  CLI::App* emit = design.add_subcommand("emit", "Write designs as IRON (mlir-aie) input for the open toolchain");
  emit->add_option("design", o->design_json, "Design JSON file (or use --family)");
  emit->add_option("--out", o->out, "Output directory (one subdirectory per design)")->required();
  emit->add_option("--family", o->family, "Generate: gemv, gemm, rmsnorm, lm_head, decode_layer");
  emit->add_option("--dtype", o->dtype, "bf16, bfp16 or i8");
  emit->add_option("--n", o->n, "gemv/gemm: output size N");
  emit->add_option("--k", o->k, "gemv/gemm: reduction size K");
  emit->add_option("--m", o->m, "gemm: rows M");
  emit->add_option("--rows", o->rows, "rmsnorm: rows");
  emit->add_option("--hidden", o->hidden, "rmsnorm/lm_head/decode_layer: hidden size");
  emit->add_option("--heads", o->heads, "decode_layer: query heads");
  emit->add_option("--kv-heads", o->kv_heads, "decode_layer: KV heads");
  emit->add_option("--head-dim", o->head_dim, "decode_layer: head dimension");
  emit->add_option("--intermediate", o->intermediate, "decode_layer: MLP size");
  emit->add_option("--context", o->context, "decode_layer: KV positions");
  emit->add_option("--vocab", o->vocab, "lm_head: vocabulary size");
  emit->add_option("--columns", o->columns, "Array columns (1..8)");
  emit->callback([o] { run_emit(*o); });

  auto from = std::make_shared<std::string>(), to = std::make_shared<std::string>();
  auto toolchain = std::make_shared<std::string>("mlir-aie 1.4.1 + llvm-aie 21.0.0.2026080301+c9c5ecb7");
  CLI::App* pkg = design.add_subcommand("package", "Copy toolchain outputs into an artifacts directory with a manifest");
  pkg->add_option("--from", *from, "Build directory: one emitted design directory per design")->required();
  pkg->add_option("--to", *to, "Artifacts directory (default: " + std::string("$XDG_DATA_HOME/xdna-engine/npu-artifacts") + ")");
  pkg->add_option("--toolchain", *toolchain, "Toolchain recorded in the manifest");
  pkg->callback([from, to, toolchain] {
    run_package(*from, to->empty() ? npu::artifacts::default_artifacts_dir() : *to, *toolchain);
  });
}

}  // namespace xdna::cli

// IRON emitter: one design -> a Python program for mlir-aie's IRON API (pinned release:
// docs/npu-toolchain.md). Everything is placed explicitly at the design's tiles; FIFO objects
// are typed as bytes (np.uint8 x elem_bytes) so every depth, size and link offset is the
// design's own number; host buffers are 32-bit words when the design's patterns are, so the
// taps carry the design's offsets, sizes and strides unchanged.
// This file: design.py's frame, FIFOs and runtime sequence, the kernel table and the Makefile;
// the core workers' bodies: iron_worker_bodies.cpp.
#include "npu/artifacts/iron_emitter.h"

#include "npu/design_families.h"
#include "npu/artifacts/iron_emitter_internal.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace xdna::npu {

using namespace iron;

namespace {

// Where each kernel the families use comes from. `library` = the pinned mlir-aie kernel library
// (aie_kernels/aie2p/<source>, function `function`); otherwise our own source in the
// repository's aie_kernels/ (`written`), or one not yet written.
struct KernelSource {
  std::string function, source;
  bool library = false;
  std::string note;
  std::string zero;  // library function clearing the output tile before accumulating into it
  bool written = false;
  // Runtime scalars our source takes after the design's own (name order): f32 model parameters
  // as int32 bit patterns, defined once at the top of design.py so one build serves every model.
  std::vector<std::pair<std::string, std::string>> runtime;  // scalar name, design.py constant
  // The design's scalars in the prototype's order when it is not their name order (empty: name order).
  std::vector<std::string> scalar_order = {};
};

// The design.py constants the runtime scalars name (set them to the model's values).
struct PyConstant {
  const char* name;
  float value;
  const char* what;
  bool f32 = true;  // false: a plain int32 flag
};
constexpr PyConstant kPyConstants[] = {
    {"RMS_EPS_BITS", 1e-6f, "RMSNorm epsilon"},
    {"RMS_OFFSET_BITS", 0.0f, "RMSNorm gamma offset (1 for Gemma's stored gamma - 1)"},
    {"LN_EPS_BITS", 1e-5f, "LayerNorm epsilon"},
    {"ROPE_INTERLEAVED", 0.0f, "RoPE pairs: 0 half-split (i, i + D/2), 1 interleaved (2i, 2i + 1)", false},
    {"DECODE_ATTN_SCALE_BITS", 0.0f, "decode attention score scale (0: 1 / sqrt(head_dim))"},
};

}  // namespace

// The kernels with a source in aie_kernels/ (aie_kernels/README.md lists them;
// tests/npu/test_aie_kernel_sources.cpp checks this list against the directory).
const std::set<std::string>& written_kernels() {
  static const std::set<std::string> written = {
      "gemv_bf16", "gemv_bfp16", "gemv_int8", "rmsnorm_bf16", "layernorm_bf16", "softmax_bf16", "eltwise_add_bf16",
      "eltwise_mul_bf16", "eltwise_gelu_bf16", "eltwise_exp_bf16", "eltwise_scale_bf16", "eltwise_silu_bf16",
      "rope_bf16", "attention_partial_bf16", "attention_encoder_bf16", "mlp_fused_bf16", "conv2d_bf16",
      "qkv_rope_bf16", "attention_decode_bf16", "lm_head_bf16", "decode_layer_bf16", "decode_layer_int8",
      "decode_layer_int8_kv8", "decode_layer_int8_kv4", "lm_head_int8", "matmul_bfp16"};
  return written;
}

namespace {

std::optional<KernelSource> kernel_source(const std::string& name) {
  static const std::map<std::string, KernelSource> table = {
      // mm.cc builds matmul_<in>_<out> for the -DDIM_M/K/N tile it is compiled with.
      {"matmul_bf16", {"matmul_bf16_bf16", "aie_kernels/aie2p/mm.cc", true, "-DDIM_M/K/N; no scalar args", "zero_bf16", false, {}}},
      {"matmul_int8", {"matmul_i8_i8", "aie_kernels/aie2p/mm.cc", true, "-DDIM_M/K/N; no scalar args", "zero_i8", false, {}}},
  };
  static const std::set<std::string> ours = {
      "gemv_bf16", "gemv_bfp16", "gemv_int8", "matmul_bfp16",
      "eltwise_add_bf16", "eltwise_mul_bf16", "eltwise_gelu_bf16", "eltwise_exp_bf16", "eltwise_scale_bf16",
      "eltwise_silu_bf16",
      "rmsnorm_bf16", "layernorm_bf16", "softmax_bf16",
      "mlp_fused_bf16", "mlp_fused_bfp16", "mlp_fused_int8",
      "qkv_rope_bf16", "qkv_rope_bfp16", "qkv_rope_int8",
      "attention_decode_bf16",
      "decode_layer_bf16", "decode_layer_bfp16", "decode_layer_int8", "decode_layer_int8_kv8", "decode_layer_int8_kv4",
      "lm_head_bf16", "lm_head_bfp16", "lm_head_int8",
      "conv2d_bf16", "attention_encoder_bf16"};
  if (auto it = table.find(name); it != table.end()) return it->second;
  if (ours.count(name)) {
    KernelSource k{name, "aie_kernels/" + name + ".cc", false, "", "", written_kernels().count(name) > 0, {}};
    if (name == "rmsnorm_bf16") k.runtime = {{"eps_bits", "RMS_EPS_BITS"}, {"offset_bits", "RMS_OFFSET_BITS"}};
    if (name == "layernorm_bf16") k.runtime = {{"eps_bits", "LN_EPS_BITS"}};
    // The fused stage kernels: the model's parameters after the design's scalars (their sources'
    // header comments list them).
    const std::pair<std::string, std::string> eps{"eps_bits", "RMS_EPS_BITS"}, off{"offset_bits", "RMS_OFFSET_BITS"},
        inter{"interleaved", "ROPE_INTERLEAVED"}, scale{"scale_bits", "DECODE_ATTN_SCALE_BITS"};
    if (name == "qkv_rope_bf16") k.runtime = {eps, off, inter};
    if (name == "lm_head_bf16" || name == "lm_head_int8") k.runtime = {eps, off};
    if (name == "attention_decode_bf16") k.runtime = {scale};
    if (name == "decode_layer_bf16" || name == "decode_layer_int8" || name == "decode_layer_int8_kv8" ||
        name == "decode_layer_int8_kv4")
      k.runtime = {eps, off, inter, scale};
    // A conv core receives its weights and epilogue constants as one object (one DMA channel):
    // the packed entry point finds the epilogue behind the weights.
    if (name == "conv2d_bf16") {
      k.function = "conv2d_bf16_packed";
      k.scalar_order = {"rows", "cols", "in_cols", "c_in", "ch", "kernel", "stride", "depthwise"};
    }
    return k;
  }
  return std::nullopt;
}

// The int32 scalars a core passes after its FIFO objects: the design's kernel args in the
// prototype's order (library kernels take none: their sizes are compile-time).
std::vector<std::pair<std::string, int64_t>> scalar_args(const std::string& design, const Kernel& k,
                                                         const KernelSource& src) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (src.library) return out;
  if (src.scalar_order.empty()) return {k.args.begin(), k.args.end()};
  if (src.scalar_order.size() != k.args.size())
    throw std::invalid_argument("emit_iron: design " + design + ": kernel '" + k.name + "' has " +
                                std::to_string(k.args.size()) + " args, its entry point takes " +
                                std::to_string(src.scalar_order.size()));
  for (const std::string& name : src.scalar_order) {
    auto it = k.args.find(name);
    if (it == k.args.end())
      throw std::invalid_argument("emit_iron: design " + design + ": kernel '" + k.name + "' lacks arg " + name);
    out.push_back(*it);
  }
  return out;
}

std::string tile_py(TileCoord t) { return "Tile(" + std::to_string(t.col) + ", " + std::to_string(t.row) + ")"; }

bool kernel_args_fit_int32(const Kernel& k) {
  for (const auto& [name, v] : k.args)
    if (v < INT32_MIN || v > INT32_MAX) return false;
  return true;
}

std::vector<const Kernel*> kernels_of(const Design& d) {
  std::vector<const Kernel*> ks;
  std::set<std::string> seen;
  for (const TileUse& t : d.tiles)
    if (t.has_kernel && seen.insert(t.kernel.name).second) ks.push_back(&t.kernel);
  return ks;
}

}  // namespace

namespace iron {

int64_t f32_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::string py_ident(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  // A Python keyword (the conv designs' host arg "in") or a name design.py itself binds.
  static const std::set<std::string> taken = {
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
      "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
      "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
      "np", "rt", "tg", "program", "module", "b", "b0", "b1", "q_pos0", "m", "l", "o", "scores"};
  if (taken.count(out)) out += "_";
  return out;
}

// A core's Worker line (stack size from its "stack" buffer; its other L1 buffers noted); returns
// the worker's variable name.
std::string emit_worker(std::ostream& o, const TileUse& t, const std::string& fn, const std::string& args,
                        const char* buffers_are) {
  const std::string w = "w_" + std::to_string(t.at.col) + "_" + std::to_string(t.at.row);
  o << w << " = Worker(" << fn << ", [" << args << "], placement=" << tile_py(t.at);
  for (const Buffer& b : t.buffers)
    if (b.name == "stack") o << ", stack_size=" << b.bytes;
  o << ")\n";
  for (const Buffer& b : t.buffers)
    if (b.name != "stack") o << "# resident in L1: " << b.name << " " << b.bytes << " bytes (" << buffers_are << ")\n";
  o << "\n";
  return w;
}
std::string bytes_type(int64_t n) { return "np.ndarray[(" + std::to_string(n) + ",), np.dtype[np.uint8]]"; }

}  // namespace iron

std::string emit_iron(const Design& d) {
  // Kernel mapping first: an unmapped kernel is an error, before any output.
  for (const Kernel* k : kernels_of(d))
    if (!kernel_source(k->name))
      throw std::invalid_argument("emit_iron: design " + d.name + ": kernel '" + k->name +
                                  "' has no IRON mapping (iron_emitter.cpp kernel_source)");
  for (const TileUse& t : d.tiles)
    if (t.has_kernel && !kernel_args_fit_int32(t.kernel))
      throw std::invalid_argument("emit_iron: design " + d.name + ": kernel '" + t.kernel.name +
                                  "' has an argument outside int32");

  std::ostringstream o;
  o << "# IRON program for design " << d.name << " (family " << d.family << "), emitted by xdna-engine.\n"
    << "# Toolchain: mlir-aie (IRON) and Peano as pinned in docs/npu-toolchain.md.\n"
    << "# FIFO objects are bytes (np.uint8); host buffers are 32-bit words; every tile is placed\n"
    << "# explicitly at the design's coordinates.\n"
    << "import numpy as np\n\n"
    << "from aie.iron import Kernel, LocalBuffer, ObjectFifo, Program, Runtime, Worker\n"
    << "from aie.iron.controlflow import range_\n"
    << "from aie.iron.device import NPU2, Tile\n"
    << "from aie.iron.placers import SequentialPlacer\n"
    << "from aie.helpers.taplib import TensorAccessPattern\n\n";

  // The f32 model parameters the kernels take at run time (aie_kernels/README.md), as int32 bits.
  std::set<std::string> constants;
  for (const Kernel* k : kernels_of(d))
    // A named copy: a range-for over a member of the temporary optional would read freed memory.
    if (const std::optional<KernelSource> src = kernel_source(k->name))
      for (const auto& [name, constant] : src->runtime) constants.insert(constant);
  if (!constants.empty()) o << "# Model parameters passed to the kernels at run time (f32 bit patterns as int32)\n";
  for (const PyConstant& c : kPyConstants) {
    if (!constants.count(c.name)) continue;
    if (c.f32)
      o << c.name << " = " << f32_bits(c.value) << "  # f32 " << c.value << ": " << c.what << "\n";
    else
      o << c.name << " = " << int64_t(c.value) << "  # " << c.what << "\n";
  }
  if (!constants.empty()) o << "\n";

  // Object FIFOs: roots are created directly; link ends are created by the link (split/forward
  // from their input's consumer handle, join from their output's producer handle).
  std::map<std::string, std::string> var;  // fifo name -> python variable
  std::map<std::string, const FifoLink*> created_by;
  auto link_kind = [](const FifoLink& l) {
    if (l.inputs.size() == 1 && l.outputs.size() == 1 && l.offsets.empty()) return 'f';
    if (l.inputs.size() == 1) return 's';
    if (l.outputs.size() == 1) return 'j';
    return '?';
  };
  for (const FifoLink& l : d.links) {
    const char kind = link_kind(l);
    if (kind == '?')
      throw std::invalid_argument("emit_iron: design " + d.name + ": a link with " + std::to_string(l.inputs.size()) +
                                  " inputs and " + std::to_string(l.outputs.size()) + " outputs is neither split nor join");
    for (const std::string& n : kind == 'j' ? l.inputs : l.outputs)
      if (!created_by.emplace(n, &l).second)
        throw std::invalid_argument("emit_iron: design " + d.name + ": FIFO " + n + " is made by two links");
  }
  o << "# Object FIFOs (name, depth, object bytes)\n";
  for (const ObjectFifo& f : d.fifos) {
    if (!d.find_fifo(f.name)) continue;
    var[f.name] = "of_" + py_ident(f.name);
    if (created_by.count(f.name)) continue;
    o << var[f.name] << " = ObjectFifo(" << bytes_type(f.elem_bytes) << ", depth=" << f.depth << ", name=\""
      << f.name << "\")";
    if (f.consumers.size() == 1 && f.consumers[0].channel == kSharedMemory) o << "  # shared memory";
    o << "\n";
  }
  o << "\n# Memtile links (split / join / forward) with the design's byte offsets\n";
  std::vector<bool> done(d.links.size(), false);
  std::set<std::string> made;
  for (const ObjectFifo& f : d.fifos)
    if (!created_by.count(f.name)) made.insert(f.name);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t i = 0; i < d.links.size(); ++i) {
      if (done[i]) continue;
      const FifoLink& l = d.links[i];
      const char kind = link_kind(l);
      const std::string& source = kind == 'j' ? l.outputs[0] : l.inputs[0];
      if (!made.count(source)) continue;
      const ObjectFifo* src = d.find_fifo(source);
      if (!src) throw std::invalid_argument("emit_iron: design " + d.name + ": link names unknown FIFO " + source);
      // The memtile: the link's source end there (consumer of an input / producer of an output).
      const TileCoord mem = kind == 'j' ? src->producer.tile : src->consumers.at(0).tile;
      const std::vector<std::string>& made_here = kind == 'j' ? l.inputs : l.outputs;
      std::vector<const ObjectFifo*> fs;
      for (const std::string& n : made_here) {
        const ObjectFifo* f = d.find_fifo(n);
        if (!f) throw std::invalid_argument("emit_iron: design " + d.name + ": link names unknown FIFO " + n);
        fs.push_back(f);
      }
      if (kind == 'f') {
        o << var[fs[0]->name] << " = " << var[source] << ".cons().forward(placement=" << tile_py(mem)
          << ", obj_type=" << bytes_type(fs[0]->elem_bytes) << ", depth=" << fs[0]->depth << ", name=\""
          << fs[0]->name << "\")\n";
      } else {
        std::string names, types, depths, offsets, vars;
        for (size_t k = 0; k < fs.size(); ++k) {
          const std::string sep = k ? ", " : "";
          names += sep + "\"" + fs[k]->name + "\"";
          types += sep + bytes_type(fs[k]->elem_bytes);
          depths += sep + std::to_string(fs[k]->depth);
          vars += sep + var[fs[k]->name];
        }
        if (l.offsets.size() != fs.size())
          throw std::invalid_argument("emit_iron: design " + d.name + ": link on " + source + " has " +
                                      std::to_string(l.offsets.size()) + " offsets for " +
                                      std::to_string(fs.size()) + " FIFOs");
        for (size_t k = 0; k < l.offsets.size(); ++k) offsets += (k ? ", " : "") + std::to_string(l.offsets[k]);
        o << vars << (fs.size() == 1 ? "," : "") << " = " << var[source]
          << (kind == 's' ? ".cons().split(" : ".prod().join(") << "\n    [" << offsets << "],\n    placement="
          << tile_py(mem) << ",\n    depths=[" << depths << "],\n    obj_types=[" << types << "],\n    names=["
          << names << "],\n)\n";
      }
      for (const ObjectFifo* f : fs) made.insert(f->name);
      done[i] = progress = true;
    }
  }
  for (size_t i = 0; i < d.links.size(); ++i)
    if (!done[i])
      throw std::invalid_argument("emit_iron: design " + d.name + ": memtile links form a cycle or name a FIFO no link or root makes");

  // Workers: one per core, explicit placement.
  o << "\n# Workers: one per core, each calls its kernel per object it consumes\n";
  std::vector<std::string> workers;
  std::map<std::string, std::vector<std::string>> signatures;  // kernel -> argument type lists
  std::set<std::string> zero_declared;
  bool encoder_declared = false;
  for (const TileUse& t : d.tiles) {
    if (!t.has_kernel) continue;
    if (t.kernel.name == "attention_encoder_bf16" && t.program.empty()) {
      workers.push_back(emit_encoder_attention_worker(o, d, t, var, encoder_declared));
      continue;
    }
    CoreIo io;
    for (const ObjectFifo& f : d.fifos) {
      for (const FifoEnd& e : f.consumers)
        if (e.tile == t.at) io.consumes.push_back(&f);
      if (f.producer.tile == t.at) io.produces.push_back(&f);
    }
    const std::string fn = "core_" + std::to_string(t.at.col) + "_" + std::to_string(t.at.row);
    if (!t.program.empty()) {
      // The core's own schedule: one Kernel handle per entry point it calls.
      const KernelSource src = *kernel_source(t.kernel.name);
      std::ostringstream body;
      const auto entries = emit_program_body(body, d.name, fn, t, io, src.runtime);
      std::string kernel_args;
      for (const auto& [entry, types] : entries) {
        const std::string v = "k_" + py_ident(entry);
        kernel_args += ", " + v;
        std::vector<std::string>& sigs = signatures[entry];
        if (!sigs.empty()) continue;
        sigs.push_back(types);
        o << "# kernel source: " << src.source << (src.written ? " (exports " : " (not yet written; exports ") << entry
          << (src.written ? "; npu: needs hardware and the toolchain, unverified)\n" : ")\n");
        o << v << " = Kernel(\"" << entry << "\", \"" << t.kernel.name << ".o\", [" << types << "])\n\n";
      }
      o << body.str();
      std::string args;
      for (const ObjectFifo* f : io.consumes) args += var[f->name] + ".cons(), ";
      for (const ObjectFifo* f : io.produces) args += var[f->name] + ".prod(), ";
      args.resize(args.size() - 2);
      workers.push_back(emit_worker(o, t, fn, args + kernel_args));
      continue;
    }
    // Kernel handles: one per call signature; a base function with several signatures gets
    // suffixed entry points (only unwritten kernels do: library kernels see one signature).
    const KernelSource src = *kernel_source(t.kernel.name);
    const size_t n_calls = call_count(io);
    std::vector<std::string> params;
    for (size_t i = 0; i < n_calls; ++i) params.push_back("kernel" + std::to_string(i));
    std::ostringstream body;
    const auto scalars = scalar_args(d.name, t.kernel, src);
    const std::vector<Call> calls =
        emit_worker_body(body, fn, io, params, scalars, src.zero.empty() ? "" : "zero", src.runtime);
    std::vector<std::string> kernel_vars;
    for (const Call& c : calls) {
      std::string types;
      for (const ObjectFifo* f : c.fifos) types += (types.empty() ? "" : ", ") + bytes_type(f->elem_bytes);
      for (size_t i = 0; i < scalars.size() + src.runtime.size() && !src.library; ++i)
        types += (types.empty() ? "" : ", ") + std::string("np.int32");
      std::vector<std::string>& sigs = signatures[t.kernel.name];
      size_t idx = std::find(sigs.begin(), sigs.end(), types) - sigs.begin();
      const std::string symbol = idx == 0 ? src.function : src.function + "_v" + std::to_string(idx);
      const std::string v = "k_" + py_ident(symbol);
      if (idx == sigs.size()) {
        sigs.push_back(types);
        if (src.library)
          o << "# kernel source: mlir-aie " << src.source << " (" << src.function << "; " << src.note << ")\n";
        else if (src.written)
          o << "# kernel source: " << src.source << " (exports " << symbol
            << "; npu: needs hardware and the toolchain, unverified)\n";
        else
          o << "# kernel source: " << src.source << " (not yet written; exports " << symbol << ")\n";
        o << (src.library ? "# compile-time args:" : "# scalar args:");
        for (const auto& [name, val] : src.library ? std::vector<std::pair<std::string, int64_t>>(
                                                         t.kernel.args.begin(), t.kernel.args.end())
                                                   : scalars)
          o << " " << name << "=" << val;
        for (const auto& [name, constant] : src.runtime) o << " " << name << "=" << constant;
        o << "\n" << v << " = Kernel(\"" << symbol << "\", \"" << t.kernel.name << ".o\", [" << types << "])\n\n";
      }
      kernel_vars.push_back(v);
    }
    if (!src.zero.empty()) {
      // The zero entry point clears one output object (the first FIFO this core produces).
      const std::string zv = "k_" + py_ident(src.zero);
      if (!zero_declared.count(zv) && !io.produces.empty()) {
        o << zv << " = Kernel(\"" << src.zero << "\", \"" << t.kernel.name << ".o\", ["
          << bytes_type(io.produces[0]->elem_bytes) << "])\n\n";
        zero_declared.insert(zv);
      }
      kernel_vars.push_back(zv);
    }
    o << body.str();
    std::string args;
    for (const ObjectFifo* f : io.consumes) args += var[f->name] + ".cons(), ";
    for (const ObjectFifo* f : io.produces) args += var[f->name] + ".prod(), ";
    for (const std::string& v : kernel_vars) args += v + ", ";
    args.resize(args.size() - 2);
    workers.push_back(emit_worker(o, t, fn, args));
  }

  // Runtime sequence.
  o << "# Runtime sequence: host buffers as 32-bit words\n";
  std::string arg_types;
  for (const HostArg& a : d.args) {
    if (a.bytes % 4 != 0)
      throw std::invalid_argument("emit_iron: design " + d.name + ": host arg " + a.name + " is " +
                                  std::to_string(a.bytes) + " bytes, not whole words");
    arg_types += "np.ndarray[(" + std::to_string(a.bytes / 4) + ",), np.dtype[np.int32]], ";
  }
  o << "rt = Runtime()\nwith rt.sequence(" << arg_types << ") as (";
  for (size_t i = 0; i < d.args.size(); ++i) o << py_ident(d.args[i].name) << ", ";
  o << "):\n    rt.start(" ;
  for (size_t i = 0; i < workers.size(); ++i) o << (i ? ", " : "") << workers[i];
  o << ")\n";
  // A Wait on a FIFO covers every transfer on it since its previous Wait: those get wait=True.
  // IRON awaits wait=True tasks when their task group finishes, so a Wait with transfers after it
  // (the task-queue limit in the fused designs) closes the current task group there.
  std::vector<bool> wait_after(d.sequence.size(), false);
  std::vector<bool> boundary(d.sequence.size(), false);
  size_t last_transfer = 0;
  for (size_t i = 0; i < d.sequence.size(); ++i)
    if (d.sequence[i].op != SeqOp::Wait) last_transfer = i;
  bool groups = false;
  for (size_t i = 0; i < d.sequence.size(); ++i) {
    if (d.sequence[i].op != SeqOp::Wait) continue;
    for (size_t j = i; j-- > 0;) {
      if (d.sequence[j].fifo != d.sequence[i].fifo) continue;
      if (d.sequence[j].op == SeqOp::Wait) break;
      wait_after[j] = true;
    }
    if (i < last_transfer) boundary[i] = groups = true;
  }
  if (groups) o << "    tg = rt.task_group()\n";
  for (size_t i = 0; i < d.sequence.size(); ++i) {
    const SeqStep& s = d.sequence[i];
    if (s.op == SeqOp::Wait) {
      o << "    # wait: " << s.fifo << "\n";
      if (boundary[i]) o << "    rt.finish_task_group(tg)\n    tg = rt.task_group()\n";
      continue;
    }
    const ObjectFifo* f = d.find_fifo(s.fifo);
    if (!f) throw std::invalid_argument("emit_iron: design " + d.name + ": sequence step names unknown FIFO " + s.fifo);
    if (s.arg < 0 || size_t(s.arg) >= d.args.size())
      throw std::invalid_argument("emit_iron: design " + d.name + ": sequence step on " + s.fifo + " names arg " +
                                  std::to_string(s.arg));
    const AccessPattern& p = s.pattern;
    if (p.elem_bytes != 4 || p.dims.size() > 3)
      throw std::invalid_argument("emit_iron: design " + d.name + ": step on " + s.fifo +
                                  " is not a <= 3-d pattern of 32-bit words");
    // TensorAccessPattern sizes/strides run outermost first; the repeat is a stride-0 dimension.
    std::vector<Dim> dims = p.dims;
    while (dims.size() < 3) dims.push_back({1, 0});
    std::string sizes = std::to_string(p.repeat), strides = "0";
    for (int k = 2; k >= 0; --k) {
      sizes += ", " + std::to_string(dims[size_t(k)].size);
      strides += ", " + std::to_string(dims[size_t(k)].size == 1 ? 0 : dims[size_t(k)].stride);
    }
    const TileCoord shim = s.op == SeqOp::Fill ? f->producer.tile : f->consumers.at(0).tile;
    const std::string& a = d.args[size_t(s.arg)].name;
    o << "    rt." << (s.op == SeqOp::Fill ? "fill(" : "drain(") << var[s.fifo] << (s.op == SeqOp::Fill ? ".prod()" : ".cons()")
      << ", " << py_ident(a) << ", TensorAccessPattern((" << d.args[size_t(s.arg)].bytes / 4 << ",), offset=" << p.offset
      << ", sizes=[" << sizes << "], strides=[" << strides << "]), placement=" << tile_py(shim)
      << (groups ? ", task_group=tg" : "") << (wait_after[i] ? ", wait=True" : "") << ")\n";
  }
  if (groups) o << "    rt.finish_task_group(tg)\n";
  o << "\nprogram = Program(NPU2(), rt)\n"
    << "module = program.resolve_program(SequentialPlacer())  # everything is placed; the placer only checks\n"
    << "print(module)\n";
  return o.str();
}

std::vector<std::string> missing_kernels(const Design& d) {
  std::vector<std::string> out;
  for (const Kernel* k : kernels_of(d)) {
    auto src = kernel_source(k->name);
    if (src && !src->library && !src->written) out.push_back(src->source);
  }
  return out;
}

std::vector<std::string> kernel_sources(const Design& d) {
  std::vector<std::string> out;
  for (const Kernel* k : kernels_of(d)) {
    auto src = kernel_source(k->name);
    if (src && src->written) out.push_back(src->source);
  }
  return out;
}

std::vector<std::string> emit_design_dir(const Design& d, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string py = emit_iron(d);
  fs::create_directories(dir);
  const std::string py_path = (fs::path(dir) / "design.py").string();
  const std::string json_path = (fs::path(dir) / "design.json").string();
  const std::string mk_path = (fs::path(dir) / "Makefile").string();
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw std::runtime_error("emit_design_dir: cannot write " + path);
  };
  write(py_path, py);
  save_design(d, json_path);

  std::ostringstream mk;
  std::string missing;
  for (const std::string& m : missing_kernels(d)) missing += " " + m;
  mk << "# Builds " << d.name << ".xclbin + insts.bin with the pinned open toolchain (docs/npu-toolchain.md).\n"
     << "# Needs: mlir_aie and llvm-aie (Peano) installed; MLIR_AIE_DIR = a checkout of the same mlir-aie tag\n"
     << "# (for aie_kernels/), PEANO_INSTALL_DIR = the llvm-aie package directory, XDNA_KERNELS =\n"
     << "# xdna-engine's aie_kernels/ directory (our kernel sources: npu, unverified here).\n"
     << "# missing kernels:" << (missing.empty() ? " none" : missing) << "\n"
     << "NAME := " << d.name << "\n"
     << "PEANO_INSTALL_DIR ?= $(shell python3 -c 'import os, llvm_aie; print(os.path.dirname(llvm_aie.__file__))' 2>/dev/null)\n"
     << "MLIR_AIE_DIR ?= $(HOME)/mlir-aie\n"
     << "XDNA_KERNELS ?= aie_kernels\n"
     << "PEANO_FLAGS := -O2 -std=c++20 --target=aie2p-none-unknown-elf -DNDEBUG -I$(MLIR_AIE_DIR)/aie_runtime_lib/AIE2P -I$(MLIR_AIE_DIR)/aie_kernels -I$(XDNA_KERNELS)\n\n"
     << "all: $(NAME).xclbin\n\n";
  std::string objs;
  for (const Kernel* k : kernels_of(d)) {
    const KernelSource src = *kernel_source(k->name);
    objs += " " + k->name + ".o";
    std::string defs;
    // mm.cc and matmul_bfp16.cc (its L1 accumulator) are built for the design's tile.
    if (src.source.find("mm.cc") != std::string::npos || k->name == "matmul_bfp16")
      defs = " -DDIM_M=" + std::to_string(k->args.count("m") ? k->args.at("m") : 0) + " -DDIM_K=" +
             std::to_string(k->args.count("k") ? k->args.at("k") : 0) + " -DDIM_N=" +
             std::to_string(k->args.count("n") ? k->args.at("n") : 0);
    mk << k->name << ".o: " << (src.library ? "$(MLIR_AIE_DIR)/" + src.source : "$(XDNA_KERNELS)/" + k->name + ".cc")
       << "\n\t$(PEANO_INSTALL_DIR)/bin/clang++ $(PEANO_FLAGS)" << defs << " -c $< -o $@\n\n";
  }
  mk << "aie.mlir: design.py\n\tpython3 design.py > $@\n\n"
     << "$(NAME).xclbin insts.bin: aie.mlir" << objs << "\n"
     << "\taiecc.py --no-aiesim --no-xchesscc --no-xbridge --peano $(PEANO_INSTALL_DIR) \\\n"
     << "\t  --aie-generate-xclbin --xclbin-name=$(NAME).xclbin \\\n"
     << "\t  --aie-generate-npu-insts --npu-insts-name=insts.bin aie.mlir\n\n"
     << "clean:\n\trm -rf aie.mlir *.o $(NAME).xclbin insts.bin aie.mlir.prj\n\n"
     << ".PHONY: all clean\n";
  write(mk_path, mk.str());
  return {py_path, json_path, mk_path};
}

}  // namespace xdna::npu

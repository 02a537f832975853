// Runs a fused design's core programs (design.h CoreStep) over the stage entry points of its
// kernel (aie_kernels/<kernel>.cc, kernels.h): every core acquires and releases its FIFO objects
// and calls its entry points in its program's order. It runs in phases: in each, every core runs
// until it waits for an exchange not yet given by every core (the cores of a phase on the engine's
// threads, core/parallel.h: they share nothing between exchanges); then the slices
// given join their rounds, side by side in (column, row) order as the memtile's join chain builds
// them, and the outputs are appended in core order, so the bytes do not depend on the threads. This is the design data
// driving the kernel sources directly, and it is how npu-sim executes the fused designs
// (sim_exec.h run_design): the stage computation exists once, in aie_kernels/.
//
// Scalars: an entry point takes int32 scalars by name: the step's args (design.h CoreStep::args:
// the fused families pass their core's kernel args, "cores" and, where the kernel takes it,
// "core", the core's index in (column, row) order), then the runtime scalars (SimKernelArgs as
// f32 bits: "eps_bits", "offset_bits", "scale_bits"; "interleaved") -- exactly what the
// emitted design.py passes (its runtime constants). A design whose calls lack one of the
// kernel's scalars (scalars_beyond_program()) is refused before it runs. The names are resolved
// once per Call step of a run (the entry points read them by index, StageEntry), and each core's
// DDR objects are read in place from the arguments where one object is one run of one argument.
// Each core's L1 state is the interpreter's (one per core per run): before a core's calls it
// designates that core's state (xk::t_core_state, xdna_aie_api.h), which the kernels' state
// accessors return; no state is copied and runs on different threads are independent.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "npu/design.h"
#include "npu/sim_exec.h"

namespace xdna::npu {

using StageScalars = std::map<std::string, int64_t>;
// One entry point: the objects of the step's operands (in order) and its scalars, in the order of
// its kernel's StageKernel::scalars (resolved by name once per Call step, not per call).
using StageEntry = void (*)(uint8_t* const* objects, const int32_t* scalars);

// A kernel's stage entry points and the L1 state its source keeps between them (one per core
// on the array; the interpreter keeps each core's and designates it around its calls).
struct StageKernel {
  std::string name;
  std::map<std::string, StageEntry> entries;
  std::vector<std::string> scalars;  // the scalars every entry point takes, in argument order
  std::function<std::shared_ptr<void>()> fresh_state = {};  // a core's state before its first call
};

// The stage kernel written as aie_kernels/<name>.cc (mlp_fused_bf16, qkv_rope_bf16,
// attention_decode_bf16, lm_head_bf16, decode_layer_bf16, decode_layer_int8, decode_layer_int8_kv8,
// decode_layer_int8_kv4, lm_head_int8); throws std::invalid_argument naming
// `name` when there is none.
const StageKernel& stage_kernel(const std::string& name);

// The runtime scalars of `k` by name (see above).
StageScalars runtime_scalars(const SimKernelArgs& k);

// The scalars kernel `k` takes that some Call step of the design's programs does not pass (the
// runtime scalars aside); empty for the fused families.
std::vector<std::string> scalars_beyond_program(const Design& d, const StageKernel& k);

// Each core's DDR stream in (column, row) order: its column's fills gathered through their
// access patterns, split [object][core][2 KiB] as the memtile split does.
std::vector<std::vector<uint8_t>> program_streams(const Design& d, const HostArgs& args);

// A design's core programs resolved against kernel `k` once: the cores in order, each step's FIFO
// as an id, what it moves, its entry point and its scalars; the kernel's L1 bounds and scalars
// checked (throws std::invalid_argument naming the design). The layers of a decode token share
// one (sim_exec_decoder.cpp); `d` and `k` must outlive it.
class CorePrograms {
 public:
  CorePrograms(const Design& d, const StageKernel& k, const StageScalars& runtime);
  // Runs every core's program once over `streams` (see run_core_programs below).
  std::map<std::string, std::vector<uint8_t>> run(const sim::StreamRefs& streams,
                                                  SimStreamCounts* counts = nullptr) const;
  size_t cores() const;
  const Design& design() const;
  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// Runs every core's program once over `streams` (one per core, (column, row) order). Returns the
// objects each output FIFO received ("result", "kv_new", "out_c0r1", ...), concatenated in the
// order they were released. Throws std::invalid_argument naming the design when a program calls
// an entry point `k` lacks or without one of its scalars, reads past its stream, or the cores stall.
std::map<std::string, std::vector<uint8_t>> run_core_programs(const Design& d, const StageKernel& k,
                                                              const std::vector<std::vector<uint8_t>>& streams,
                                                              const StageScalars& runtime);
// The same over streams referenced in place (sim::core_stream_refs: the arguments, not copies);
// with `counts`, adds how the DDR objects were read (in place or gathered).
std::map<std::string, std::vector<uint8_t>> run_core_programs(const Design& d, const StageKernel& k,
                                                              const sim::StreamRefs& streams,
                                                              const StageScalars& runtime,
                                                              SimStreamCounts* counts = nullptr);

// The design's kernel (stage_kernel(name of its cores' kernel)) run through the programs on
// `args`, the outputs written through the drain steps' access patterns. run_design is this plus
// its checks of the arguments and the shape.
void run_design_programs(const Design& d, HostArgs& args, const SimKernelArgs& k = {},
                         SimStreamCounts* counts = nullptr);
// The programs of `d` resolved for its kernel (stage_kernel of its cores' kernel) and `k`, and a
// run of them (what run_design_programs does per call).
CorePrograms design_programs(const Design& d, const SimKernelArgs& k = {});
void run_design_programs(const CorePrograms& programs, HostArgs& args, SimStreamCounts* counts = nullptr);

}  // namespace xdna::npu

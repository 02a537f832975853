// What the fused designs' generators share (design_families_fused.cpp and
// design_families_fused_topology.cpp): the topology's constants, the spec of one design (its
// stream parts and stage list) and the builder that lays it out.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "npu/design_families.h"

namespace xdna::npu::gen::fused {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// DDR stream object per core: 2 KiB (512 words: one access-pattern dimension, aie2p.md DMA
// access-pattern limits size[0] <= 1023 words; double buffering costs 4 KiB of L1).

inline constexpr int64_t kObj = 2048;
inline constexpr int kCores = 4;  // compute rows per column (aie2p.md: array, rows 2-5 compute)

// One part of each core's DDR stream. Per column the arg holds [object][core][kObj] (the bake
// step's layout), columns one after another; a replicated part (the input vector) is one
// padded copy every core receives.
struct Part {
  std::string arg;
  int64_t bytes_per_core = 0;
  bool replicated = false;
  // Set: the arg is read in place (a resident buffer of arg_bytes), column c's stream part by
  // the fills fills[c] in order (each moving whole [object][core] rounds).
  std::vector<std::vector<AccessPattern>> fills = {};
  int64_t arg_bytes = 0;
};

// One stage of the cores' schedule, in the order npu-sim runs the stages (sim_exec.cpp): the
// stage takes `bytes` of the core's DDR stream object by object through entry point
// <kernel>_<name> (a new stream part starts at a whole object; a stage starting inside an
// object was handed that object by the stage before, which keeps its tail), then runs
// `exchanges` rounds (give its slice: <kernel>_<name>_give, take the gathered vector:
// <kernel>_<name>_take), then fills the FIFOs in `outs` this core produces (<kernel>_<name>_<out>).
struct Stage {
  std::string name;
  int64_t bytes = 0;
  bool part_start = false;
  int exchanges = 0;
  std::vector<std::string> outs = {};  // "result", "kv_new", "out" (the core's join input)
};

struct FusedSpec {
  std::string family, name;
  int columns = 8;
  std::map<std::string, int64_t> params;
  std::vector<Part> parts;
  Kernel kernel;                     // the busiest core's work per invocation; its args are the
                                     //   entry points' design scalars (aie_kernels/<kernel>.cc)
  bool core_index = false;           // the entry points also take "core": the core's index in
                                     //   (column, row) order, a per-core kernel arg
  std::vector<Buffer> core_buffers;  // resident per core (residual, normed x, accumulators)
  int exchanges = 0;                 // stages whose outputs are all-gathered on the array
  int64_t slice_bytes = 0;           // per core per exchange
  int64_t result_bytes = 0;          // drained by the last core
  int64_t kv_new_bytes = 0;          // drained by core (0,2)
  std::string kv_new_arg = "kv_new"; // kv_new's drains: into this arg (of kv_new_arg_bytes)
  std::vector<AccessPattern> kv_new_drains = {};  //   by these patterns (empty: contiguous)
  int64_t kv_new_arg_bytes = 0;
  // Per drain of kv_new, when set: its arg and the arg's bytes (an int8 KV row's scales go to
  // their own buffer); empty: every drain writes kv_new_arg.
  std::vector<std::pair<std::string, int64_t>> kv_new_drain_args = {};
  int64_t join_bytes = 0;            // per core per object, joined per column and drained
  int64_t join_objects = 1;          //   (no exchange)
  std::vector<Stage> stages;         // the cores' program (empty: one kernel call per object)
};

// Throws std::invalid_argument "<family>: <what>" unless `ok`.
void check(bool ok, const std::string& family, const std::string& what);

// The design a spec describes, validated: tiles, object FIFOs, the memtile splits and joins, the
// runtime sequence's fills, drains and waits, and every core's program from the stage list.
Design build_fused(const FusedSpec& f);

}  // namespace xdna::npu::gen::fused

// Cost model of NPU designs ("npu-sim (modelled)"): no AIE2P hardware is measured here. Every
// parameter is one row of kCostParams with its source (an aie2p.md row, a fit to a published
// measurement named there, or a stated assumption); docs/npu-cost-model.md prints the table.
//
// Per design invocation:
//  - compute: per core, mmul MACs / (MACs per cycle x efficiency) + vector MACs / (MACs per
//    cycle / r, a GEMV uses one live row of the r x s x t mmul) + vector element-ops /
//    (ops per cycle); the busiest core sets the time;
//  - DMA: bytes per resource over its bandwidth: each compute/memtile/shim DMA channel (one
//    stream port), each memtile's aggregate per direction, and DDR (all shim fills + drains);
//    the busiest resource sets the time;
//  - overlap: transfers through FIFOs of depth >= 2 overlap compute (time = max); a depth-1
//    FIFO alternates with its consumer, so its transfer time adds (sum): at a core it adds to
//    that core's busy time, at a memtile (a resident panel being reloaded) it stalls the whole
//    array. Parallel depth-1 channels of one tile overlap each other (the slowest counts).
//    total = max(busiest core incl. waits, busiest DMA resource) + memtile depth-1 time.
// Per run of invocations: host overhead per dispatch, a configure when consecutive invocations
// inside one xclbin use different designs, an xclbin switch when the xclbin changes.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "npu/design.h"

namespace xdna::npu {

inline constexpr std::string_view kModelledLabel = "npu-sim (modelled)";

struct CostParam {
  std::string_view name;
  double value;
  std::string_view unit;
  std::string_view source;
};

inline constexpr CostParam kCostParams[] = {
    {"clock_hz", 1.8e9, "Hz",
     "aie2p.md Clock: ~1.8 GHz implied by a measured single-tile GEMM (derived, estimate)"},
    {"mmul_efficiency", 0.95, "fraction of peak",
     "fitted: aie2p.md Published measurements, single XDNA2 tile bfp16 GEMM 1760 GFLOP/s = 95% of peak"},
    {"vector_ops_per_cycle", 16, "element-ops/cycle",
     "assumption: half a 512-bit bf16 vector per cycle for non-mmul kernels (not in aie2p.md)"},
    {"stream_bytes_per_cycle", 4, "B/cycle per DMA channel",
     "aie2p.md Streams: 32 bit/cycle per port (AIE-ML); assumption: XDNA2 keeps it (the "
     "64-bit XDNA2 width is an unconfirmed estimate)"},
    {"memtile_bytes_per_cycle", 30, "B/cycle per memtile per direction",
     "aie2p.md Host memory: memtile DMA up to 30 GB/s read + 30 GB/s write per tile at 1 GHz (AM020)"},
    {"ddr_bytes_per_s", 52.7e9, "B/s (reads + writes)",
     "aie2p.md reference engine: pure NPU DDR read 52.7 GB/s; assumption: writes share it"},
    {"dispatch_s", 45e-6, "s per dispatch",
     "aie2p.md Published measurements: empty kernel via XRT run + wait about 45 us"},
    {"configure_s", 56.5e-6, "s per configure",
     "aie2p.md reference engine: configure inside one dispatch 51-62 us (midpoint)"},
    {"xclbin_switch_s", 2.67e-3, "s per switch",
     "aie2p.md reference engine: switching xclbins (shape reload) 2.67 ms"},
};

// The value of a named parameter; a constant expression for names that exist (a typo fails to
// compile where used in a constexpr context and throws otherwise).
constexpr double cost_param(std::string_view name) {
  for (const CostParam& p : kCostParams)
    if (p.name == name) return p.value;
  throw std::invalid_argument("no cost-model parameter named " + std::string(name));
}

// Seconds one core spends in its kernel per invocation.
double kernel_seconds(const Kernel& k);

struct DesignCost {
  std::string_view label = kModelledLabel;
  std::string design;
  double compute_s = 0;       // busiest core
  double core_stream_s = 0;   // busiest compute-tile DMA channel (depth >= 2 FIFOs)
  double memtile_s = 0;       // busiest memtile channel or memtile aggregate
  double shim_s = 0;          // busiest shim channel
  double ddr_s = 0;           // all DDR traffic
  double dma_s = 0;           // max of the four above
  double core_wait_s = 0;     // largest depth-1 wait of one core (part of its busy time)
  double serial_s = 0;        // memtile depth-1 transfers that stall the array
  double total_s = 0;         // see the header comment (no dispatch overhead)
  int64_t ddr_bytes = 0;
  int64_t macs = 0;           // all cores
  std::string bottleneck;     // "compute", "core stream", "memtile", "shim", "ddr"
};
DesignCost model_design(const Design& d);

// One design invocation in a run. `new_dispatch`: a host submission starts here (otherwise it
// continues the previous instruction stream).
struct Invocation {
  const Design* design = nullptr;
  std::string xclbin;
  bool new_dispatch = true;
};

struct RunCost {
  std::string_view label = kModelledLabel;
  int dispatches = 0, configures = 0, xclbin_switches = 0;
  double design_s = 0;         // sum of DesignCost::total_s
  double compute_s = 0, dma_s = 0;
  double dispatch_s = 0, configure_s = 0, xclbin_switch_s = 0;
  double total_s = 0;
  int64_t ddr_bytes = 0;
};
RunCost model_run(std::span<const Invocation> run);

}  // namespace xdna::npu

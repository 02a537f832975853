#include "npu/cost_model.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace xdna::npu {

namespace {

constexpr double kClock = cost_param("clock_hz");
constexpr double kStreamBps = cost_param("stream_bytes_per_cycle") * kClock;
constexpr double kMemtileBps = cost_param("memtile_bytes_per_cycle") * kClock;

TileKind kind(TileCoord t) { return tile_kind_at(t.col, t.row); }

}  // namespace

double kernel_seconds(const Kernel& k) {
  double cycles = 0;
  if (k.mmul_macs > 0 || k.vector_macs > 0) {
    const MmulShape s = mmul_shape(k.dtype);
    const double eff = cost_param("mmul_efficiency");
    cycles += double(k.mmul_macs) / (s.macs() * eff);
    cycles += double(k.vector_macs) / (double(s.s * s.t) * eff);  // one live row of r
  }
  cycles += double(k.vector_ops) / cost_param("vector_ops_per_cycle");
  return cycles / kClock;
}

DesignCost model_design(const Design& d) {
  DesignCost c;
  c.design = d.name;
  for (const TileUse& t : d.tiles)
    if (t.has_kernel) {
      c.compute_s = std::max(c.compute_s, kernel_seconds(t.kernel));
      c.macs += t.kernel.mmul_macs + t.kernel.vector_macs;
    }
  // Bytes per DMA channel (tile, direction, channel), per memtile direction, and serial bytes.
  std::map<std::tuple<TileCoord, int, int>, double> chan;
  std::map<std::pair<TileCoord, int>, double> mem_dir;
  std::map<std::tuple<TileCoord, int, int>, double> serial;
  auto add_end = [&](const FifoEnd& e, int dir, double bytes, int depth) {
    if (e.channel == kSharedMemory) return;
    if (depth == 1 && dir == 0 && kind(e.tile) != TileKind::Shim) {
      serial[{e.tile, dir, e.channel}] += bytes;
      return;
    }
    chan[{e.tile, dir, e.channel}] += bytes;
    if (kind(e.tile) == TileKind::MemTile) mem_dir[{e.tile, dir}] += bytes;
  };
  for (const ObjectFifo& f : d.fifos) {
    const double bytes = double(f.objects) * double(f.elem_bytes);
    add_end(f.producer, 1, bytes, f.depth);
    for (const FifoEnd& e : f.consumers) add_end(e, 0, bytes, f.depth);
  }
  for (const auto& [key, bytes] : chan) {
    const double s = bytes / kStreamBps;
    switch (kind(std::get<0>(key))) {
      case TileKind::Compute: c.core_stream_s = std::max(c.core_stream_s, s); break;
      case TileKind::MemTile: c.memtile_s = std::max(c.memtile_s, s); break;
      case TileKind::Shim: c.shim_s = std::max(c.shim_s, s); break;
    }
  }
  for (const auto& [key, bytes] : mem_dir) c.memtile_s = std::max(c.memtile_s, bytes / kMemtileBps);
  for (const SeqStep& s : d.sequence)
    if (s.op != SeqOp::Wait) c.ddr_bytes += s.pattern.bytes();
  c.ddr_s = double(c.ddr_bytes) / cost_param("ddr_bytes_per_s");
  // Channels run in parallel: the slowest depth-1 channel sets the added time.
  // A core waits for a depth-1 transfer before computing: it adds to that core's busy time.
  // A memtile's depth-1 transfer (a resident panel reloaded) stalls every core it feeds.
  std::map<TileCoord, double> core_wait;
  for (const auto& [key, bytes] : serial) {
    const TileCoord t = std::get<0>(key);
    if (kind(t) == TileKind::Compute)
      core_wait[t] = std::max(core_wait[t], bytes / kStreamBps);
    else
      c.serial_s = std::max(c.serial_s, bytes / kStreamBps);
  }
  double core_busy = 0;
  for (const TileUse& t : d.tiles)
    if (t.has_kernel || core_wait.count(t.at))
      core_busy = std::max(core_busy, (t.has_kernel ? kernel_seconds(t.kernel) : 0.0) + core_wait[t.at]);
  for (const auto& [t, w] : core_wait) c.core_wait_s = std::max(c.core_wait_s, w);

  const std::pair<double, const char*> parts[] = {{c.compute_s, "compute"},
                                                  {c.core_stream_s, "core stream"},
                                                  {c.memtile_s, "memtile"},
                                                  {c.shim_s, "shim"},
                                                  {c.ddr_s, "ddr"}};
  const auto* top = std::max_element(std::begin(parts), std::end(parts),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
  c.dma_s = std::max({c.core_stream_s, c.memtile_s, c.shim_s, c.ddr_s});
  c.bottleneck = top->second;
  c.total_s = std::max(core_busy, c.dma_s) + c.serial_s;
  return c;
}

RunCost model_run(std::span<const Invocation> run) {
  RunCost r;
  const Design* prev = nullptr;
  const std::string* prev_xclbin = nullptr;
  for (const Invocation& inv : run) {
    if (!inv.design) throw std::invalid_argument("model_run: an invocation has no design");
    const DesignCost c = model_design(*inv.design);
    r.design_s += c.total_s;
    r.compute_s += c.compute_s;
    r.dma_s += c.dma_s;
    r.ddr_bytes += c.ddr_bytes;
    if (inv.new_dispatch || !prev) ++r.dispatches;
    if (prev_xclbin && *prev_xclbin != inv.xclbin)
      ++r.xclbin_switches;
    else if (prev && prev->name != inv.design->name)
      ++r.configures;
    prev = inv.design;
    prev_xclbin = &inv.xclbin;
  }
  r.dispatch_s = r.dispatches * cost_param("dispatch_s");
  r.configure_s = r.configures * cost_param("configure_s");
  r.xclbin_switch_s = r.xclbin_switches * cost_param("xclbin_switch_s");
  r.total_s = r.design_s + r.dispatch_s + r.configure_s + r.xclbin_switch_s;
  return r;
}

}  // namespace xdna::npu

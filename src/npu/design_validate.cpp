// validate_design: the checks an AIE2P toolchain would make before lowering a design, plus the
// consistency the cost model relies on (bytes filled into a FIFO = objects x elem_bytes).
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>

#include "npu/design.h"

namespace xdna::npu {

namespace {

struct Checker {
  const Design& d;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("design '" + d.name + "': " + what);
  }

  TileKind kind(TileCoord t, const std::string& who) const {
    if (t.col < 0 || t.col >= kAie2p.columns || t.row < 0 || t.row >= kAie2p.rows)
      fail(who + ": tile " + to_string(t) + " is outside the 8 x 6 AIE2P array");
    return tile_kind_at(t.col, t.row);
  }

  void tiles() const {
    std::set<TileCoord> seen;
    for (const TileUse& t : d.tiles) {
      const TileKind k = kind(t.at, "tile list");
      if (!seen.insert(t.at).second) fail("tile " + to_string(t.at) + " is listed twice");
      if (t.has_kernel && k != TileKind::Compute)
        fail("tile " + to_string(t.at) + " is a " + std::string(tile_kind_name(k)) +
             " tile and cannot run kernel '" + t.kernel.name + "'");
      if (k == TileKind::Shim && !t.buffers.empty())
        fail("shim tile " + to_string(t.at) + " has no local memory for buffer '" +
             t.buffers[0].name + "'");
      for (const Buffer& b : t.buffers)
        if (b.bytes <= 0)
          fail("buffer '" + b.name + "' on tile " + to_string(t.at) + " has " +
               std::to_string(b.bytes) + " bytes");
    }
  }

  void fifo_ends() const {
    std::set<std::string> names;
    // (tile, direction, channel) -> FIFO using it; direction 0 = S2MM, 1 = MM2S.
    std::map<std::tuple<TileCoord, int, int>, std::string> used;
    auto claim = [&](const ObjectFifo& f, const FifoEnd& e, int dir) {
      const std::string who = "FIFO '" + f.name + "'";
      const TileKind k = kind(e.tile, who);
      if (!d.find_tile(e.tile)) fail(who + ": tile " + to_string(e.tile) + " is not in the tile list");
      if (e.channel == kSharedMemory) {
        const TileCoord p = f.producer.tile;
        for (const FifoEnd& c : f.consumers)
          if (f.producer.channel != kSharedMemory || c.channel != kSharedMemory ||
              kind(p, who) != TileKind::Compute || kind(c.tile, who) != TileKind::Compute ||
              c.tile.col != p.col || std::abs(c.tile.row - p.row) != 1)
            fail(who + ": a shared-memory FIFO joins two compute tiles of one column on adjacent "
                 "rows, both ends shared");
        return;
      }
      const TileLimits& lim = tile_limits(k);
      const int n = dir == 0 ? lim.s2mm_channels : lim.mm2s_channels;
      const char* dname = dir == 0 ? "S2MM" : "MM2S";
      if (e.channel < 0 || e.channel >= n)
        fail(who + ": " + dname + " channel " + std::to_string(e.channel) + " on " +
             std::string(tile_kind_name(k)) + " tile " + to_string(e.tile) + " does not exist (" +
             std::to_string(n) + " channels)");
      auto [it, fresh] = used.emplace(std::make_tuple(e.tile, dir, e.channel), f.name);
      if (!fresh)
        fail(who + ": " + dname + " channel " + std::to_string(e.channel) + " on tile " +
             to_string(e.tile) + " is already used by FIFO '" + it->second + "'");
    };
    for (const ObjectFifo& f : d.fifos) {
      if (f.name.empty()) fail("a FIFO has no name");
      if (!names.insert(f.name).second) fail("FIFO '" + f.name + "' is defined twice");
      if (f.depth < 1) fail("FIFO '" + f.name + "' has depth " + std::to_string(f.depth));
      if (f.elem_bytes <= 0 || f.elem_bytes % kAie2p.dma_align_bytes != 0)
        fail("FIFO '" + f.name + "': element of " + std::to_string(f.elem_bytes) +
             " bytes is not a positive multiple of 4 bytes (DMA alignment)");
      if (f.objects < 1) fail("FIFO '" + f.name + "' moves " + std::to_string(f.objects) + " objects");
      if (f.consumers.empty()) fail("FIFO '" + f.name + "' has no consumer");
      claim(f, f.producer, 1);
      for (const FifoEnd& c : f.consumers) {
        if (c.tile == f.producer.tile)
          fail("FIFO '" + f.name + "' produces and consumes on the same tile " + to_string(c.tile));
        claim(f, c, 0);
      }
      const bool shim_in = kind(f.producer.tile, f.name) == TileKind::Shim;
      for (const FifoEnd& c : f.consumers)
        if (kind(c.tile, f.name) == TileKind::Shim && (shim_in || f.consumers.size() != 1))
          fail("FIFO '" + f.name + "': a shim consumer must be the only consumer of a non-shim producer");
    }
  }

  void links() const {
    // A FIFO may be the input of one link and the output of another (a memtile-to-memtile hop,
    // e.g. a chain of joins), but not an input (or an output) of two links.
    std::set<std::string> linked_in, linked_out;
    for (const FifoLink& l : d.links) {
      if (l.inputs.empty() || l.outputs.empty()) fail("a memtile link has no input or no output");
      if (l.inputs.size() > 1 && l.outputs.size() > 1)
        fail("link of '" + l.inputs[0] + "': a link is a split or a join, not both");
      const ObjectFifo* first = d.find_fifo(l.inputs[0]);
      if (!first) fail("link input FIFO '" + l.inputs[0] + "' does not exist");
      const TileCoord at = first->consumers[0].tile;
      if (kind(at, l.inputs[0]) != TileKind::MemTile)
        fail("link of '" + l.inputs[0] + "' is on tile " + to_string(at) + ", not a memtile");
      int64_t in_obj = 0, out_obj = 0;
      std::vector<int64_t> sides;
      for (const std::string& n : l.inputs) {
        const ObjectFifo* f = d.find_fifo(n);
        if (!f) fail("link input FIFO '" + n + "' does not exist");
        if (f->consumers.size() != 1 || !(f->consumers[0].tile == at))
          fail("link input FIFO '" + n + "' must have the memtile " + to_string(at) + " as its only consumer");
        if (!linked_in.insert(n).second) fail("FIFO '" + n + "' is in two links");
        in_obj = f->elem_bytes;
        sides.push_back(f->elem_bytes);
      }
      for (const std::string& n : l.outputs) {
        const ObjectFifo* f = d.find_fifo(n);
        if (!f) fail("link output FIFO '" + n + "' does not exist");
        if (!(f->producer.tile == at))
          fail("link output FIFO '" + n + "' must be produced by the memtile " + to_string(at));
        if (!linked_out.insert(n).second) fail("FIFO '" + n + "' is in two links");
        out_obj = f->elem_bytes;
        if (l.outputs.size() > 1) sides.push_back(f->elem_bytes);
      }
      const bool split = l.outputs.size() > 1, join = l.inputs.size() > 1;
      if (split || join) {
        if (split) sides.erase(sides.begin());  // the slices are the outputs
        const int64_t whole = split ? in_obj : out_obj;
        if (l.offsets.size() != sides.size())
          fail("link of '" + l.inputs[0] + "' has " + std::to_string(l.offsets.size()) +
               " offsets for " + std::to_string(sides.size()) + " slices");
        for (size_t i = 0; i < sides.size(); ++i) {
          const int64_t off = l.offsets[i];
          if (off < 0 || off % kAie2p.dma_align_bytes != 0 || off + sides[i] > whole)
            fail("link of '" + l.inputs[0] + "': slice " + std::to_string(i) + " at offset " +
                 std::to_string(off) + " (+" + std::to_string(sides[i]) +
                 " bytes) does not fit a 4-byte-aligned place in the " + std::to_string(whole) +
                 "-byte object");
        }
      }
    }
  }

  void memory_bds_locks() const {
    for (const TileUse& t : d.tiles) {
      const TileKind k = tile_kind_at(t.at.col, t.at.row);
      if (k == TileKind::Shim) continue;
      const TileLimits& lim = tile_limits(k);
      const int64_t bytes = tile_memory_bytes(d, t.at);
      if (bytes > lim.memory_bytes)
        fail(std::string(tile_kind_name(k)) + " tile " + to_string(t.at) + " needs " +
             std::to_string(bytes) + " bytes of " + (k == TileKind::Compute ? "L1" : "L2") +
             " memory (buffers + FIFO depth x element bytes), limit " +
             std::to_string(lim.memory_bytes));
      // Each FIFO end holds `depth` BDs on its channel and a producer/consumer lock pair.
      int bds = 0, bds_even = 0, bds_odd = 0, locks = 0;
      auto count = [&](const FifoEnd& e, int depth) {
        if (!(e.tile == t.at)) return;
        locks += 2;
        if (e.channel == kSharedMemory) return;
        bds += depth;
        (e.channel % 2 == 0 ? bds_even : bds_odd) += depth;
      };
      for (const ObjectFifo& f : d.fifos) {
        count(f.producer, f.depth);
        for (const FifoEnd& c : f.consumers) count(c, f.depth);
      }
      if (k == TileKind::MemTile) {
        const int pool = kAie2p.memtile_bds_per_parity;
        if (bds_even > pool || bds_odd > pool)
          fail("memtile " + to_string(t.at) + " needs " +
               std::to_string(std::max(bds_even, bds_odd)) + " BDs in its " +
               (bds_even > pool ? "even" : "odd") + "-channel BD pool, limit " + std::to_string(pool));
      } else if (bds > lim.bds) {
        fail("compute tile " + to_string(t.at) + " needs " + std::to_string(bds) + " BDs, limit " +
             std::to_string(lim.bds));
      }
      if (locks > lim.locks)
        fail(std::string(tile_kind_name(k)) + " tile " + to_string(t.at) + " needs " +
             std::to_string(locks) + " locks, limit " + std::to_string(lim.locks));
    }
  }

  void pattern(const SeqStep& s, size_t i) const {
    const AccessPattern& p = s.pattern;
    const std::string who = "sequence step " + std::to_string(i) + " (" +
                            std::string(seq_op_name(s.op)) + " '" + s.fifo + "')";
    const int64_t eb = p.elem_bytes, W = 4;
    if (eb <= 0) fail(who + ": element size " + std::to_string(eb));
    if (p.dims.empty() || int(p.dims.size()) > kAie2p.shim.dma_dims)
      fail(who + ": " + std::to_string(p.dims.size()) + " dimensions, the shim BD has 1 to " +
           std::to_string(kAie2p.shim.dma_dims) + " (plus repeat)");
    if ((p.offset * eb) % W != 0)
      fail(who + ": offset of " + std::to_string(p.offset * eb) + " bytes is not 4-byte aligned");
    if ((p.dims[0].size * eb) % W != 0)
      fail(who + ": innermost run of " + std::to_string(p.dims[0].size * eb) +
           " bytes is not a multiple of 4 bytes");
    if (p.dims[0].stride != 1 && eb < W)
      fail(who + ": innermost stride must be 1 for elements narrower than 32 bits");
    for (size_t k = 0; k < p.dims.size(); ++k) {
      const Dim& dm = p.dims[k];
      if (dm.size < 1 || dm.stride < 0)
        fail(who + ": dim " + std::to_string(k) + " has size " + std::to_string(dm.size) +
             ", stride " + std::to_string(dm.stride));
      const int64_t size_words = k == 0 ? dm.size * eb / W : dm.size;
      const int64_t lim = k == 0 ? kAie2p.max_size0_words : kAie2p.max_size1_words;
      if (k < 2 && size_words > lim)
        fail(who + ": size[" + std::to_string(k) + "] = " + std::to_string(size_words) +
             (k == 0 ? " words" : "") + " exceeds the DMA limit " + std::to_string(lim));
      if (k > 0 && (dm.stride * eb) % W != 0)
        fail(who + ": stride[" + std::to_string(k) + "] of " + std::to_string(dm.stride * eb) +
             " bytes is not a whole number of 32-bit words");
      if (dm.stride * eb / W > kAie2p.max_stride_words)
        fail(who + ": stride[" + std::to_string(k) + "] = " + std::to_string(dm.stride * eb / W) +
             " words exceeds the DMA limit 2^20");
    }
    if (p.repeat < 1 || p.repeat > kAie2p.max_repeat)
      fail(who + ": repeat " + std::to_string(p.repeat) + " outside 1.." +
           std::to_string(kAie2p.max_repeat));
    if (s.arg < 0 || s.arg >= int(d.args.size()))
      fail(who + ": host argument " + std::to_string(s.arg) + " does not exist");
    int64_t last = p.offset;
    for (const Dim& dm : p.dims) last += (dm.size - 1) * dm.stride;
    if ((last + 1) * eb > d.args[s.arg].bytes)
      fail(who + ": reaches byte " + std::to_string((last + 1) * eb) + " of host argument '" +
           d.args[s.arg].name + "' (" + std::to_string(d.args[s.arg].bytes) + " bytes)");
  }

  void sequence() const {
    // Per shim channel (tile, direction, channel): transfers issued and not yet awaited.
    std::map<std::tuple<TileCoord, int, int>, int> open;
    std::map<TileCoord, int> open_bds;
    std::map<std::string, int64_t> moved;
    for (size_t i = 0; i < d.sequence.size(); ++i) {
      const SeqStep& s = d.sequence[i];
      const ObjectFifo* f = d.find_fifo(s.fifo);
      const std::string who = "sequence step " + std::to_string(i) + " (" +
                              std::string(seq_op_name(s.op)) + " '" + s.fifo + "')";
      if (!f) fail(who + ": no such FIFO");
      const bool fills = tile_kind_at(f->producer.tile.col, f->producer.tile.row) == TileKind::Shim;
      const bool drains = tile_kind_at(f->consumers[0].tile.col, f->consumers[0].tile.row) == TileKind::Shim;
      if (s.op == SeqOp::Fill && !fills) fail(who + ": the FIFO's producer is not a shim tile");
      if (s.op == SeqOp::Drain && !drains) fail(who + ": the FIFO's consumer is not a shim tile");
      if (s.op == SeqOp::Wait && !fills && !drains) fail(who + ": the FIFO has no shim end");
      const FifoEnd& e = fills ? f->producer : f->consumers[0];
      const auto ch = std::make_tuple(e.tile, fills ? 1 : 0, e.channel);
      if (s.op == SeqOp::Wait) {
        open_bds[e.tile] -= open[ch];
        open[ch] = 0;
        continue;
      }
      pattern(s, i);
      moved[s.fifo] += s.pattern.bytes();
      if (++open[ch] > kAie2p.task_queue_depth)
        fail(who + ": more than " + std::to_string(kAie2p.task_queue_depth) +
             " transfers outstanding on shim " + to_string(e.tile) + (fills ? " MM2S" : " S2MM") +
             " channel " + std::to_string(e.channel) + " (task queue); add a wait");
      if (++open_bds[e.tile] > kAie2p.shim.bds)
        fail(who + ": more than " + std::to_string(kAie2p.shim.bds) +
             " BDs in flight on shim tile " + to_string(e.tile));
    }
    for (const auto& [ch, n] : open)
      if (n > 0 && std::get<1>(ch) == 0)
        fail("runtime sequence ends with a drain on shim " + to_string(std::get<0>(ch)) +
             " S2MM channel " + std::to_string(std::get<2>(ch)) + " never awaited");
    for (const ObjectFifo& f : d.fifos) {
      const bool shim_end =
          tile_kind_at(f.producer.tile.col, f.producer.tile.row) == TileKind::Shim ||
          tile_kind_at(f.consumers[0].tile.col, f.consumers[0].tile.row) == TileKind::Shim;
      if (shim_end && moved[f.name] != f.objects * f.elem_bytes)
        fail("FIFO '" + f.name + "': the runtime sequence moves " + std::to_string(moved[f.name]) +
             " bytes but the FIFO carries " + std::to_string(f.objects) + " x " +
             std::to_string(f.elem_bytes) + " bytes per invocation");
    }
  }
};

}  // namespace

void validate_design(const Design& d) {
  Checker c{d};
  if (d.name.empty()) c.fail("the design has no name");
  c.tiles();
  c.fifo_ends();
  c.links();
  c.memory_bds_locks();
  c.sequence();
}

}  // namespace xdna::npu

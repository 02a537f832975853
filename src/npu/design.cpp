#include "npu/design.h"

#include <algorithm>

namespace xdna::npu {

std::string to_string(TileCoord t) {
  std::string s = "(";  // built by appends: GCC 12 warns (-Wrestrict) on "(" + std::string&&
  s += std::to_string(t.col);
  s += ',';
  s += std::to_string(t.row);
  s += ')';
  return s;
}

std::string_view seq_op_name(SeqOp op) {
  switch (op) {
    case SeqOp::Fill: return "fill";
    case SeqOp::Drain: return "drain";
    case SeqOp::Wait: return "wait";
  }
  return "?";
}

int64_t AccessPattern::bytes() const {
  int64_t n = elem_bytes * repeat;
  for (const Dim& d : dims) n *= d.size;
  return n;
}

const ObjectFifo* Design::find_fifo(const std::string& fifo) const {
  for (const ObjectFifo& f : fifos)
    if (f.name == fifo) return &f;
  return nullptr;
}

const TileUse* Design::find_tile(TileCoord at) const {
  for (const TileUse& t : tiles)
    if (t.at == at) return &t;
  return nullptr;
}

namespace {

bool in_link(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

}  // namespace

int64_t tile_memory_bytes(const Design& d, TileCoord at) {
  if (tile_kind_at(at.col, at.row) == TileKind::Shim) return 0;
  int64_t total = 0;
  if (const TileUse* t = d.find_tile(at))
    for (const Buffer& b : t->buffers) total += b.bytes;
  // FIFO ends that a link at this tile shares are counted once per link below.
  auto linked = [&](const ObjectFifo& f) {
    for (const FifoLink& l : d.links)
      if (in_link(l.inputs, f.name) || in_link(l.outputs, f.name)) return true;
    return false;
  };
  for (const ObjectFifo& f : d.fifos) {
    if (linked(f) && tile_kind_at(at.col, at.row) == TileKind::MemTile) continue;
    const int64_t ring = int64_t(f.depth) * f.elem_bytes;
    if (f.producer.tile == at) total += ring;
    for (const FifoEnd& c : f.consumers)  // a shared-memory consumer reads the producer's ring
      if (c.tile == at && c.channel != kSharedMemory) total += ring;
  }
  for (const FifoLink& l : d.links) {
    int64_t in = 0, out = 0;
    bool here = false;
    for (const std::string& n : l.inputs)
      if (const ObjectFifo* f = d.find_fifo(n)) {
        in += int64_t(f->depth) * f->elem_bytes;
        for (const FifoEnd& c : f->consumers) here |= c.tile == at;
      }
    for (const std::string& n : l.outputs)
      if (const ObjectFifo* f = d.find_fifo(n)) out += int64_t(f->depth) * f->elem_bytes;
    if (here) total += std::max(in, out);
  }
  return total;
}

}  // namespace xdna::npu

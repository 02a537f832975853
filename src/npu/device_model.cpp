#include "npu/device_model.h"

#include <stdexcept>
#include <string>

namespace xdna::npu {

std::string_view tile_kind_name(TileKind k) {
  switch (k) {
    case TileKind::Shim: return "shim";
    case TileKind::MemTile: return "memtile";
    case TileKind::Compute: return "compute";
  }
  return "?";
}

TileKind tile_kind_at(int col, int row) {
  if (col < 0 || col >= kAie2p.columns || row < 0 || row >= kAie2p.rows)
    throw std::out_of_range("tile (" + std::to_string(col) + "," + std::to_string(row) +
                            ") is outside the AIE2P array of " + std::to_string(kAie2p.columns) +
                            " columns x " + std::to_string(kAie2p.rows) + " rows");
  if (row == kAie2p.shim_row) return TileKind::Shim;
  if (row == kAie2p.memtile_row) return TileKind::MemTile;
  return TileKind::Compute;
}

const TileLimits& tile_limits(TileKind k) {
  switch (k) {
    case TileKind::Shim: return kAie2p.shim;
    case TileKind::MemTile: return kAie2p.memtile;
    case TileKind::Compute: break;
  }
  return kAie2p.compute;
}

MmulShape mmul_shape(DType t) {
  switch (t) {
    case DType::I8: return {8, 8, 8};
    case DType::BFP16: return {8, 8, 8};
    case DType::BF16: return {4, 8, 8};
    default: break;
  }
  throw std::invalid_argument("no AIE2P mmul shape for dtype " + std::string(dtype_name(t)));
}

int macs_per_cycle(DType t) { return mmul_shape(t).macs(); }

}  // namespace xdna::npu

// The AIE2P (XDNA2, "npu2") target: array geometry, per-tile DMA resources, DMA access-pattern
// limits, matrix-multiply shapes and the clock. Every number cites its row in
// ../shared/docs/aie2p.md (referred to as aie2p.md). Designs (design.h) are checked against
// these limits by validate_design(); the cost model (cost_model.h) reads the compute rates.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace xdna::npu {

enum class TileKind : uint8_t { Shim, MemTile, Compute };
std::string_view tile_kind_name(TileKind k);

// Resources of one tile of a kind. Channel counts are per direction: S2MM writes a stream into
// the tile's memory, MM2S reads the tile's memory out to a stream.
struct TileLimits {
  int s2mm_channels;
  int mm2s_channels;
  int bds;             // buffer descriptors (memtile: split in two pools by channel parity)
  int locks;
  int64_t memory_bytes;  // 0: the shim has no local memory (it moves DDR data)
  int dma_dims;        // address dimensions of one BD (shim: plus the repeat count)
};

struct Aie2pTarget {
  // aie2p.md: Array geometry, "array": 8 columns x 6 rows; row 0 shim, row 1 memtile, rows 2-5
  // compute = 32 compute tiles.
  int columns = 8;
  int rows = 6;
  int shim_row = 0;
  int memtile_row = 1;
  int first_compute_row = 2;
  int compute_rows = 4;

  // aie2p.md: Array geometry, "compute tile data memory (L1)": 64 KiB (8 banks).
  int64_t l1_bytes = 64 * 1024;
  // aie2p.md: Array geometry, "memtile (L2)": 512 KiB per tile, 4 MiB total.
  int64_t l2_bytes = 512 * 1024;

  // aie2p.md: Array geometry, "DMA channels S2MM/MM2S": compute 2/2, memtile 6/6, shim 2/2;
  // "buffer descriptors": compute 16, shim 16, memtile 48 (even channels BD 0-23, odd 24-47);
  // "locks": 16 per compute/shim tile, 64 per memtile; "DMA address dimensions": compute 3D,
  // memtile 4D, shim 3D + iteration/repeat.
  TileLimits compute{2, 2, 16, 16, 64 * 1024, 3};
  TileLimits memtile{6, 6, 48, 64, 512 * 1024, 4};
  TileLimits shim{2, 2, 16, 16, 0, 3};
  int memtile_bds_per_parity = 24;  // aie2p.md: "buffer descriptors": even 0-23, odd 24-47
  int lock_max_value = 63;          // aie2p.md: "locks": 6-bit value
  // aie2p.md: Array geometry, "task queue": 4 tasks per channel.
  int task_queue_depth = 4;

  // aie2p.md: DMA access-pattern limits (32-bit words, `dma_memcpy_nd` verifier).
  int64_t max_size0_words = 1023;     // size[0] <= 1023
  int64_t max_size1_words = 1023;     // size[1] <= 1023
  int64_t max_repeat = 64;            // size[3] (repeat) <= 64
  int64_t max_stride_words = 1 << 20; // strides <= 2^20
  int64_t dma_align_bytes = 4;        // offsets 4-byte aligned, innermost run a multiple of 4 B

  // aie2p.md: Clock: "a measured single-tile GEMM implies about 1.8 GHz array clock (derived,
  // estimate)". The driver's DPM table tops out at H-clock 1800 MHz.
  double clock_hz = 1.8e9;

  // aie2p.md: Streams: AIE-ML streams are 32 bits per cycle per port; the XDNA2 width is not
  // confirmed (64 bit is an estimate). The cost model chooses between these (cost_model.h).
  int stream_bits_aie_ml = 32;
  int stream_bits_xdna2_estimate = 64;
};

inline constexpr Aie2pTarget kAie2p{};

// Kind of the tile at a row; throws std::out_of_range naming the coordinate if (col, row) is
// outside the 8 x 6 array.
TileKind tile_kind_at(int col, int row);
const TileLimits& tile_limits(TileKind k);

// One aie::mmul: C[r x t] += A[r x s] * B[s x t].
struct MmulShape {
  int r, s, t;
  int macs() const { return r * s * t; }
};

// aie2p.md: Kernel shapes and numerics, mmul table (AIE2P column): int8 8x8x8, bf16 native
// 4x8x8, bfp16ebs8 8x8x8 (B pre-transposed, f32 accumulator). Throws for other dtypes.
MmulShape mmul_shape(DType t);

// MACs per cycle of one compute tile, one mmul issued per cycle. aie2p.md: Compute per tile per
// cycle: int8 512, bfp16 512; bf16 is "not published for XDNA2 natively": we take the native
// 4x8x8 mmul shape = 256 (an estimate; the bfp16-emulated path would give 512).
int macs_per_cycle(DType t);

}  // namespace xdna::npu

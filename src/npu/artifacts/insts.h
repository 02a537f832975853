// NPU instruction streams (insts.bin): the words the firmware executes per invocation to run a
// design's runtime sequence: program shim DMA buffer descriptors, patch DDR addresses of the
// buffer arguments, start the channels, wait for the drains (aie2p.md "Instruction stream").
// lower_sequence() turns a Design's runtime sequence into a Stream; encode()/decode() convert
// between a Stream and the little-endian u32 words; to_text() prints it (`npu design dump`).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "npu/design.h"

namespace xdna::npu::insts {

enum class Op : uint32_t { Write32 = 0, BlockWrite = 1, MaskWrite = 3, Sync = 0x80, DdrPatch = 0x81 };
std::string_view op_name(Op op);

// One instruction. Fields used per op:
//  Write32:    addr, value
//  BlockWrite: col, row, addr, data
//  MaskWrite:  addr, value, mask
//  Sync:       direction (0 S2MM, 1 MM2S), row, col, row_count, col_count, channel
//  DdrPatch:   addr (the BD register holding the address), arg_index, arg_offset (bytes)
struct Instr {
  Op op = Op::Write32;
  uint32_t col = 0, row = 0, addr = 0, value = 0, mask = 0;
  uint32_t direction = 0, row_count = 0, col_count = 0, channel = 0;
  uint32_t arg_index = 0, arg_offset = 0;
  std::vector<uint32_t> data;
  bool operator==(const Instr&) const = default;
};

struct Stream {
  uint32_t dev_gen = 4;   // 4 = npu2 (Strix / Krackan), 3 = npu1 (Phoenix)
  uint32_t rows = 6;      // shim + memtile + 4 compute rows
  uint32_t cols = 8;
  uint32_t mem_rows = 1;
  std::vector<Instr> ops;
  bool operator==(const Stream&) const = default;
};

// Register address of a tile's register: col<<25 | row<<20 | offset.
uint32_t tile_address(uint32_t col, uint32_t row, uint32_t offset);

// Shim (row 0) DMA registers (aie2p.md "Instruction stream"; mlir-aie AIEDmaToNpu.cpp): BD n's
// 8 words at 0x1D000 + 0x20*n (word 1 = buffer address low, the DDR_PATCH target); channel c's
// control register 0x1D200 + 8*c (+0x10 for MM2S), its task queue register 4 bytes after it.
inline constexpr uint32_t kShimBdBase = 0x1D000;
inline constexpr uint32_t kShimBdStride = 0x20;
inline constexpr uint32_t kShimBdWords = 8;
inline constexpr uint32_t kShimChannelBase = 0x1D200;
uint32_t shim_bd_offset(uint32_t bd);                        // 0x1D000 + 0x20*bd
uint32_t shim_queue_offset(uint32_t direction, uint32_t ch); // direction 0 S2MM, 1 MM2S
// "BD 3 word 1", "MM2S 0 queue", ... for a shim register offset; empty when not a known one.
std::string shim_register_name(uint32_t offset);

std::vector<uint32_t> encode(const Stream& s);
// Throws std::invalid_argument naming the word index and what is wrong (unknown op, a size that
// runs past the end, a header whose counts disagree with the body).
Stream decode(std::span<const uint32_t> words);
std::string to_text(const Stream& s);

// The runtime sequence of `d` as instructions: per Fill/Drain a shim BD (BLOCKWRITE of its 8
// words), a DDR_PATCH of its address with the step's host argument, and a WRITE32 of the
// channel's queue register; per Wait a TCT sync on the FIFO's shim channel. BD ids per shim are
// allocated round-robin within the shim's BD pool (device_model.h), reused after a Wait.
Stream lower_sequence(const Design& d);

}  // namespace xdna::npu::insts

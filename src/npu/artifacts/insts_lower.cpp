// lower_sequence (insts.h): a design's runtime sequence as shim DMA instructions, the way
// mlir-aie's AIEDmaToNpu.cpp lowers npu.dma_memcpy_nd / npu.dma_wait (BLOCKWRITE of the BD,
// DDR_PATCH of its address word, WRITE32 of the channel's task queue; TCT sync per wait).
//
// AIE2 / AIE2P shim BD, 8 words (mlir-aie AIEDmaToNpu.cpp WriteBdToBlockWritePattern, shim branch):
//   w0 buffer length in 32-bit words (the product of the pattern's sizes, repeat excluded)
//   w1 buffer address low, w2 [15:0] address high (+ packet fields, unused here): left 0, the
//      DDR_PATCH of w1 writes the host buffer's address + offset at run time
//   w3 d0 wrap [29:20] (size, in words), d0 stride - 1 [19:0]
//   w4 burst length encoding [31:30], d1 wrap [29:20], d1 stride - 1 [19:0]
//   w5 d2 stride - 1 [19:0] (the d2 wrap is implicit in the length)
//   w6 iteration current [31:26], iteration wrap - 1 [25:20], iteration stride - 1 [19:0]
//   w7 next BD [30:27], use next [26], valid [25], lock fields (unused here)
// Sizes go in as they are, strides minus one (mlir-aie getHardwareStridesWraps); a contiguous
// pattern leaves all of w3..w5's dimension fields 0 (mlir-aie isLinearTransferWithoutTransformation).
// A pattern's `repeat` re-reads the same data, so, as mlir-aie does for a repeat with a zero
// stride, the BD's iteration stays 0 and the queue write's repeat field carries repeat - 1.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "npu/artifacts/insts.h"

namespace xdna::npu::insts {

namespace {

// Burst length encoding 2 = 256 bytes: the value mlir-aie's npu1 lowering writes (0x80000000),
// a size aie2p.md lists for both npu1 and npu2 (64/128/256[/512] B).
constexpr uint32_t kBurst256 = 2;
constexpr uint32_t kValidBd = 1u << 25;

struct ShimChannel {
  int col = 0;
  uint32_t direction = 0;  // 0 S2MM (drain into DDR), 1 MM2S (fill from DDR)
  int channel = 0;
  auto operator<=>(const ShimChannel&) const = default;
};

[[noreturn]] void fail(const Design& d, size_t step, const std::string& what) {
  throw std::invalid_argument("design " + d.name + ": sequence step " + std::to_string(step) + ": " + what);
}

// The shim end of a FIFO: its producer for a fill (MM2S), a row-0 consumer for a drain (S2MM).
ShimChannel shim_end(const Design& d, size_t step, const ObjectFifo& f, bool fill) {
  auto checked = [&](ShimChannel ch) {
    if (ch.col < 0 || ch.col >= kAie2p.columns || ch.channel < 0 || ch.channel >= kAie2p.shim.mm2s_channels)
      fail(d, step, "FIFO " + f.name + ": shim channel " + std::to_string(ch.channel) + " of column " +
                        std::to_string(ch.col) + " does not exist");
    return ch;
  };
  if (fill) {
    if (f.producer.tile.row != kAie2p.shim_row) fail(d, step, "fill of FIFO " + f.name + " whose producer is not a shim");
    return checked({f.producer.tile.col, 1, f.producer.channel});
  }
  for (const FifoEnd& c : f.consumers)
    if (c.tile.row == kAie2p.shim_row) return checked({c.tile.col, 0, c.channel});
  fail(d, step, "drain of FIFO " + f.name + " that has no shim consumer");
}

ShimChannel wait_end(const Design& d, size_t step, const ObjectFifo& f) {
  return f.producer.tile.row == kAie2p.shim_row ? shim_end(d, step, f, true) : shim_end(d, step, f, false);
}

// The 8 BD words for one transfer (layout above), and how many times the queue runs it.
struct ShimBd {
  std::vector<uint32_t> words;
  int64_t repeat = 1;
};

ShimBd shim_bd(const Design& d, size_t step, const AccessPattern& pattern) {
  AccessPattern ap = pattern;
  const int64_t eb = ap.elem_bytes;
  // Bounds first, so that no product below can overflow.
  if (eb <= 0 || eb > 64) fail(d, step, "elem_bytes " + std::to_string(eb) + " outside 1..64");
  if (ap.repeat < 1 || ap.repeat > 256)
    fail(d, step, "repeat " + std::to_string(ap.repeat) + " outside 1..256 (the queue's 8-bit repeat count + 1)");
  for (const Dim& dim : ap.dims)
    if (dim.size < 1 || dim.size > (int64_t{1} << 20) || dim.stride < 0 || dim.stride > (int64_t{1} << 32))
      fail(d, step, "dim of size " + std::to_string(dim.size) + " stride " + std::to_string(dim.stride) +
                        " outside the shim's range");
  // Outer dims of size 1 move nothing; an outermost dim with stride 0 re-reads the same data, so
  // it is a repeat (mlir-aie: a zero outer stride lowers to the queue's repeat count).
  while (ap.dims.size() > 1 && ap.dims.back().size == 1) ap.dims.pop_back();
  if (ap.dims.size() > 1 && ap.dims.back().stride == 0) {
    ap.repeat *= ap.dims.back().size;
    ap.dims.pop_back();
  }
  if (ap.dims.empty() || ap.dims.size() > 3)
    fail(d, step, std::to_string(ap.dims.size()) + " dims; a shim BD has 1 to 3 (plus repeat)");
  if (ap.repeat < 1 || ap.repeat > 256)
    fail(d, step, "repeat " + std::to_string(ap.repeat) + " outside 1..256 (the queue's 8-bit repeat count + 1)");
  int64_t elems = 1;
  bool linear = ap.dims[0].stride == 1;
  for (size_t i = 0; i < ap.dims.size(); ++i) {
    const Dim& dim = ap.dims[i];
    if (dim.size > 1 && dim.stride < 1)
      fail(d, step, "dim " + std::to_string(i) + " has size " + std::to_string(dim.size) + " stride " +
                        std::to_string(dim.stride));
    if (i > 0 && dim.size > 1 && dim.stride != elems) linear = false;
    if (elems > (int64_t{1} << 40) / dim.size) fail(d, step, "transfer of more than 2^40 elements");
    elems *= dim.size;
  }
  if ((elems * eb) % 4) fail(d, step, "transfer of " + std::to_string(elems * eb) + " bytes is not whole 32-bit words");
  const int64_t length_words = elems * eb / 4;
  if (length_words > UINT32_MAX) fail(d, step, "transfer of " + std::to_string(length_words) + " words too long");
  std::vector<uint32_t> w(kShimBdWords, 0);
  w[0] = static_cast<uint32_t>(length_words);
  w[4] = kBurst256 << 30;
  w[7] = kValidBd;
  if (linear) return {w, ap.repeat};
  // Dimension i in words: the innermost dim's size counts words, so it must cover whole words of
  // contiguous elements; every stride must land on a word. A size-1 dim's stride is never applied.
  auto words = [&](int64_t v, const char* what, size_t i) -> int64_t {
    if ((v * eb) % 4) fail(d, step, std::string(what) + " of dim " + std::to_string(i) + " is not whole 32-bit words");
    return v * eb / 4;
  };
  auto stride_words = [&](size_t i) -> int64_t {
    if (ap.dims[i].size == 1) return 1;  // never applied; encode as 0
    return words(ap.dims[i].stride, "stride", i);
  };
  if (eb < 4 && ap.dims[0].stride != 1) fail(d, step, "sub-word elements with an inner stride other than 1");
  const int64_t d0_size = words(ap.dims[0].size, "size", 0);
  const int64_t d0_stride = eb < 4 ? 1 : stride_words(0);
  auto field = [&](int64_t v, int64_t max, const char* what) {
    if (v < 0 || v > max) fail(d, step, std::string(what) + " " + std::to_string(v) + " exceeds the shim BD's " +
                                            std::to_string(max));
    return static_cast<uint32_t>(v);
  };
  w[3] = field(d0_size, 0x3FF, "d0 size (words)") << 20 | field(d0_stride - 1, 0xFFFFF, "d0 stride - 1 (words)");
  if (ap.dims.size() > 1) {
    const int64_t d1_stride = stride_words(1);
    w[4] |= field(ap.dims[1].size, 0x3FF, "d1 size") << 20 | field(d1_stride - 1, 0xFFFFF, "d1 stride - 1 (words)");
  }
  if (ap.dims.size() > 2)
    w[5] = field(stride_words(2) - 1, 0xFFFFF, "d2 stride - 1 (words)");
  return {w, ap.repeat};
}

}  // namespace

Stream lower_sequence(const Design& d) {
  Stream s;
  const int pool = kAie2p.shim.bds;
  // Per shim column: which BDs are in flight, and where the round-robin search starts.
  std::map<int, std::vector<bool>> busy;
  std::map<int, int> next_bd;
  // Per shim channel: the BDs issued since its last wait (freed by the wait).
  std::map<ShimChannel, std::vector<int>> outstanding;

  // A transfer issues a completion token when a later Wait on its channel relies on it: every
  // drain (mlir-aie: S2MM always issues one) and the last fill before a wait on its channel.
  std::vector<bool> token(d.sequence.size(), false);
  {
    std::map<ShimChannel, size_t> last_transfer;
    for (size_t i = 0; i < d.sequence.size(); ++i) {
      const SeqStep& st = d.sequence[i];
      const ObjectFifo* f = d.find_fifo(st.fifo);
      if (!f) fail(d, i, "unknown FIFO " + st.fifo);
      if (st.op == SeqOp::Wait) {
        auto it = last_transfer.find(wait_end(d, i, *f));
        if (it != last_transfer.end()) token[it->second] = true;
      } else {
        last_transfer[shim_end(d, i, *f, st.op == SeqOp::Fill)] = i;
        if (st.op == SeqOp::Drain) token[i] = true;
      }
    }
  }

  for (size_t i = 0; i < d.sequence.size(); ++i) {
    const SeqStep& st = d.sequence[i];
    const ObjectFifo& f = *d.find_fifo(st.fifo);
    if (st.op == SeqOp::Wait) {
      const ShimChannel ch = wait_end(d, i, f);
      Instr sync;
      sync.op = Op::Sync;
      sync.direction = ch.direction, sync.row = 0, sync.col = static_cast<uint32_t>(ch.col);
      sync.row_count = 1, sync.col_count = 1, sync.channel = static_cast<uint32_t>(ch.channel);
      s.ops.push_back(sync);
      for (int bd : outstanding[ch]) busy[ch.col][bd] = false;
      outstanding[ch].clear();
      continue;
    }
    const ShimChannel ch = shim_end(d, i, f, st.op == SeqOp::Fill);
    if (st.arg < 0 || (!d.args.empty() && st.arg >= static_cast<int>(d.args.size())))
      fail(d, i, "host argument " + std::to_string(st.arg) + " does not exist");
    auto& used = busy[ch.col];
    if (used.empty()) used.assign(pool, false);
    int bd = -1;
    for (int k = 0; k < pool; ++k) {
      const int cand = (next_bd[ch.col] + k) % pool;
      if (!used[cand]) {
        bd = cand;
        break;
      }
    }
    if (bd < 0)
      throw std::invalid_argument("design " + d.name + ": sequence step " + std::to_string(i) + ": shim (" +
                                  std::to_string(ch.col) + ",0) has all " + std::to_string(pool) +
                                  " BDs in flight (add a wait before more transfers)");
    used[bd] = true;
    next_bd[ch.col] = (bd + 1) % pool;
    outstanding[ch].push_back(bd);

    const uint32_t col = static_cast<uint32_t>(ch.col);
    Instr bw;
    bw.op = Op::BlockWrite;
    bw.col = col, bw.row = 0;
    bw.addr = tile_address(col, 0, shim_bd_offset(bd));
    ShimBd bd_words = shim_bd(d, i, st.pattern);
    bw.data = std::move(bd_words.words);
    s.ops.push_back(std::move(bw));

    // shim_bd() checked elem_bytes <= 64, so the product cannot overflow.
    if (st.pattern.offset < 0 || st.pattern.offset > UINT32_MAX)
      fail(d, i, "offset " + std::to_string(st.pattern.offset) + " outside 0..2^32-1");
    const int64_t offset_bytes = st.pattern.offset * st.pattern.elem_bytes;
    if (offset_bytes % 4 || offset_bytes > UINT32_MAX)
      fail(d, i, "byte offset " + std::to_string(offset_bytes) + " is not a 4-byte aligned u32");
    Instr patch;
    patch.op = Op::DdrPatch;
    patch.addr = tile_address(col, 0, shim_bd_offset(bd) + 4);  // BD word 1: address low
    patch.arg_index = static_cast<uint32_t>(st.arg);
    patch.arg_offset = static_cast<uint32_t>(offset_bytes);
    s.ops.push_back(patch);

    Instr queue;
    queue.op = Op::Write32;
    queue.addr = tile_address(col, 0, shim_queue_offset(ch.direction, static_cast<uint32_t>(ch.channel)));
    queue.value = static_cast<uint32_t>(bd) | static_cast<uint32_t>(bd_words.repeat - 1) << 16 |
                  (token[i] ? 1u << 31 : 0u);
    s.ops.push_back(queue);
  }
  return s;
}

}  // namespace xdna::npu::insts

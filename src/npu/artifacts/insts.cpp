// Instruction-stream words (insts.h): the "transaction" format version 0.1 that mlir-aie's
// AIETargetNPU.cpp writes (aie2p.md "Instruction stream"). Every record starts with its opcode
// word; the size word (in bytes) sits at word 5 (WRITE32), 6 (MASKWRITE), 3 (BLOCKWRITE) or 1
// (TCT sync, DDR_PATCH). Words the format reserves are written 0 and must read back 0, so that a
// decoded stream re-encodes to the same words. lower_sequence(): insts_lower.cpp.
#include "npu/artifacts/insts.h"

#include <cstdio>
#include <stdexcept>
#include <string>

namespace xdna::npu::insts {

namespace {

constexpr uint32_t kMajor = 0, kMinor = 1;
constexpr uint32_t kHeaderWords = 4;
constexpr uint32_t kWrite32Words = 6, kMaskWriteWords = 7, kSyncWords = 4, kDdrPatchWords = 12;
constexpr uint32_t kBlockWriteHeaderWords = 4;

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

void check_byte(uint32_t v, const char* what, size_t op_index) {
  if (v > 0xFF)
    throw std::invalid_argument("insts encode: op " + std::to_string(op_index) + ": " + what + " " +
                                std::to_string(v) + " does not fit 8 bits");
}

[[noreturn]] void bad(size_t word, const std::string& what) {
  throw std::invalid_argument("insts decode: word " + std::to_string(word) + ": " + what);
}

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::Write32: return "WRITE32";
    case Op::BlockWrite: return "BLOCKWRITE";
    case Op::MaskWrite: return "MASKWRITE";
    case Op::Sync: return "SYNC";
    case Op::DdrPatch: return "DDR_PATCH";
  }
  return "UNKNOWN";
}

uint32_t tile_address(uint32_t col, uint32_t row, uint32_t offset) {
  if (col > 0x7F || row > 0x1F || offset > 0xFFFFF)
    throw std::invalid_argument("tile_address: (" + std::to_string(col) + "," + std::to_string(row) + ")+" +
                                hex(offset) + " does not fit col<<25 | row<<20 | offset");
  return col << 25 | row << 20 | offset;
}

uint32_t shim_bd_offset(uint32_t bd) { return kShimBdBase + kShimBdStride * bd; }

uint32_t shim_queue_offset(uint32_t direction, uint32_t ch) {
  return kShimChannelBase + 8 * ch + (direction ? 0x10 : 0) + 4;
}

std::string shim_register_name(uint32_t offset) {
  if (offset >= kShimBdBase && offset < kShimBdBase + 16 * kShimBdStride) {
    const uint32_t bd = (offset - kShimBdBase) / kShimBdStride, word = (offset - kShimBdBase) % kShimBdStride / 4;
    if (offset % 4) return "";
    return "BD " + std::to_string(bd) + (word ? " word " + std::to_string(word) : "");
  }
  if (offset >= kShimChannelBase && offset < kShimChannelBase + 0x20 && offset % 4 == 0) {
    const uint32_t rel = offset - kShimChannelBase;
    const char* dir = rel >= 0x10 ? "MM2S" : "S2MM";
    const uint32_t ch = (rel % 0x10) / 8;
    return std::string(dir) + " " + std::to_string(ch) + (rel % 8 ? " queue" : " ctrl");
  }
  return "";
}

std::vector<uint32_t> encode(const Stream& s) {
  check_byte(s.dev_gen, "dev_gen", 0);
  check_byte(s.rows, "rows", 0);
  check_byte(s.cols, "cols", 0);
  check_byte(s.mem_rows, "mem_rows", 0);
  std::vector<uint32_t> w = {kMajor | kMinor << 8 | s.dev_gen << 16 | s.rows << 24, s.cols | s.mem_rows << 8,
                             static_cast<uint32_t>(s.ops.size()), 0};
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Instr& in = s.ops[i];
    switch (in.op) {
      case Op::Write32:
        w.insert(w.end(), {0u, 0u, in.addr, 0u, in.value, kWrite32Words * 4});
        break;
      case Op::MaskWrite:
        w.insert(w.end(), {3u, 0u, in.addr, 0u, in.value, in.mask, kMaskWriteWords * 4});
        break;
      case Op::BlockWrite: {
        check_byte(in.col, "col", i);
        check_byte(in.row, "row", i);
        if (in.data.empty()) throw std::invalid_argument("insts encode: op " + std::to_string(i) + ": empty BLOCKWRITE");
        const size_t bytes = 4 * (kBlockWriteHeaderWords + in.data.size());
        w.insert(w.end(), {1u, in.col | in.row << 8, in.addr, static_cast<uint32_t>(bytes)});
        w.insert(w.end(), in.data.begin(), in.data.end());
        break;
      }
      case Op::Sync:
        for (auto [v, what] : {std::pair{in.direction, "direction"}, {in.row, "row"}, {in.col, "col"},
                               {in.row_count, "row_count"}, {in.col_count, "col_count"}, {in.channel, "channel"}})
          check_byte(v, what, i);
        w.insert(w.end(), {0x80u, kSyncWords * 4, in.direction | in.row << 8 | in.col << 16,
                           in.row_count << 8 | in.col_count << 16 | in.channel << 24});
        break;
      case Op::DdrPatch:
        w.insert(w.end(), {0x81u, kDdrPatchWords * 4, 0u, 0u, 0u, 0u, in.addr, 0u, in.arg_index, 0u, in.arg_offset, 0u});
        break;
      default:
        throw std::invalid_argument("insts encode: op " + std::to_string(i) + ": unknown op " +
                                    std::to_string(static_cast<uint32_t>(in.op)));
    }
  }
  w[3] = static_cast<uint32_t>(w.size() * 4);
  return w;
}

Stream decode(std::span<const uint32_t> w) {
  const size_t n = w.size();
  if (n < kHeaderWords) bad(n, "stream of " + std::to_string(n) + " words is shorter than the 4-word header");
  Stream s;
  const uint32_t major = w[0] & 0xFF, minor = (w[0] >> 8) & 0xFF;
  if (major != kMajor || minor != kMinor)
    bad(0, "format version " + std::to_string(major) + "." + std::to_string(minor) + " (only 0.1 is known)");
  s.dev_gen = (w[0] >> 16) & 0xFF;
  s.rows = w[0] >> 24;
  if (w[1] >> 16) bad(1, "reserved bits [31:16] are " + hex(w[1] >> 16));
  s.cols = w[1] & 0xFF;
  s.mem_rows = (w[1] >> 8) & 0xFF;
  const uint32_t count = w[2];
  if (uint64_t(w[3]) != uint64_t(n) * 4)
    bad(3, "header says " + std::to_string(w[3]) + " bytes, the stream has " + std::to_string(n * 4));
  // Every op takes at least 4 words: a count beyond that cannot be right (and bounds reserve()).
  if (count > (n - kHeaderWords) / 4)
    bad(2, "op count " + std::to_string(count) + " cannot fit in " + std::to_string(n - kHeaderWords) + " words");
  s.ops.reserve(count);
  size_t p = kHeaderWords;
  auto need = [&](size_t words, const char* what) {
    if (n - p < words)
      bad(p, std::string(what) + " needs " + std::to_string(words) + " words, " + std::to_string(n - p) + " remain");
  };
  auto zero = [&](size_t at) {
    if (w[at] != 0) bad(at, "reserved word is " + hex(w[at]) + ", expected 0");
  };
  auto size_word = [&](size_t at, uint32_t expect, const char* what) {
    if (w[at] != expect)
      bad(at, std::string(what) + " size word is " + std::to_string(w[at]) + ", expected " + std::to_string(expect));
  };
  for (uint32_t i = 0; i < count; ++i) {
    if (p >= n) bad(p, "stream ends before op " + std::to_string(i) + " of " + std::to_string(count));
    Instr in;
    switch (w[p]) {
      case 0:
        need(kWrite32Words, "WRITE32");
        zero(p + 1), zero(p + 3), size_word(p + 5, kWrite32Words * 4, "WRITE32");
        in.op = Op::Write32, in.addr = w[p + 2], in.value = w[p + 4];
        p += kWrite32Words;
        break;
      case 3:
        need(kMaskWriteWords, "MASKWRITE");
        zero(p + 1), zero(p + 3), size_word(p + 6, kMaskWriteWords * 4, "MASKWRITE");
        in.op = Op::MaskWrite, in.addr = w[p + 2], in.value = w[p + 4], in.mask = w[p + 5];
        p += kMaskWriteWords;
        break;
      case 1: {
        need(kBlockWriteHeaderWords, "BLOCKWRITE");
        if (w[p + 1] >> 16) bad(p + 1, "BLOCKWRITE col/row word has bits above 15 set: " + hex(w[p + 1]));
        const uint32_t bytes = w[p + 3];
        if (bytes % 4 || bytes <= 4 * kBlockWriteHeaderWords)
          bad(p + 3, "BLOCKWRITE size " + std::to_string(bytes) + " is not 16 + 4N bytes with N > 0");
        need(bytes / 4, "BLOCKWRITE");
        in.op = Op::BlockWrite, in.col = w[p + 1] & 0xFF, in.row = (w[p + 1] >> 8) & 0xFF, in.addr = w[p + 2];
        in.data.assign(w.begin() + p + kBlockWriteHeaderWords, w.begin() + p + bytes / 4);
        p += bytes / 4;
        break;
      }
      case 0x80:
        need(kSyncWords, "SYNC");
        size_word(p + 1, kSyncWords * 4, "SYNC");
        if (w[p + 2] >> 24) bad(p + 2, "SYNC bits [31:24] are " + hex(w[p + 2] >> 24) + ", expected 0");
        if (w[p + 3] & 0xFF) bad(p + 3, "SYNC bits [7:0] are " + hex(w[p + 3] & 0xFF) + ", expected 0");
        in.op = Op::Sync;
        in.direction = w[p + 2] & 0xFF, in.row = (w[p + 2] >> 8) & 0xFF, in.col = (w[p + 2] >> 16) & 0xFF;
        in.row_count = (w[p + 3] >> 8) & 0xFF, in.col_count = (w[p + 3] >> 16) & 0xFF, in.channel = w[p + 3] >> 24;
        p += kSyncWords;
        break;
      case 0x81:
        need(kDdrPatchWords, "DDR_PATCH");
        size_word(p + 1, kDdrPatchWords * 4, "DDR_PATCH");
        for (size_t k : {2, 3, 4, 5, 7, 9, 11}) zero(p + k);
        in.op = Op::DdrPatch, in.addr = w[p + 6], in.arg_index = w[p + 8], in.arg_offset = w[p + 10];
        p += kDdrPatchWords;
        break;
      default:
        bad(p, "unknown op " + hex(w[p]) + " (op " + std::to_string(i) + " of " + std::to_string(count) + ")");
    }
    s.ops.push_back(std::move(in));
  }
  if (p != n) bad(p, std::to_string(n - p) + " words follow the last of " + std::to_string(count) + " ops");
  return s;
}

namespace {

// "(col,row)+0x1d004 [BD 0 word 1]"
std::string where(uint32_t addr) {
  const uint32_t col = addr >> 25, row = (addr >> 20) & 0x1F, off = addr & 0xFFFFF;
  char buf[48];
  std::snprintf(buf, sizeof buf, "(%u,%u)+0x%05x", col, row, off);
  std::string s = buf;
  if (row == 0) {
    const std::string name = shim_register_name(off);
    if (!name.empty()) s += " [" + name + "]";
  }
  return s;
}

}  // namespace

std::string to_text(const Stream& s) {
  const size_t bytes = encode(s).size() * 4;
  std::string out = "insts v0.1: dev_gen " + std::to_string(s.dev_gen) + ", " + std::to_string(s.cols) + " cols x " +
                    std::to_string(s.rows) + " rows (" + std::to_string(s.mem_rows) + " memtile row), " +
                    std::to_string(s.ops.size()) + " ops, " + std::to_string(bytes) + " bytes\n";
  char buf[64];
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Instr& in = s.ops[i];
    std::snprintf(buf, sizeof buf, "%4zu %-10s ", i, std::string(op_name(in.op)).c_str());
    std::string line = buf;
    switch (in.op) {
      case Op::Write32:
        line += where(in.addr) + " = " + hex(in.value);
        if ((in.addr >> 20 & 0x1F) == 0 && shim_register_name(in.addr & 0xFFFFF).ends_with("queue"))
          line += " (bd " + std::to_string(in.value & 0xF) + ", repeat " + std::to_string((in.value >> 16 & 0xFF) + 1) +
                  (in.value >> 31 ? ", token" : "") + ")";
        break;
      case Op::MaskWrite:
        line += where(in.addr) + " = " + hex(in.value) + " mask " + hex(in.mask);
        break;
      case Op::BlockWrite:
        line += where(in.addr) + " tile (" + std::to_string(in.col) + "," + std::to_string(in.row) + "), " +
                std::to_string(in.data.size()) + " words:";
        for (uint32_t d : in.data) (line += ' ') += hex(d);
        break;
      case Op::Sync:
        line += std::string(in.direction ? "MM2S " : "S2MM ") + std::to_string(in.channel) + " of (" +
                std::to_string(in.col) + "," + std::to_string(in.row) + "), " + std::to_string(in.col_count) +
                " col x " + std::to_string(in.row_count) + " row";
        break;
      case Op::DdrPatch:
        line += where(in.addr) + " += arg " + std::to_string(in.arg_index) + " + " + std::to_string(in.arg_offset) +
                " bytes";
        break;
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace xdna::npu::insts

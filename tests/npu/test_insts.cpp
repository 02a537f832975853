// Instruction streams: golden words written by hand from aie2p.md's "Instruction stream" table
// (not by calling encode), decode errors, round trips of real designs' lowered sequences, and
// the lowering of designs/gemv_bf16_1024x1024_c2.json checked word by word.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "npu/artifacts/insts.h"
#include "npu/design.h"
#include "npu/design_families.h"

using namespace xdna;
using namespace xdna::npu;
using namespace xdna::npu::insts;

namespace {

Instr write32(uint32_t addr, uint32_t value) {
  Instr i;
  i.op = Op::Write32, i.addr = addr, i.value = value;
  return i;
}

// One of each op, and its words by hand.
Stream one_of_each() {
  Stream s;  // npu2: dev_gen 4, 6 rows, 8 cols, 1 memtile row
  s.ops.push_back(write32(0x0201D204, 0x80000003));
  Instr bw;
  bw.op = Op::BlockWrite, bw.col = 1, bw.row = 0, bw.addr = 0x0201D000;
  bw.data = {0x100, 0, 0, 0, 0x80000000, 0, 0, 0x02000000};
  s.ops.push_back(bw);
  Instr mw;
  mw.op = Op::MaskWrite, mw.addr = 0x1D210, mw.value = 0xF00, mw.mask = 0xF00;
  s.ops.push_back(mw);
  Instr sy;
  sy.op = Op::Sync, sy.direction = 0, sy.row = 0, sy.col = 1, sy.row_count = 1, sy.col_count = 1, sy.channel = 0;
  s.ops.push_back(sy);
  Instr dp;
  dp.op = Op::DdrPatch, dp.addr = 0x0201D004, dp.arg_index = 2, dp.arg_offset = 1024;
  s.ops.push_back(dp);
  return s;
}

const std::vector<uint32_t> kOneOfEachWords = {
    // header: major 0 | minor 1<<8 | devGen 4<<16 | rows 6<<24; cols 8 | memRows 1<<8; 5 ops; 45 words
    0x06040100, 0x00000108, 5, 180,
    // WRITE32 [0, 0, addr, 0, value, 24]
    0, 0, 0x0201D204, 0, 0x80000003, 24,
    // BLOCKWRITE [1, col | row<<8, addr, 16 + 4*8], 8 data words
    1, 1, 0x0201D000, 48, 0x100, 0, 0, 0, 0x80000000, 0, 0, 0x02000000,
    // MASKWRITE [3, 0, addr, 0, value, mask, 28]
    3, 0, 0x1D210, 0, 0xF00, 0xF00, 28,
    // TCT sync [0x80, 16, dir | row<<8 | col<<16, rownum<<8 | colnum<<16 | channel<<24]
    0x80, 16, 0x00010000, 0x00010100,
    // DDR_PATCH: 12 words, w1 = 48, w6 = register, w8 = arg index, w10 = byte offset
    0x81, 48, 0, 0, 0, 0, 0x0201D004, 0, 2, 0, 1024, 0};

// What decode() says about `words`, or "" when it accepts them.
std::string decode_error(const std::vector<uint32_t>& words) {
  try {
    decode(words);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::map<Op, int> op_counts(const Stream& s) {
  std::map<Op, int> n;
  for (const Instr& i : s.ops) ++n[i.op];
  return n;
}

std::string designs_dir() { return std::string(XDNA_FIXTURE_DIR) + "/../../designs/"; }

}  // namespace

TEST(Insts, TileAddressPacksColumnRowOffset) {
  EXPECT_EQ(tile_address(0, 0, 0x1D000), 0x1D000u);
  EXPECT_EQ(tile_address(3, 2, 0x1234), (3u << 25) | (2u << 20) | 0x1234u);
  EXPECT_EQ(tile_address(7, 5, 0xFFFFF), 0x0E000000u | 0x00500000u | 0xFFFFFu);
  EXPECT_THROW(tile_address(0, 0, 0x100000), std::invalid_argument);
  EXPECT_THROW(tile_address(0, 32, 0), std::invalid_argument);
  EXPECT_EQ(shim_bd_offset(0), 0x1D000u);
  EXPECT_EQ(shim_bd_offset(15), 0x1D1E0u);
  EXPECT_EQ(shim_queue_offset(0, 0), 0x1D204u);  // S2MM 0
  EXPECT_EQ(shim_queue_offset(0, 1), 0x1D20Cu);  // S2MM 1
  EXPECT_EQ(shim_queue_offset(1, 0), 0x1D214u);  // MM2S 0
  EXPECT_EQ(shim_queue_offset(1, 1), 0x1D21Cu);  // MM2S 1
  EXPECT_EQ(shim_register_name(0x1D024), "BD 1 word 1");
  EXPECT_EQ(shim_register_name(0x1D1E0), "BD 15");
  EXPECT_EQ(shim_register_name(0x1D21C), "MM2S 1 queue");
  EXPECT_EQ(shim_register_name(0x1D200), "S2MM 0 ctrl");
  EXPECT_EQ(shim_register_name(0x12345), "");
}

TEST(Insts, EncodesEachOpToTheDocumentedWords) {
  EXPECT_EQ(encode(one_of_each()), kOneOfEachWords);
  Stream npu1;
  npu1.dev_gen = 3, npu1.cols = 5;
  // mlir-aie's npu1 header: 0x06030100, 0x00000105, 0 ops, 16 bytes
  EXPECT_EQ(encode(npu1), (std::vector<uint32_t>{0x06030100, 0x00000105, 0, 16}));
}

TEST(Insts, DecodesTheDocumentedWordsAndRoundTrips) {
  const Stream s = decode(kOneOfEachWords);
  EXPECT_EQ(s, one_of_each());
  EXPECT_EQ(s.ops[3].col, 1u);
  EXPECT_EQ(s.ops[4].arg_offset, 1024u);
}

TEST(Insts, DecodeErrorsNameTheWord) {
  std::vector<uint32_t> w = kOneOfEachWords;
  EXPECT_NE(decode_error({0x06040100, 0x108}).find("word 2"), std::string::npos);  // short header

  // Truncated: drop the DDR_PATCH's last 2 words and fix the byte count.
  w.resize(w.size() - 2);
  w[3] = static_cast<uint32_t>(w.size() * 4);
  EXPECT_NE(decode_error(w).find("word 33: DDR_PATCH needs 12 words, 10 remain"), std::string::npos) << decode_error(w);

  w = kOneOfEachWords;
  w[10] = 0x42;  // the BLOCKWRITE's opcode word
  EXPECT_NE(decode_error(w).find("word 10: unknown op 0x42"), std::string::npos) << decode_error(w);

  w = kOneOfEachWords;
  w[2] = 6;  // one op more than the body holds
  EXPECT_NE(decode_error(w).find("word 45: stream ends before op 5"), std::string::npos) << decode_error(w);
  w[2] = 4;  // one op fewer: the DDR_PATCH is left over
  EXPECT_NE(decode_error(w).find("word 33: 12 words follow"), std::string::npos) << decode_error(w);
  w[2] = 1000;  // more ops than could fit
  EXPECT_NE(decode_error(w).find("word 2: op count 1000"), std::string::npos) << decode_error(w);

  w = kOneOfEachWords;
  w[3] = 176;
  EXPECT_NE(decode_error(w).find("word 3: header says 176 bytes"), std::string::npos);

  w = kOneOfEachWords;
  w[13] = 0x10000;  // BLOCKWRITE size runs past the end
  EXPECT_NE(decode_error(w).find("word 10: BLOCKWRITE needs 16384 words"), std::string::npos) << decode_error(w);
  w[13] = 14;  // not 16 + 4N
  EXPECT_NE(decode_error(w).find("word 13: BLOCKWRITE size 14"), std::string::npos);

  w = kOneOfEachWords;
  w[9] = 28;  // WRITE32 size word
  EXPECT_NE(decode_error(w).find("word 9: WRITE32 size word is 28, expected 24"), std::string::npos);

  w = kOneOfEachWords;
  w[38] = 7;  // a reserved DDR_PATCH word
  EXPECT_NE(decode_error(w).find("word 38: reserved word"), std::string::npos) << decode_error(w);

  w = kOneOfEachWords;
  w[0] = 0x06040001;  // version 1.0
  EXPECT_NE(decode_error(w).find("word 0: format version 1.0"), std::string::npos);

  // Every truncation of a valid stream is rejected, never read past.
  for (size_t n = 0; n < kOneOfEachWords.size(); ++n) {
    std::vector<uint32_t> t(kOneOfEachWords.begin(), kOneOfEachWords.begin() + n);
    if (t.size() > 3) t[3] = static_cast<uint32_t>(n * 4);
    EXPECT_NE(decode_error(t), "") << n;
  }
}

TEST(Insts, TextNamesOpsTilesAndShimRegisters) {
  const std::string t = to_text(one_of_each());
  EXPECT_NE(t.find("5 ops, 180 bytes"), std::string::npos) << t;
  EXPECT_NE(t.find("WRITE32    (1,0)+0x1d204 [S2MM 0 queue] = 0x80000003 (bd 3, repeat 1, token)"), std::string::npos) << t;
  EXPECT_NE(t.find("BLOCKWRITE (1,0)+0x1d000 [BD 0] tile (1,0), 8 words: 0x100"), std::string::npos) << t;
  EXPECT_NE(t.find("SYNC       S2MM 0 of (1,0), 1 col x 1 row"), std::string::npos) << t;
  EXPECT_NE(t.find("DDR_PATCH  (1,0)+0x1d004 [BD 0 word 1] += arg 2 + 1024 bytes"), std::string::npos) << t;
}

// designs/gemv_bf16_1024x1024_c2.json: per column, fills of x (shim MM2S 1) and W (MM2S 0) and a
// drain of y (S2MM 0), then a wait on each of the six.
TEST(Insts, LowersTheGemvExampleDesign) {
  const Design d = load_design(designs_dir() + "gemv_bf16_1024x1024_c2.json");
  const Stream s = lower_sequence(d);
  const auto n = op_counts(s);
  EXPECT_EQ(n.at(Op::BlockWrite), 6);
  EXPECT_EQ(n.at(Op::DdrPatch), 6);
  EXPECT_EQ(n.at(Op::Write32), 6);
  EXPECT_EQ(n.at(Op::Sync), 6);
  EXPECT_EQ(n.count(Op::MaskWrite), 0u);
  ASSERT_EQ(s.ops.size(), 24u);

  // First fill: x_c0, arg 1, 512 words contiguous -> shim (0,0) BD 0, dims left 0 (linear),
  // burst 256 B (2<<30), valid (1<<25).
  EXPECT_EQ(s.ops[0].op, Op::BlockWrite);
  EXPECT_EQ(s.ops[0].addr, 0x1D000u);
  EXPECT_EQ(s.ops[0].data, (std::vector<uint32_t>{512, 0, 0, 0, 0x80000000, 0, 0, 0x02000000}));
  EXPECT_EQ(s.ops[1].op, Op::DdrPatch);
  EXPECT_EQ(s.ops[1].addr, 0x1D004u);
  EXPECT_EQ(s.ops[1].arg_index, 1u);
  EXPECT_EQ(s.ops[1].arg_offset, 0u);
  // MM2S 1 queue: 0x1D200 + 8 + 0x10 + 4; BD 0, repeat field 0, token (a wait follows).
  EXPECT_EQ(s.ops[2].op, Op::Write32);
  EXPECT_EQ(s.ops[2].addr, 0x1D21Cu);
  EXPECT_EQ(s.ops[2].value, 0x80000000u);
  // W of column 0: 512 x 512 words, BD 1 on MM2S 0.
  EXPECT_EQ(s.ops[3].data[0], 262144u);
  EXPECT_EQ(s.ops[3].addr, 0x1D020u);
  EXPECT_EQ(s.ops[5].addr, 0x1D214u);
  EXPECT_EQ(s.ops[5].value, 0x80000001u);
  // y of column 0 drains through S2MM 0 with BD 2.
  EXPECT_EQ(s.ops[8].addr, 0x1D204u);
  EXPECT_EQ(s.ops[8].value, 0x80000002u);
  // Column 1's W starts 1 MiB into the weights, its y 1 KiB into y; its BDs restart at 0.
  EXPECT_EQ(s.ops[9].addr, 0x0201D000u);
  EXPECT_EQ(s.ops[13].addr, 0x0201D024u);
  EXPECT_EQ(s.ops[13].arg_index, 0u);
  EXPECT_EQ(s.ops[13].arg_offset, 1048576u);
  EXPECT_EQ(s.ops[16].arg_offset, 1024u);
  // First wait: y_c0 -> S2MM 0 of (0,0); then W (MM2S 0), x (MM2S 1).
  EXPECT_EQ(s.ops[18], decode(encode(s)).ops[18]);
  EXPECT_EQ(encode(s)[3], 4u * encode(s).size());
  const std::vector<uint32_t> w = encode(s);
  // Op 18 starts after 6 x (12 + 12 + 6) words of transfers + the header.
  EXPECT_EQ(std::vector<uint32_t>(w.begin() + 4 + 180, w.begin() + 4 + 188),
            (std::vector<uint32_t>{0x80, 16, 0x000000, 0x00010100, 0x80, 16, 0x000001, 0x00010100}));
}

TEST(Insts, RealDesignsRoundTrip) {
  const DecodeLayerShape qwen3{1024, 16, 8, 128, 3072, 64, true, false};
  for (const Design& d : {gemv_design(DType::BF16, 3072, 1024), decode_layer_design(DType::I8, qwen3),
                          lm_head_design(DType::I8, 151936, 1024), load_design(designs_dir() + "rmsnorm_1x1024_c1.json")}) {
    const Stream s = lower_sequence(d);
    EXPECT_FALSE(s.ops.empty()) << d.name;
    const std::vector<uint32_t> w = encode(s);
    EXPECT_EQ(decode(w), s) << d.name;
    EXPECT_EQ(encode(decode(w)), w) << d.name;
  }
}

namespace {

// One shim (2,0) feeding memtile (2,1) over MM2S 0 and draining from it over S2MM 1.
Design tiny(std::vector<SeqStep> seq) {
  Design d;
  d.name = "tiny";
  d.fifos.push_back({"in", {{2, 0}, 0}, {{{2, 1}, 0}}, 2, 1024, 1});
  d.fifos.push_back({"out", {{2, 1}, 0}, {{{2, 0}, 1}}, 2, 1024, 1});
  d.args = {{"a", 1 << 20}, {"b", 1 << 20}};
  d.sequence = std::move(seq);
  return d;
}

SeqStep fill(AccessPattern p, int arg = 0) { return {SeqOp::Fill, "in", arg, std::move(p)}; }
SeqStep drain(AccessPattern p, int arg = 1) { return {SeqOp::Drain, "out", arg, std::move(p)}; }
SeqStep wait(const std::string& fifo) { return {SeqOp::Wait, fifo, 0, {}}; }
AccessPattern linear(int64_t words) { return {4, 0, {{words, 1}}, 1}; }

}  // namespace

TEST(Insts, EncodesStridedPatternsAsWrapsAndStridesMinusOne) {
  // 2 x 4 rows of 8 words, rows 32 words apart, blocks 256 apart, starting at word 16.
  AccessPattern p{4, 16, {{8, 1}, {4, 32}, {2, 256}}, 3};
  Stream s = lower_sequence(tiny({fill(p), wait("in")}));
  ASSERT_EQ(s.ops.size(), 4u);
  EXPECT_EQ(s.ops[0].addr, tile_address(2, 0, 0x1D000));
  EXPECT_EQ(s.ops[0].col, 2u);
  // length 64 words; d0 wrap 8 <<20, stride 1-1; burst | d1 wrap 4<<20 | 32-1; d2 stride 256-1.
  EXPECT_EQ(s.ops[0].data, (std::vector<uint32_t>{64, 0, 0, 0x00800000, 0x8040001F, 0xFF, 0, 0x02000000}));
  EXPECT_EQ(s.ops[1].arg_offset, 64u);
  // repeat 3 -> repeat field 2; token since a wait follows.
  EXPECT_EQ(s.ops[2].value, 0x80020000u);
  EXPECT_EQ(s.ops[3].op, Op::Sync);
  EXPECT_EQ(s.ops[3].direction, 1u);
  EXPECT_EQ(s.ops[3].col, 2u);

  // bf16: 16 elements = 8 words inner, rows 64 elements = 32 words apart.
  AccessPattern h{2, 0, {{16, 1}, {4, 64}}, 1};
  s = lower_sequence(tiny({drain(h)}));
  EXPECT_EQ(s.ops[0].data, (std::vector<uint32_t>{32, 0, 0, 0x00800000, 0x8040001F, 0, 0, 0x02000000}));
  EXPECT_EQ(s.ops[2].addr, tile_address(2, 0, 0x1D20C));  // S2MM 1 queue
  EXPECT_EQ(s.ops[2].value, 0x80000000u);                 // drains always issue a token

  // An outer stride-0 dim re-reads the same words: a repeat (as the fused designs' input vector).
  s = lower_sequence(tiny({fill({4, 0, {{512, 1}, {4, 0}, {1, 512}}, 1})}));
  EXPECT_EQ(s.ops[0].data, (std::vector<uint32_t>{512, 0, 0, 0, 0x80000000, 0, 0, 0x02000000}));
  EXPECT_EQ(s.ops[2].value, 0x00030000u);  // repeat 4 -> field 3; no wait follows: no token

  // Patterns the shim BD cannot express.
  EXPECT_THROW(lower_sequence(tiny({fill({4, 0, {{8, 1}, {4, 0}, {2, 64}}, 1})})), std::invalid_argument);  // inner 0 stride
  EXPECT_THROW(lower_sequence(tiny({fill({4, 0, {{2000, 1}, {2, 4000}}, 1})})), std::invalid_argument);  // d0 > 1023
  EXPECT_THROW(lower_sequence(tiny({fill({2, 1, {{4, 1}}, 1})})), std::invalid_argument);   // offset 2 bytes
  EXPECT_THROW(lower_sequence(tiny({fill({2, 0, {{3, 1}}, 1})})), std::invalid_argument);   // 6 bytes
  EXPECT_THROW(lower_sequence(tiny({fill({4, int64_t{1} << 40, {{4, 1}}, 1})})), std::invalid_argument);  // offset
  EXPECT_THROW(lower_sequence(tiny({fill({4, 0, {{4, 1}}, 300})})), std::invalid_argument);  // repeat > 256
  EXPECT_THROW(lower_sequence(tiny({fill({4, 0, {{1 << 20, 1}, {1 << 20, 1 << 20}, {1 << 20, 1}}, 1})})),
               std::invalid_argument);  // 2^60 elements
  EXPECT_THROW(lower_sequence(tiny({fill({4, 0, {{2, 1}, {2, 4}, {2, 16}, {2, 64}}, 1})})), std::invalid_argument);  // 4 dims
}

TEST(Insts, AllocatesShimBdsRoundRobinAndFreesThemOnWait) {
  Stream s = lower_sequence(tiny({fill(linear(4)), wait("in"), fill(linear(4)), wait("in")}));
  EXPECT_EQ(s.ops[0].addr, tile_address(2, 0, shim_bd_offset(0)));
  EXPECT_EQ(s.ops[4].addr, tile_address(2, 0, shim_bd_offset(1)));  // next in turn, not the freed 0
  EXPECT_EQ(s.ops[6].value & 0xF, 1u);

  std::vector<SeqStep> seq(16, fill(linear(4)));
  seq.push_back(wait("in"));
  seq.push_back(fill(linear(4)));  // BD 0 again after the wait freed all 16
  s = lower_sequence(tiny(seq));
  EXPECT_EQ(s.ops.back().value & 0xF, 0u);
  // Only the last fill before the wait carries the token.
  EXPECT_EQ(s.ops[2].value >> 31, 0u);
  EXPECT_EQ(s.ops[47].value >> 31, 1u);

  seq.assign(17, fill(linear(4)));
  try {
    lower_sequence(tiny(seq));
    FAIL() << "17 BDs in flight on one shim";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("design tiny"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shim (2,0)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lower_sequence(tiny({wait("nope")})), std::invalid_argument);
  EXPECT_THROW(lower_sequence(tiny({{SeqOp::Fill, "out", 0, linear(4)}})), std::invalid_argument);  // no shim producer
}

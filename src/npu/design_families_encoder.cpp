// Encoder attention (design_families.h, "Encoder attention"): flash-attention tiles of query
// rows per core, K/V blocks streamed through the memtile and broadcast to a column's 4 cores,
// (head, round) units dealt to the columns in turn. The core kernel is
// aie_kernels/attention_encoder_bf16.cc; npu-sim runs it tile by tile (sim_exec_encoder.h).
#include <algorithm>
#include <stdexcept>

#include "npu/design_families.h"

namespace xdna::npu {

namespace {

constexpr int kCores = 4;  // compute rows per column (aie2p.md: array, rows 2-5 compute)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

using gen::shim;
using gen::mem;
using gen::core;
using gen::cname;
using gen::crname;

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("encoder_attention: " + what);
}

// L1 per core: q tile and out tile double-buffered, K/V block double-buffered, f32 running
// output, max and sum, one f32 score row of a block, the stack.
int64_t core_bytes(int64_t tq, int64_t kb, int64_t D) {
  return 2 * tq * D * 2 + 2 * tq * D * 2 + 2 * 2 * kb * D * 2 + tq * D * 4 + 2 * tq * 4 + kb * 4 + kStackBytes;
}

// Keys [lo, hi] some row of [q0, q1) can see (hi < lo: none).
void visible_keys(const EncoderAttentionShape& s, int64_t q0, int64_t q1, int64_t& lo, int64_t& hi) {
  lo = 0, hi = s.S - 1;
  if (s.causal) hi = std::min(hi, q1 - 1);
  if (s.window > 0) {
    lo = std::max<int64_t>(lo, q0 - s.window + 1);
    if (!s.causal) hi = std::min(hi, q1 - 1 + s.window - 1);
  }
}

}  // namespace

std::vector<EncoderAttentionUnit> encoder_attention_units(const EncoderAttentionShape& s, int64_t tq, int64_t kb,
                                                          int columns, int column) {
  const int64_t rounds = ceil_div(s.T, kCores * tq);
  std::vector<EncoderAttentionUnit> out;
  for (int64_t u = column; u < s.heads * rounds; u += columns) {
    EncoderAttentionUnit e;
    e.head = u / rounds;
    e.q0 = (u % rounds) * kCores * tq;
    int64_t lo = 0, hi = 0;
    visible_keys(s, e.q0, std::min(s.T, e.q0 + kCores * tq), lo, hi);
    if (hi >= lo) e.b0 = lo / kb, e.b1 = hi / kb + 1;
    out.push_back(e);
  }
  return out;
}

Design encoder_attention_design(const EncoderAttentionShape& s, int columns) {
  for (auto [what, v] : {std::pair{"T", s.T}, {"S", s.S}, {"heads", s.heads}, {"kv_heads", s.kv_heads},
                         {"head_dim", s.head_dim}})
    check(v > 0, std::string(what) + " must be positive, got " + std::to_string(v));
  check(s.window >= 0, "window must be >= 0, got " + std::to_string(s.window));
  check(s.heads % s.kv_heads == 0,
        "heads " + std::to_string(s.heads) + " is not a multiple of kv_heads " + std::to_string(s.kv_heads));
  check(s.head_dim % 16 == 0, "head_dim " + std::to_string(s.head_dim) + " is not a multiple of 16");
  check(columns >= 1 && columns <= kAie2p.columns,
        "columns must be 1.." + std::to_string(kAie2p.columns) + ", got " + std::to_string(columns));
  const int64_t D = s.head_dim;
  // The largest query tile, then the largest K/V block, that fits; else the smallest, which the
  // validator then rejects naming the tile and its L1.
  int64_t tq = 16, kb = 16;
  bool found = false;
  for (int64_t t = 64; t >= 16 && !found; t -= 16)
    for (int64_t b = 64; b >= 16 && !found; b -= 16)
      if (core_bytes(t, b, D) <= kAie2p.l1_bytes) tq = t, kb = b, found = true;
  tq = std::min(tq, std::max<int64_t>(16, ceil_div(ceil_div(s.T, kCores), 16) * 16));  // short sequences
  const int64_t rows = kCores * tq;  // query rows per unit
  const int64_t T_pad = ceil_div(s.T, rows) * rows, S_pad = ceil_div(s.S, kb) * kb;
  const int64_t blocks = S_pad / kb, units = s.heads * (T_pad / rows);
  columns = int(std::min<int64_t>(columns, units));
  const int64_t q_obj = rows * D * 2, kv_obj = 2 * kb * D * 2, row_bytes = s.heads * D * 2;

  Design d;
  d.family = "encoder_attention";
  d.name = "encoder_attention_t" + std::to_string(s.T) + "s" + std::to_string(s.S) + "_h" +
           std::to_string(s.heads) + "kv" + std::to_string(s.kv_heads) + "d" + std::to_string(D) +
           (s.causal ? "_causal" : "") + (s.window > 0 ? "_w" + std::to_string(s.window) : "") + "_c" +
           std::to_string(columns);
  d.params = {{"T", s.T},         {"S", s.S},           {"heads", s.heads},   {"kv_heads", s.kv_heads},
              {"head_dim", D},    {"causal", s.causal}, {"window", s.window}, {"q_tile", tq},
              {"kv_block", kb},   {"T_pad", T_pad},     {"S_pad", S_pad},     {"columns", columns}};
  d.args = {{"q", T_pad * row_bytes}, {"kv", s.kv_heads * blocks * kv_obj}, {"out", T_pad * row_bytes}};
  auto tile = [&](TileCoord at) -> TileUse& {
    for (TileUse& t : d.tiles)
      if (t.at == at) return t;
    d.tiles.push_back({at, {}, false, {}});
    return d.tiles.back();
  };
  auto fifo = [&](const std::string& name, FifoEnd p, std::vector<FifoEnd> cons, int64_t elem, int64_t objects) {
    tile(p.tile);
    for (const FifoEnd& c : cons) tile(c.tile);
    d.fifos.push_back({name, p, std::move(cons), 2, elem, objects});
  };
  for (int c = 0; c < columns; ++c) {
    const std::vector<EncoderAttentionUnit> us = encoder_attention_units(s, tq, kb, columns, c);
    const int64_t n = int64_t(us.size());
    int64_t kv_objects = 0;
    for (const EncoderAttentionUnit& u : us) kv_objects += u.b1 - u.b0;
    // Queries: shim MM2S0 -> memtile S2MM0 -> split, q_tile rows per core (core S2MM0).
    FifoLink qsplit{{cname("q", c) + "_l3l2"}, {}, {}};
    fifo(cname("q", c) + "_l3l2", {shim(c), 0}, {{mem(c), 0}}, q_obj, n);
    // K/V blocks: shim MM2S1 -> memtile S2MM1 -> broadcast to the 4 cores (MM2S4 -> core S2MM1).
    fifo(cname("kv", c) + "_l3l2", {shim(c), 1}, {{mem(c), 1}}, kv_obj, std::max<int64_t>(1, kv_objects));
    std::vector<FifoEnd> all;
    for (int r = 0; r < kCores; ++r) all.push_back({core(c, r), 1});
    fifo(cname("kv", c), {mem(c), 4}, all, kv_obj, std::max<int64_t>(1, kv_objects));
    d.links.push_back({{cname("kv", c) + "_l3l2"}, {cname("kv", c)}, {}});
    // Outputs: core MM2S0 -> memtile S2MM 2 + r -> join -> MM2S5 -> shim S2MM0.
    FifoLink join{{}, {cname("out", c) + "_l2l3"}, {}};
    for (int r = 0; r < kCores; ++r) {
      fifo(crname("q", c, r), {mem(c), r}, {{core(c, r), 0}}, tq * D * 2, n);
      qsplit.outputs.push_back(crname("q", c, r));
      qsplit.offsets.push_back(r * tq * D * 2);
      fifo(crname("out", c, r), {core(c, r), 0}, {{mem(c), 2 + r}}, tq * D * 2, n);
      join.inputs.push_back(crname("out", c, r));
      join.offsets.push_back(r * tq * D * 2);
    }
    fifo(cname("out", c) + "_l2l3", {mem(c), 5}, {{shim(c), 0}}, q_obj, n);
    d.links.push_back(qsplit);
    d.links.push_back(join);
    // Per core: each visible (row, key) pair costs D MACs for the score and D for the output;
    // the online softmax ~6 element-ops per pair (scale, max, subtract + exp, round, sum) and
    // 2 per output value per block (rescale by the max change).
    int64_t pairs = 0, rescale = 0;
    for (const EncoderAttentionUnit& u : us) pairs += tq * (u.b1 - u.b0) * kb, rescale += tq * D * (u.b1 - u.b0) * 2;
    Kernel k{"attention_encoder_bf16", DType::BF16,
             {{"head_dim", D}, {"q_tile", tq}, {"kv_block", kb}, {"causal", s.causal}, {"window", s.window}},
             0, pairs * D * 2, pairs * 6 + rescale + n * tq * D};
    for (int r = 0; r < kCores; ++r) {
      TileUse& t = tile(core(c, r));
      t.has_kernel = true;
      t.kernel = k;
      t.buffers = {{"stack", kStackBytes, DType::I8},
                   {"o", tq * D * 4, DType::F32},
                   {"max_sum", 2 * tq * 4, DType::F32},
                   {"scores", kb * 4, DType::F32}};
    }
    // Runtime sequence: per unit its query rows (one head's D columns of 4 x q_tile rows), its
    // K/V blocks (contiguous per KV head), and the drain of its output rows; waits every 4 units
    // (aie2p.md: task queue, 4 tasks per channel).
    const int64_t W = 4;
    for (int64_t i = 0; i < n; ++i) {
      const EncoderAttentionUnit& u = us[size_t(i)];
      const AccessPattern rows_pat{4, (u.q0 * row_bytes + u.head * D * 2) / W, {{D * 2 / W, 1}, {rows, row_bytes / W}}, 1};
      d.sequence.push_back({SeqOp::Fill, cname("q", c) + "_l3l2", 0, rows_pat});
      const int64_t g = u.head / (s.heads / s.kv_heads);
      if (u.b1 > u.b0)
        d.sequence.push_back({SeqOp::Fill, cname("kv", c) + "_l3l2", 1,
                              contiguous_pattern((g * blocks + u.b0) * kv_obj, (u.b1 - u.b0) * kv_obj)});
      d.sequence.push_back({SeqOp::Drain, cname("out", c) + "_l2l3", 2, rows_pat});
      if (i % kAie2p.task_queue_depth == kAie2p.task_queue_depth - 1 || i == n - 1) {
        d.sequence.push_back({SeqOp::Wait, cname("out", c) + "_l2l3", 0, {}});
        d.sequence.push_back({SeqOp::Wait, cname("q", c) + "_l3l2", 0, {}});
        d.sequence.push_back({SeqOp::Wait, cname("kv", c) + "_l3l2", 0, {}});
      }
    }
    if (kv_objects == 0)  // no row of this column sees a key: one zero block keeps the FIFO fed
      d.sequence.push_back({SeqOp::Fill, cname("kv", c) + "_l3l2", 1, contiguous_pattern(0, kv_obj)});
  }
  validate_design(d);
  return d;
}

}  // namespace xdna::npu

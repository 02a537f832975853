// Conv designs for the conv models (design_families.h, "Conv designs"): dense, pointwise (a
// dense 1 x 1), strided and depthwise convolutions on bf16 NHWC activations, tiled into row
// bands x column tiles x channel tiles that fit a core's L1.
//
// DDR layout (assumption, docs/npu-designs.md "Conv models on the NPU"): activations are kept
// tile-major, each core's input window (with its zero border and the halo rows/columns it shares
// with its neighbours) contiguous, so that every transfer is one contiguous shim pattern; the
// previous layer's drain writing that layout (a strided S2MM pattern) is not modelled.
#include <algorithm>
#include <stdexcept>

#include "npu/design_families.h"

namespace xdna::npu {

namespace {

constexpr int kCores = 4;  // compute rows per column
constexpr int64_t kLanes = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("conv: " + what);
}

void check_shape(const ConvShape& s) {
  for (auto [what, v] : {std::pair{"height", s.height}, {"width", s.width}, {"c_in", s.c_in}, {"c_out", s.c_out},
                         {"kernel", s.kernel}, {"stride", s.stride}, {"out_height", s.out_height},
                         {"out_width", s.out_width}})
    check(v > 0, std::string(what) + " must be positive, got " + std::to_string(v));
  check(!s.depthwise || s.c_in == s.c_out,
        "a depthwise conv needs c_in == c_out, got " + std::to_string(s.c_in) + " and " + std::to_string(s.c_out));
}

std::string shape_text(const ConvShape& s) {
  return std::to_string(s.height) + "x" + std::to_string(s.width) + "x" + std::to_string(s.c_in) + " -> " +
         std::to_string(s.c_out) + (s.depthwise ? " depthwise" : "") + " k" + std::to_string(s.kernel) + " s" +
         std::to_string(s.stride);
}

// Bytes of one transfer, padded up (to 256 B, then larger powers of two) until a contiguous shim
// pattern of it and of 4 of it (a column's split) exists within the DMA size limits.
int64_t transfer_bytes(int64_t raw) {
  for (int64_t unit = 256;; unit *= 2) {
    const int64_t b = round_up(raw, unit);
    try {
      contiguous_pattern(0, b);
      contiguous_pattern(0, kCores * b);
      return b;
    } catch (const std::invalid_argument&) {
      if (unit >= (int64_t(1) << 20)) throw;
    }
  }
}

struct TileBytes {
  int64_t in_rows, in_cols, c_in, in, weights, out;
};

TileBytes tile_bytes(const ConvShape& s, const ConvTile& t) {
  TileBytes b;
  b.in_rows = (t.rows - 1) * s.stride + s.kernel;
  b.in_cols = (t.cols - 1) * s.stride + s.kernel;
  b.c_in = s.depthwise ? t.channels : conv_padded_c_in(s);
  b.in = transfer_bytes(b.in_rows * b.in_cols * b.c_in * 2);
  const int64_t w = s.depthwise ? s.kernel * s.kernel * t.channels : s.kernel * s.kernel * b.c_in * t.channels;
  b.weights = transfer_bytes(w * 2 + (t.channels + 3) * 4);  // bf16 weights, f32 bias[ch], lo, hi, slope
  b.out = transfer_bytes(t.rows * t.cols * t.channels * 2);
  return b;
}

using gen::shim;
using gen::mem;
using gen::core;
using gen::cname;
using gen::crname;

}  // namespace

int64_t conv_padded_c_in(const ConvShape& s) { return s.depthwise ? round_up(s.c_in, kLanes) : round_up(s.c_in, 8); }
int64_t conv_padded_c_out(const ConvShape& s) { return round_up(s.c_out, kLanes); }

int64_t conv_tile_l1_bytes(const ConvShape& s, const ConvTile& t) {
  const TileBytes b = tile_bytes(s, t);
  return kStackBytes + 2 * b.in + b.weights + 2 * b.out;
}

int64_t conv_invocations(const ConvShape& s, const ConvTile& t, int columns) {
  return ceil_div(s.out_height, int64_t(columns) * kCores * t.rows) * ceil_div(s.out_width, t.cols) *
         ceil_div(conv_padded_c_out(s), t.channels);
}

ConvTile choose_conv_tile(const ConvShape& s) {
  check_shape(s);
  std::vector<int64_t> chans, cols;
  for (int64_t c = conv_padded_c_out(s);; c = round_up(ceil_div(c, 2), kLanes)) {
    if (chans.empty() || chans.back() != c) chans.push_back(c);
    if (c == kLanes) break;
  }
  for (int64_t w = s.out_width;; w = ceil_div(w, 2)) {
    cols.push_back(w);
    if (w == 1) break;
  }
  const int64_t max_rows = std::min<int64_t>(8, ceil_div(s.out_height, int64_t(kAie2p.columns) * kCores));
  bool found = false;
  ConvTile best;
  int64_t best_inv = 0, best_ddr = 0;
  for (int64_t ch : chans)
    for (int64_t w : cols)
      for (int64_t rows = max_rows; rows >= 1; rows /= 2) {
        const ConvTile t{rows, w, ch};
        const TileBytes b = tile_bytes(s, t);
        if (conv_tile_l1_bytes(s, t) > kAie2p.l1_bytes) continue;
        if (2 * kCores * (b.in + b.out) > kAie2p.l2_bytes) continue;  // split + join buffers
        const int64_t inv = conv_invocations(s, t);
        const int64_t ddr = inv * (int64_t(kAie2p.columns) * kCores * (b.in + b.out) + b.weights);
        if (!found || inv < best_inv || (inv == best_inv && ddr < best_ddr)) {
          best = t, best_inv = inv, best_ddr = ddr, found = true;
        }
      }
  check(found, shape_text(s) + ": not even a 1 x 1 x 16 output tile fits a core's L1 (" +
                   std::to_string(conv_tile_l1_bytes(s, {1, 1, kLanes})) + " bytes, limit " +
                   std::to_string(kAie2p.l1_bytes) + ")");
  return best;
}

Design conv_design(const ConvShape& s, const ConvTile& t, int columns) {
  check_shape(s);
  check(columns >= 1 && columns <= kAie2p.columns, "columns must be 1.." + std::to_string(kAie2p.columns));
  check(t.rows >= 1 && t.cols >= 1 && t.channels >= kLanes && t.channels % kLanes == 0,
        "tile " + std::to_string(t.rows) + " x " + std::to_string(t.cols) + " x " + std::to_string(t.channels) +
            " (channels must be a positive multiple of 16)");
  const TileBytes b = tile_bytes(s, t);
  Design d;
  d.family = "conv";
  d.name = std::string("conv_") + (s.depthwise ? "dw" : "dense") + "_k" + std::to_string(s.kernel) + "s" +
           std::to_string(s.stride) + "_ci" + std::to_string(b.c_in) + "_t" + std::to_string(t.rows) + "x" +
           std::to_string(t.cols) + "x" + std::to_string(t.channels) + "_c" + std::to_string(columns);
  d.params = {{"kernel", s.kernel}, {"stride", s.stride},     {"c_in", b.c_in},         {"depthwise", s.depthwise},
              {"rows", t.rows},     {"cols", t.cols},         {"channels", t.channels}, {"in_rows", b.in_rows},
              {"in_cols", b.in_cols}, {"columns", columns}};
  Kernel k;
  k.name = "conv2d_bf16";
  k.dtype = DType::BF16;
  k.args = {{"rows", t.rows},         {"cols", t.cols},     {"in_cols", b.in_cols},     {"c_in", b.c_in},
            {"ch", t.channels},       {"kernel", s.kernel}, {"stride", s.stride},       {"depthwise", s.depthwise}};
  // As the kernel source is written: 16-lane vector macs (aie_kernels/conv2d_bf16.cc), not mmul.
  k.vector_macs = t.rows * t.cols * t.channels * s.kernel * s.kernel * (s.depthwise ? 1 : b.c_in);
  k.vector_ops = t.rows * t.cols * t.channels * 3;  // bias, slope, clamp
  auto tile = [&](TileCoord at) -> TileUse& {
    for (TileUse& u : d.tiles)
      if (u.at == at) return u;
    d.tiles.push_back({at, {}, false, {}});
    return d.tiles.back();
  };
  d.args = {{"in", int64_t(columns) * kCores * b.in}, {"weights", b.weights}, {"out", int64_t(columns) * kCores * b.out}};
  for (int c = 0; c < columns; ++c) {
    tile(shim(c));
    tile(mem(c));
    d.fifos.push_back({cname("in", c) + "_l3l2", {shim(c), 0}, {{mem(c), 0}}, 2, kCores * b.in, 1});
    FifoLink split{{cname("in", c) + "_l3l2"}, {}, {}};
    FifoLink join{{}, {cname("out", c) + "_l2l3"}, {}};
    std::vector<FifoEnd> wcons;
    for (int r = 0; r < kCores; ++r) {
      TileUse& u = tile(core(c, r));
      u.has_kernel = true;
      u.kernel = k;
      u.buffers.push_back({"stack", kStackBytes, DType::I8});
      d.fifos.push_back({crname("in", c, r), {mem(c), r}, {{core(c, r), 0}}, 2, b.in, 1});
      split.outputs.push_back(crname("in", c, r));
      split.offsets.push_back(r * b.in);
      d.fifos.push_back({crname("out", c, r), {core(c, r), 0}, {{mem(c), 1 + r}}, 2, b.out, 1});
      join.inputs.push_back(crname("out", c, r));
      join.offsets.push_back(r * b.out);
      wcons.push_back({core(c, r), 1});
    }
    d.fifos.push_back({cname("weights", c), {shim(c), 1}, wcons, 1, b.weights, 1});
    d.fifos.push_back({cname("out", c) + "_l2l3", {mem(c), 4}, {{shim(c), 0}}, 2, kCores * b.out, 1});
    d.links.push_back(split);
    d.links.push_back(join);
  }
  for (int c = 0; c < columns; ++c) {
    d.sequence.push_back({SeqOp::Fill, cname("in", c) + "_l3l2", 0, contiguous_pattern(c * kCores * b.in, kCores * b.in)});
    d.sequence.push_back({SeqOp::Fill, cname("weights", c), 1, contiguous_pattern(0, b.weights)});
    d.sequence.push_back({SeqOp::Drain, cname("out", c) + "_l2l3", 2, contiguous_pattern(c * kCores * b.out, kCores * b.out)});
  }
  for (int c = 0; c < columns; ++c) {
    d.sequence.push_back({SeqOp::Wait, cname("out", c) + "_l2l3", 0, {}});
    d.sequence.push_back({SeqOp::Wait, cname("in", c) + "_l3l2", 0, {}});
    d.sequence.push_back({SeqOp::Wait, cname("weights", c), 0, {}});
  }
  validate_design(d);
  return d;
}

}  // namespace xdna::npu

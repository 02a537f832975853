#include "npu/design_families.h"

#include <algorithm>
#include <stdexcept>

namespace xdna::npu {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

void check_positive(const char* family, const char* what, int64_t v) {
  if (v <= 0)
    throw std::invalid_argument(std::string(family) + ": " + what + " must be positive, got " +
                                std::to_string(v));
}

void check_columns(const char* family, int columns) {
  if (columns < 1 || columns > kAie2p.columns)
    throw std::invalid_argument(std::string(family) + ": columns must be 1.." +
                                std::to_string(kAie2p.columns) + ", got " + std::to_string(columns));
}

using gen::shim;
using gen::mem;
using gen::core;

// Builds a design step by step; tiles are added on first use.
struct Builder {
  Design d;

  TileUse& tile(TileCoord at) {
    for (TileUse& t : d.tiles)
      if (t.at == at) return t;
    d.tiles.push_back({at, {}, false, {}});
    return d.tiles.back();
  }
  void fifo(const std::string& name, FifoEnd prod, std::vector<FifoEnd> cons, int depth,
            int64_t elem_bytes, int64_t objects) {
    tile(prod.tile);
    for (const FifoEnd& c : cons) tile(c.tile);
    d.fifos.push_back({name, prod, std::move(cons), depth, elem_bytes, objects});
  }
  int arg(const std::string& name, int64_t bytes) {
    d.args.push_back({name, bytes});
    return int(d.args.size()) - 1;
  }
  void step(SeqOp op, const std::string& fifo, int arg = 0, AccessPattern p = {}) {
    d.sequence.push_back({op, fifo, arg, std::move(p)});
  }
  void kernel(TileCoord at, Kernel k) {
    TileUse& t = tile(at);
    t.has_kernel = true;
    t.kernel = std::move(k);
    t.buffers.push_back({"stack", kStackBytes, DType::I8});
  }
};

std::string col_name(const std::string& base, int c) { return base + "_c" + std::to_string(c); }
std::string core_name(const std::string& base, int c, int r) {
  return base + "_c" + std::to_string(c) + "r" + std::to_string(r);
}

// Column c: shim MM2S `shim_ch` -> memtile S2MM `mem_in_ch` -> split into `cores` FIFOs (one per
// core row, memtile MM2S mem_out_ch0 + r, core S2MM core_ch), each object `per_core` bytes.
void column_split(Builder& b, const std::string& base, int c, int cores, int64_t per_core,
                  int64_t objects, int shim_ch, int mem_in_ch, int mem_out_ch0, int core_ch) {
  const std::string in = col_name(base, c) + "_l3l2";
  b.fifo(in, {shim(c), shim_ch}, {{mem(c), mem_in_ch}}, 2, per_core * cores, objects);
  FifoLink link{{in}, {}, {}};
  for (int r = 0; r < cores; ++r) {
    const std::string out = core_name(base, c, r);
    b.fifo(out, {mem(c), mem_out_ch0 + r}, {{core(c, r), core_ch}}, 2, per_core, objects);
    link.outputs.push_back(out);
    link.offsets.push_back(r * per_core);
  }
  if (cores == 1) link.offsets.clear();  // a forward, not a split
  b.d.links.push_back(link);
}

// The reverse: each core's MM2S core_ch -> memtile S2MM mem_in_ch0 + r -> join -> shim S2MM 0.
void column_join(Builder& b, const std::string& base, int c, int cores, int64_t per_core,
                 int64_t objects, int mem_in_ch0, int mem_out_ch, int core_ch, int depth = 2) {
  const std::string out = col_name(base, c) + "_l2l3";
  FifoLink link{{}, {out}, {}};
  for (int r = 0; r < cores; ++r) {
    const std::string in = core_name(base, c, r);
    b.fifo(in, {core(c, r), core_ch}, {{mem(c), mem_in_ch0 + r}}, depth, per_core, objects);
    link.inputs.push_back(in);
    link.offsets.push_back(r * per_core);
  }
  if (cores == 1) link.offsets.clear();
  b.fifo(out, {mem(c), mem_out_ch}, {{shim(c), 0}}, depth, per_core * cores, objects);
  b.d.links.push_back(link);
}

// Row-streaming designs (norms, softmax, elementwise): per column, `inputs` splits feed `cores`
// cores, one join drains them; optional per-column broadcast constant on shim MM2S 1.
struct StreamShape {
  int columns, cores;
  int64_t elem_bytes;  // per core per object
  int64_t objects;     // objects per core
};

void build_stream(Builder& b, const StreamShape& s, int inputs, int64_t const_bytes) {
  const int64_t col_bytes = s.elem_bytes * s.cores * s.objects;
  std::vector<int> in_args;
  for (int i = 0; i < inputs; ++i)
    in_args.push_back(b.arg("in" + std::to_string(i), col_bytes * s.columns));
  const int out_arg = b.arg("out", col_bytes * s.columns);
  const int const_arg = const_bytes > 0 ? b.arg("const", const_bytes) : -1;
  for (int c = 0; c < s.columns; ++c) {
    for (int i = 0; i < inputs; ++i)
      column_split(b, "in" + std::to_string(i), c, s.cores, s.elem_bytes, s.objects, i, i,
                   i * s.cores, i);
    column_join(b, "out", c, s.cores, s.elem_bytes, s.objects, inputs, inputs * s.cores, 0);
    if (const_bytes > 0) {
      std::vector<FifoEnd> cons;
      for (int r = 0; r < s.cores; ++r) cons.push_back({core(c, r), 1});
      b.fifo(col_name("const", c), {shim(c), 1}, cons, 1, const_bytes, 1);
    }
  }
  for (int c = 0; c < s.columns; ++c) {
    if (const_bytes > 0) b.step(SeqOp::Fill, col_name("const", c), const_arg, contiguous_pattern(0, const_bytes));
    for (int i = 0; i < inputs; ++i)
      b.step(SeqOp::Fill, col_name("in" + std::to_string(i), c) + "_l3l2", in_args[i],
             contiguous_pattern(c * col_bytes, col_bytes));
    b.step(SeqOp::Drain, col_name("out", c) + "_l2l3", out_arg, contiguous_pattern(c * col_bytes, col_bytes));
  }
  for (int c = 0; c < s.columns; ++c) {
    b.step(SeqOp::Wait, col_name("out", c) + "_l2l3");
    for (int i = 0; i < inputs; ++i) b.step(SeqOp::Wait, col_name("in" + std::to_string(i), c) + "_l3l2");
    if (const_bytes > 0) b.step(SeqOp::Wait, col_name("const", c));
  }
}

int64_t l1_budget() { return kAie2p.l1_bytes - kStackBytes; }

DType output_dtype(DType t) { return t == DType::I8 ? DType::I8 : DType::BF16; }

void check_matmul_dtype(const char* family, DType t) {
  if (t != DType::BF16 && t != DType::BFP16 && t != DType::I8)
    throw std::invalid_argument(std::string(family) + ": dtype " + std::string(dtype_name(t)) +
                                " is not bf16, bfp16 or i8");
}

}  // namespace

AccessPattern contiguous_pattern(int64_t offset_bytes, int64_t bytes) {
  if (bytes <= 0 || bytes % 4 != 0 || offset_bytes % 4 != 0)
    throw std::invalid_argument("contiguous_pattern: " + std::to_string(bytes) + " bytes at " +
                                std::to_string(offset_bytes) + " is not a whole number of words");
  auto largest_divisor = [](int64_t n, int64_t cap) {
    for (int64_t d = std::min(n, cap); d > 1; --d)
      if (n % d == 0) return d;
    return int64_t(1);
  };
  const int64_t words = bytes / 4;
  const int64_t s0 = largest_divisor(words, kAie2p.max_size0_words);
  const int64_t s1 = largest_divisor(words / s0, kAie2p.max_size1_words);
  const int64_t s2 = words / s0 / s1;
  if (s0 * s1 > kAie2p.max_stride_words && s2 > 1)
    throw std::invalid_argument("contiguous_pattern: " + std::to_string(bytes) +
                                " bytes cannot be factored within the shim DMA limits");
  AccessPattern p{4, offset_bytes / 4, {{s0, 1}, {s1, s0}}, 1};
  if (s2 > 1) p.dims.push_back({s2, s0 * s1});
  if (s0 == 1 && words > kAie2p.max_size1_words)
    throw std::invalid_argument("contiguous_pattern: " + std::to_string(words) +
                                " words have no factor <= 1023 (a large prime count)");
  return p;
}

Design gemv_design(DType dtype, int64_t n_out, int64_t k_in, int columns) {
  check_matmul_dtype("gemv", dtype);
  check_positive("gemv", "n_out", n_out);
  check_positive("gemv", "k_in", k_in);
  check_columns("gemv", columns);
  const int cores = kAie2p.compute_rows;
  if (k_in % 16 != 0)
    throw std::invalid_argument("gemv: k_in " + std::to_string(k_in) + " is not a multiple of 16");
  const int64_t row_bytes = dtype_bytes(dtype, k_in);
  const int64_t x_bytes = row_bytes;  // x has the weights' dtype (the host encodes it)
  const int64_t out_elem = dtype_bytes(output_dtype(dtype), 1);
  const int64_t rows_per_core = ceil_div(n_out, int64_t(columns) * cores);
  // Chunk of rows per object: a multiple of 4 (the 4-byte DMA granule for int8 output) whose
  // double-buffered weights, x and double-buffered output fit L1.
  // Least padding first, then the largest chunk.
  int64_t chunk = 0, best_rp = 0;
  for (int64_t cr = 4; cr <= round_up(rows_per_core, 4); cr += 4) {
    if (2 * cr * row_bytes + x_bytes + 2 * cr * out_elem > l1_budget()) break;
    const int64_t rp = round_up(rows_per_core, cr);
    if (chunk == 0 || rp <= best_rp) chunk = cr, best_rp = rp;
  }
  if (chunk == 0)
    throw std::invalid_argument("gemv: a row of " + std::to_string(k_in) + " " +
                                std::string(dtype_name(dtype)) + " values does not fit L1 4 times over");
  const int64_t rp = round_up(rows_per_core, chunk);  // padded rows per core
  const int64_t objects = rp / chunk;
  const int64_t n_pad = rp * cores * columns;

  Builder b;
  b.d.family = "gemv";
  b.d.name = "gemv_" + std::string(dtype_name(dtype)) + "_" + std::to_string(n_out) + "x" +
             std::to_string(k_in) + "_c" + std::to_string(columns);
  b.d.params = {{"N", n_out}, {"K", k_in}, {"N_pad", n_pad}, {"columns", columns},
                {"chunk_rows", chunk}};
  const int w_arg = b.arg("weights", n_pad * row_bytes);
  const int x_arg = b.arg("x", x_bytes);
  const int y_arg = b.arg("y", n_pad * out_elem);
  const int64_t col_w = rp * cores * row_bytes, col_y = rp * cores * out_elem;
  for (int c = 0; c < columns; ++c) {
    column_split(b, "w", c, cores, chunk * row_bytes, objects, 0, 0, 0, 0);
    column_join(b, "y", c, cores, chunk * out_elem, objects, 1, cores, 0);
    std::vector<FifoEnd> cons;
    for (int r = 0; r < cores; ++r) cons.push_back({core(c, r), 1});
    b.fifo(col_name("x", c), {shim(c), 1}, cons, 1, x_bytes, 1);
    for (int r = 0; r < cores; ++r) {
      Kernel k{"gemv_" + std::string(dtype_name(dtype)), dtype, {{"rows", chunk}, {"k", k_in}}, 0,
               rp * k_in, 0};
      if (dtype == DType::I8) k.args["shift"] = 7;  // SRS shift; the planner sets it per layer
      b.kernel(core(c, r), k);
    }
  }
  for (int c = 0; c < columns; ++c) {
    b.step(SeqOp::Fill, col_name("x", c), x_arg, contiguous_pattern(0, x_bytes));
    b.step(SeqOp::Fill, col_name("w", c) + "_l3l2", w_arg, contiguous_pattern(c * col_w, col_w));
    b.step(SeqOp::Drain, col_name("y", c) + "_l2l3", y_arg, contiguous_pattern(c * col_y, col_y));
  }
  for (int c = 0; c < columns; ++c) {
    b.step(SeqOp::Wait, col_name("y", c) + "_l2l3");
    b.step(SeqOp::Wait, col_name("w", c) + "_l3l2");
    b.step(SeqOp::Wait, col_name("x", c));
  }
  return b.d;
}

Design gemm_design(DType dtype, int64_t M, int64_t K, int64_t N, int columns, int rows) {
  check_matmul_dtype("gemm", dtype);
  check_positive("gemm", "M", M);
  check_positive("gemm", "K", K);
  check_positive("gemm", "N", N);
  check_columns("gemm", columns);
  if (rows < 1 || rows > kAie2p.compute_rows || rows > columns)
    throw std::invalid_argument("gemm: rows must be 1..4 and at most columns (A enters through "
                                "the memtile of column r), got " + std::to_string(rows));
  const int64_t k = 64;
  if (K % k != 0)
    throw std::invalid_argument("gemm: K " + std::to_string(K) + " is not a multiple of " + std::to_string(k));
  const int64_t in_b = dtype_bytes(dtype, 64) / 64;  // bytes per value (bfp16: 9/8, via blocks)
  auto tile_bytes = [&](int64_t a, int64_t bk) { return dtype_bytes(dtype, a * bk); };
  const int64_t out_elem = dtype_bytes(output_dtype(dtype), 1);
  const int64_t acc_elem = 4;  // f32 or int32 accumulator
  (void)in_b;
  // m = n: largest multiple of 8 that fits L1, capped by what the shape can use.
  const int64_t m_cap = round_up(ceil_div(M, rows), 8), n_cap = round_up(ceil_div(N, columns), 8);
  int64_t m = 0;
  for (int64_t t = 8; t <= std::max(m_cap, n_cap); t += 8) {
    const int64_t mm = std::min(t, m_cap), nn = std::min(t, n_cap);
    if (2 * tile_bytes(mm, k) + 2 * tile_bytes(k, nn) + mm * nn * (acc_elem + out_elem) <= l1_budget())
      m = t;
  }
  if (m == 0) throw std::invalid_argument("gemm: no tile fits L1");
  const int64_t n = std::min(m, n_cap);
  m = std::min(m, m_cap);
  const int64_t M_pad = round_up(M, rows * m), N_pad = round_up(N, columns * n);
  const int64_t mb = M_pad / (rows * m), nb = N_pad / (columns * n), kb = K / k;
  // B panel (K x n) resident in the memtile if it fits beside A's and C's rings.
  const int64_t a_ring = 2 * tile_bytes(m, k), c_join = rows * m * n * out_elem;
  const bool panel = tile_bytes(K, n) + a_ring + c_join <= kAie2p.l2_bytes;

  Builder b;
  b.d.family = "gemm";
  b.d.name = "gemm_" + std::string(dtype_name(dtype)) + "_" + std::to_string(M) + "x" +
             std::to_string(K) + "x" + std::to_string(N) + "_" + std::to_string(columns) + "x" +
             std::to_string(rows);
  b.d.params = {{"M", M},       {"K", K}, {"N", N},         {"M_pad", M_pad},   {"N_pad", N_pad},
                {"m", m},       {"k", k}, {"n", n},         {"columns", columns}, {"rows", rows},
                {"b_panel_in_memtile", panel ? 1 : 0}};
  const int64_t a_row = dtype_bytes(dtype, K);  // bytes of one row of A
  const int a_arg = b.arg("A", M_pad * a_row);
  const int b_arg = b.arg("B", N_pad * a_row);  // [N_pad / n][K][n]: K x N_pad values
  const int c_arg = b.arg("C", M_pad * N_pad * out_elem);
  const int64_t blocks = mb * nb;

  for (int r = 0; r < rows; ++r) {  // A row r enters through column r's memtile, broadcast along the row
    const std::string in = "A_r" + std::to_string(r) + "_l3l2", out = "A_r" + std::to_string(r);
    b.fifo(in, {shim(r), 0}, {{mem(r), 0}}, 2, tile_bytes(m, k), blocks * kb);
    std::vector<FifoEnd> cons;
    for (int c = 0; c < columns; ++c) cons.push_back({core(c, r), 0});
    b.fifo(out, {mem(r), 0}, cons, 2, tile_bytes(m, k), blocks * kb);
    b.d.links.push_back({{in}, {out}, {}});
  }
  for (int c = 0; c < columns; ++c) {
    const std::string in = col_name("B", c) + "_l3l2", out = col_name("B", c);
    if (panel)
      b.fifo(in, {shim(c), 1}, {{mem(c), 1}}, 1, tile_bytes(K, n), nb);
    else
      b.fifo(in, {shim(c), 1}, {{mem(c), 1}}, 2, tile_bytes(k, n), blocks * kb);
    std::vector<FifoEnd> cons;
    for (int r = 0; r < rows; ++r) cons.push_back({core(c, r), 1});
    b.fifo(out, {mem(c), 1}, cons, 2, tile_bytes(k, n), blocks * kb);
    b.d.links.push_back({{in}, {out}, {}});
    column_join(b, "C", c, rows, m * n * out_elem, blocks, 2, 2, 0, 1);
    for (int r = 0; r < rows; ++r) {
      const std::string kname = "matmul_" + std::string(dtype_name(dtype));
      Kernel kern{kname, dtype, {{"m", m}, {"k", k}, {"n", n}, {"k_blocks", kb}}, blocks * kb * m * k * n, 0, 0};
      if (dtype == DType::I8) kern.args["shift"] = 7;
      b.kernel(core(c, r), kern);
      b.tile(core(c, r)).buffers.push_back({"acc", m * n * acc_elem, dtype == DType::I8 ? DType::I32 : DType::F32});
    }
  }
  // Runtime sequence: per column block bn (B panel) and row block bm: A row tiles, then C.
  // bfp16 A is stored in 8 x 8 sub-block order (72-byte tiles, aie2p.md: bfp16ebs8): the unit
  // of a "row" below is then a group of 8 rows.
  const int64_t group = dtype == DType::BFP16 ? 8 : 1;
  const int64_t a_unit = a_row * group;
  const int64_t a_chunk = dtype_bytes(dtype, k) * group;  // bytes of k values of one unit
  for (int64_t bn = 0; bn < nb; ++bn) {
    for (int c = 0; c < columns && panel; ++c) {
      const int64_t panel_bytes = tile_bytes(K, n);
      b.step(SeqOp::Fill, col_name("B", c) + "_l3l2", b_arg,
             contiguous_pattern((bn * columns + c) * panel_bytes, panel_bytes));
    }
    for (int64_t bm = 0; bm < mb; ++bm) {
      for (int r = 0; r < rows; ++r) {
        const int64_t row0 = bm * rows * m + r * m;
        // k values of m rows, then the next k-block: [K/k][m][k].
        AccessPattern p{4, row0 * a_row / 4, {{a_chunk / 4, 1}, {m / group, a_unit / 4}, {kb, a_chunk / 4}}, 1};
        b.step(SeqOp::Fill, "A_r" + std::to_string(r) + "_l3l2", a_arg, p);
      }
      for (int c = 0; c < columns && !panel; ++c) {
        const int64_t bytes = tile_bytes(K, n);
        b.step(SeqOp::Fill, col_name("B", c) + "_l3l2", b_arg,
               contiguous_pattern((bn * columns + c) * bytes, bytes));
      }
      for (int c = 0; c < columns; ++c) {
        const int64_t row0 = bm * rows * m, col0 = (bn * columns + c) * n;
        AccessPattern p{4, (row0 * N_pad + col0) * out_elem / 4,
                        {{n * out_elem / 4, 1}, {rows * m, N_pad * out_elem / 4}}, 1};
        b.step(SeqOp::Drain, col_name("C", c) + "_l2l3", c_arg, p);
      }
      for (int c = 0; c < columns; ++c) {
        b.step(SeqOp::Wait, col_name("C", c) + "_l2l3");
        if (!panel) b.step(SeqOp::Wait, col_name("B", c) + "_l3l2");
      }
      for (int r = 0; r < rows; ++r) b.step(SeqOp::Wait, "A_r" + std::to_string(r) + "_l3l2");
    }
    for (int c = 0; c < columns && panel; ++c) b.step(SeqOp::Wait, col_name("B", c) + "_l3l2");
  }
  return b.d;
}

Design elementwise_design(const std::string& op, int64_t n, int columns) {
  const bool binary = op == "add" || op == "mul";
  if (!binary && op != "silu" && op != "gelu" && op != "exp" && op != "scale")
    throw std::invalid_argument("elementwise: unknown op '" + op + "' (add, mul, silu, gelu, exp, scale)");
  check_positive("elementwise", "n", n);
  check_columns("elementwise", columns);
  const int cores = binary ? 2 : kAie2p.compute_rows;
  const int64_t per_core = ceil_div(n, int64_t(columns) * cores);
  const int64_t chunk = std::min<int64_t>(1024, round_up(per_core, 16));  // values per object
  const int64_t objects = ceil_div(per_core, chunk);
  Builder b;
  b.d.family = "elementwise";
  b.d.name = "elementwise_" + op + "_" + std::to_string(n) + "_c" + std::to_string(columns);
  b.d.params = {{"n", n}, {"n_pad", objects * chunk * cores * columns}, {"columns", columns}, {"chunk", chunk}};
  // Vector element-ops per value: add/mul/scale 1; silu x*sigmoid(x) = exp LUT, add, reciprocal
  // LUT, mul (4); gelu (tanh form through exp) 8; exp 1 LUT lookup + 2 for range reduction.
  const int64_t ops = binary || op == "scale" ? 1 : op == "silu" ? 4 : op == "gelu" ? 8 : 3;
  build_stream(b, {columns, cores, chunk * 2, objects}, binary ? 2 : 1, op == "scale" ? 4 : 0);
  for (int c = 0; c < columns; ++c)
    for (int r = 0; r < cores; ++r)
      b.kernel(core(c, r), {"eltwise_" + op + "_bf16", DType::BF16, {{"n", chunk}}, 0, 0,
                            objects * chunk * ops});
  return b.d;
}

Design norm_design(NormKind kind, int64_t rows, int64_t hidden, int columns) {
  const char* fam = kind == NormKind::RMS ? "rmsnorm" : "layernorm";
  check_positive(fam, "rows", rows);
  check_positive(fam, "hidden", hidden);
  check_columns(fam, columns);
  if (hidden % 16 != 0)
    throw std::invalid_argument(std::string(fam) + ": hidden " + std::to_string(hidden) + " is not a multiple of 16");
  const int cores = kAie2p.compute_rows;
  const int64_t per_core = ceil_div(rows, int64_t(columns) * cores);
  const int64_t row_bytes = hidden * 2;
  const int64_t const_bytes = row_bytes * (kind == NormKind::RMS ? 1 : 2);  // gamma (+ beta)
  if (4 * row_bytes + const_bytes > l1_budget())
    throw std::invalid_argument(std::string(fam) + ": hidden " + std::to_string(hidden) + " does not fit L1");
  Builder b;
  b.d.family = fam;
  b.d.name = std::string(fam) + "_" + std::to_string(rows) + "x" + std::to_string(hidden) + "_c" +
             std::to_string(columns);
  b.d.params = {{"rows", rows}, {"hidden", hidden}, {"rows_pad", per_core * cores * columns}, {"columns", columns}};
  build_stream(b, {columns, cores, row_bytes, per_core}, 1, const_bytes);
  // RMS: square-accumulate, scale, gamma (3 ops per value); Layer: + mean pass and beta (5).
  const int64_t ops = kind == NormKind::RMS ? 3 : 5;
  for (int c = 0; c < columns; ++c)
    for (int r = 0; r < cores; ++r)
      b.kernel(core(c, r), {std::string(fam) + "_bf16", DType::BF16, {{"hidden", hidden}}, 0, 0,
                            per_core * hidden * ops});
  return b.d;
}

Design softmax_design(int64_t rows, int64_t len, int columns) {
  check_positive("softmax", "rows", rows);
  check_positive("softmax", "len", len);
  check_columns("softmax", columns);
  if (len % 16 != 0)
    throw std::invalid_argument("softmax: len " + std::to_string(len) + " is not a multiple of 16");
  const int cores = kAie2p.compute_rows;
  const int64_t per_core = ceil_div(rows, int64_t(columns) * cores);
  const int64_t row_bytes = len * 2;
  if (4 * row_bytes + len * 4 > l1_budget())
    throw std::invalid_argument("softmax: a row of " + std::to_string(len) + " does not fit L1");
  Builder b;
  b.d.family = "softmax";
  b.d.name = "softmax_" + std::to_string(rows) + "x" + std::to_string(len) + "_c" + std::to_string(columns);
  b.d.params = {{"rows", rows}, {"len", len}, {"rows_pad", per_core * cores * columns}, {"columns", columns}};
  build_stream(b, {columns, cores, row_bytes, per_core}, 1, 0);
  // max, subtract + exp LUT, sum, reciprocal LUT, scale: 5 ops per value; f32 scratch row.
  for (int c = 0; c < columns; ++c)
    for (int r = 0; r < cores; ++r) {
      b.kernel(core(c, r), {"softmax_bf16", DType::BF16, {{"len", len}}, 0, 0, per_core * len * 5});
      b.tile(core(c, r)).buffers.push_back({"scratch", len * 4, DType::F32});
    }
  return b.d;
}

}  // namespace xdna::npu

#include "npu/sim_exec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/graph.h"
#include "core/numeric.h"
#include "npu/sim_backend.h"
#include "npu/sim_program.h"

namespace xdna::npu {

void sim::fail(const Design& d, const std::string& what) {
  throw std::invalid_argument("npu-sim: design '" + d.name + "': " + what);
}

int64_t sim::param(const Design& d, const char* name) {
  auto it = d.params.find(name);
  if (it == d.params.end()) fail(d, std::string("has no parameter '") + name + "'");
  return it->second;
}

const SeqStep& sim::drain_step(const Design& d, const std::string& fifo) {
  for (const SeqStep& s : d.sequence)
    if (s.op == SeqOp::Drain && s.fifo == fifo) return s;
  fail(d, "has no drain of '" + fifo + "'");
}

void sim::drain(const Design& d, HostArgs& args, const std::string& fifo, const std::vector<uint8_t>& bytes) {
  drain_step(d, fifo);  // throws when there is none
  int64_t moved = 0;
  for (const SeqStep& s : d.sequence)
    if (s.op == SeqOp::Drain && s.fifo == fifo) moved += s.pattern.bytes();
  if (int64_t(bytes.size()) != moved)
    fail(d, "the programs gave '" + fifo + "' " + std::to_string(bytes.size()) + " bytes, its drains move " +
                std::to_string(moved));
  size_t pos = 0;  // several drains of one FIFO take its stream in sequence order
  for (const SeqStep& s : d.sequence) {
    if (s.op != SeqOp::Drain || s.fifo != fifo) continue;
    std::vector<uint8_t>& a = args.at(size_t(s.arg));
    walk(s.pattern, [&](int64_t off) {
      const size_t n = size_t(s.pattern.elem_bytes);
      if (off < 0 || size_t(off) + n > a.size()) fail(d, "drain '" + fifo + "' writes past its argument");
      std::memcpy(a.data() + off, bytes.data() + pos, n);
      pos += n;
    });
  }
}

namespace {

using aie::bf16;

// The fused topology's constants (design_families_fused.cpp): 2 KiB DDR-stream objects per core,
// 4 compute rows per column.
constexpr int64_t kObj = 2048;
constexpr int kCores = 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
int64_t obj_pad(int64_t bytes) { return ceil_div(bytes, kObj) * kObj; }

using sim::fail;
using sim::param;
using sim::walk;
using sim::drain;
using sim::drain_step;
using sim::core_streams;

int arg_index(const Design& d, const std::string& name) {
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == name) return int(i);
  fail(d, "has no host argument '" + name + "'");
}

// The split the generators use (design_families_fused.cpp, Stages): P cores in (column, row)
// order, ceil(n / P) rows each; attention by (KV head, block of positions).
struct Geometry {
  int64_t P = 0, hidden = 0, heads = 0, kv_heads = 0, D = 0, I = 0, context = 1;
  bool qk_norm = false, post_norms = false;
  DType weights = DType::BF16;  // the cores' kernel dtype: bf16 or i8
  int64_t q_dim() const { return heads * D; }
  int64_t kv_dim() const { return kv_heads * D; }
  int64_t n_qkv() const { return q_dim() + 2 * kv_dim(); }
  int64_t rows(int64_t n) const { return ceil_div(n, P); }
  int64_t kv_per_core() const { return ceil_div(kv_heads, P); }
  int64_t cores_per_kv() const { return std::max<int64_t>(1, P / kv_heads); }
  int64_t ppc() const { return ceil_div(context, cores_per_kv()); }
  int64_t kv_bytes() const { return kv_per_core() * 2 * ppc() * D * 2; }
  // KV heads [h0, h1) and positions [t0, t1) of core p.
  void attn_range(int64_t p, int64_t& h0, int64_t& h1, int64_t& t0, int64_t& t1) const {
    if (kv_per_core() > 1) {
      h0 = std::min(kv_heads, p * kv_per_core()), h1 = std::min(kv_heads, h0 + kv_per_core());
      t0 = 0, t1 = context;
    } else {
      h0 = p / cores_per_kv(), h1 = std::min(kv_heads, h0 + 1);
      const int64_t b = p % cores_per_kv();
      t0 = std::min(context, b * ppc()), t1 = std::min(context, t0 + ppc());
    }
  }
};

Geometry geometry(const Design& d, bool layer) {
  Geometry g;
  for (const TileUse& t : d.tiles)
    if (t.has_kernel) {
      if (t.kernel.dtype != DType::BF16 && t.kernel.dtype != DType::I8)
        fail(d, "kernel dtype " + std::string(dtype_name(t.kernel.dtype)) +
                    ": npu-sim executes bf16 and int8 fused designs (bfp16 is priced, not executed)");
      g.weights = t.kernel.dtype;
      ++g.P;
    }
  if (g.P == 0 || g.P % kCores) fail(d, "has " + std::to_string(g.P) + " cores, not whole columns of 4");
  if (!layer) return g;
  g.heads = param(d, "heads"), g.kv_heads = param(d, "kv_heads"), g.D = param(d, "head_dim");
  if (d.params.count("hidden")) g.hidden = param(d, "hidden");
  if (d.params.count("intermediate")) g.I = param(d, "intermediate");
  if (d.params.count("context")) g.context = param(d, "context");
  g.qk_norm = d.params.count("qk_norm") && param(d, "qk_norm");
  g.post_norms = d.params.count("post_norms") && param(d, "post_norms");
  return g;
}

std::string ddr_fifo(int c) { return "ddr_c" + std::to_string(c) + "_l3l2"; }

}  // namespace

std::vector<std::vector<uint8_t>> sim::core_streams(const Design& d, const HostArgs& args, int64_t P) {
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(P));
  for (int c = 0; c < P / kCores; ++c) {
    std::vector<uint8_t> col;
    for (const SeqStep& s : d.sequence) {
      if (s.op != SeqOp::Fill || s.fifo != ddr_fifo(c)) continue;
      const std::vector<uint8_t>& a = args.at(size_t(s.arg));
      walk(s.pattern, [&](int64_t off) {
        if (off < 0 || off + s.pattern.elem_bytes > int64_t(a.size()))
          fail(d, "fill of '" + d.args[size_t(s.arg)].name + "' reads past its " + std::to_string(a.size()) + " bytes");
        col.insert(col.end(), a.begin() + off, a.begin() + off + s.pattern.elem_bytes);
      });
    }
    if (col.size() % (kCores * kObj)) fail(d, "column " + std::to_string(c) + " stream is not whole objects");
    for (size_t o = 0; o < col.size() / (kCores * kObj); ++o)
      for (int r = 0; r < kCores; ++r) {
        auto at = col.begin() + int64_t((o * kCores + r) * kObj);
        out[size_t(c * kCores + r)].insert(out[size_t(c * kCores + r)].end(), at, at + kObj);
      }
  }
  return out;
}

namespace {

// The inverse (packing): scatter each core's stream into the arguments the fills read, except
// the argument `in_place` (a resident buffer the fills read as it is: its stream bytes are skipped).
void scatter_streams(const Design& d, const std::vector<std::vector<uint8_t>>& streams, HostArgs& args,
                     const std::string& in_place = "") {
  const int64_t P = int64_t(streams.size());
  for (int c = 0; c < P / kCores; ++c) {
    const size_t objs = streams[size_t(c * kCores)].size() / kObj;
    std::vector<uint8_t> col(objs * kCores * kObj);
    for (int r = 0; r < kCores; ++r) {
      const std::vector<uint8_t>& s = streams[size_t(c * kCores + r)];
      if (s.size() != objs * kObj) fail(d, "core streams of column " + std::to_string(c) + " differ in length");
      for (size_t o = 0; o < objs; ++o)
        std::memcpy(col.data() + (o * kCores + r) * kObj, s.data() + o * kObj, kObj);
    }
    size_t pos = 0;
    for (const SeqStep& s : d.sequence) {
      if (s.op != SeqOp::Fill || s.fifo != ddr_fifo(c)) continue;
      std::vector<uint8_t>& a = args.at(size_t(s.arg));
      if (!in_place.empty() && d.args[size_t(s.arg)].name == in_place) {
        pos += size_t(s.pattern.bytes());
        continue;
      }
      walk(s.pattern, [&](int64_t off) {
        if (pos + size_t(s.pattern.elem_bytes) > col.size()) fail(d, "packed stream shorter than its fills");
        std::memcpy(a.data() + off, col.data() + pos, size_t(s.pattern.elem_bytes));
        pos += size_t(s.pattern.elem_bytes);
      });
    }
    if (pos != col.size()) fail(d, "fills of column " + std::to_string(c) + " do not take the packed stream");
  }
}

// What the drain steps of `fifo` wrote, in transfer order.
std::vector<uint8_t> read_drain(const Design& d, const HostArgs& args, const std::string& fifo) {
  drain_step(d, fifo);
  std::vector<uint8_t> bytes;
  for (const SeqStep& s : d.sequence) {
    if (s.op != SeqOp::Drain || s.fifo != fifo) continue;
    const std::vector<uint8_t>& a = args.at(size_t(s.arg));
    walk(s.pattern, [&](int64_t off) {
      const size_t n = size_t(s.pattern.elem_bytes);
      if (off < 0 || size_t(off) + n > a.size()) fail(d, "drain '" + fifo + "' reads past its argument");
      bytes.insert(bytes.end(), a.begin() + off, a.begin() + off + int64_t(n));
    });
  }
  return bytes;
}

// One core's stream, written part by part (packing).
struct Writer {
  std::vector<uint8_t> s;
  size_t start = 0, limit = 0;
  void part(int64_t bytes) {
    s.resize(start + size_t(obj_pad(limit - start)), 0);  // pad the previous part
    start = s.size();
    limit = start + size_t(bytes);
  }
  template <class T>
  void put(const T* v, int64_t n) {
    const size_t b = size_t(n) * sizeof(T);
    if (s.size() + b > limit) throw std::logic_error("npu-sim: packed part overflows");
    s.insert(s.end(), reinterpret_cast<const uint8_t*>(v), reinterpret_cast<const uint8_t*>(v) + b);
  }
  void zeros(int64_t bytes) { s.insert(s.end(), size_t(bytes), 0); }
  std::vector<uint8_t> finish() {
    part(0);
    return std::move(s);
  }
};

// Rows [p * R, p * R + R) of a [n][k] f32 matrix as bf16, rows past n zero (the bake's padding).
void put_rows(Writer& w, const std::vector<float>& m, int64_t n, int64_t k, int64_t p, int64_t R) {
  for (int64_t r = p * R; r < p * R + R; ++r) {
    if (r < n) {
      const std::vector<bf16> row = to_bf16(std::span<const float>(m.data() + r * k, size_t(k)));
      w.put(row.data(), k);
    } else {
      w.zeros(k * 2);
    }
  }
}
// Rows [first, first + count) of a [n][k] f32 matrix as the design's weights: bf16 (put_rows),
// or int8 quantized per row (core/numeric.h quantize_int8, one scale per row) followed by the
// rows' f32 scales padded to a 32-byte block (aie_kernels/fused_stage_int8.h).
void put_matrix(Writer& w, DType t, const std::vector<float>& m, int64_t n, int64_t k, int64_t first,
                int64_t count) {
  if (t != DType::I8) {
    for (int64_t r = first; r < first + count; ++r) put_rows(w, m, n, k, r, 1);
    return;
  }
  std::vector<float> scales(static_cast<size_t>(round_up(count, 8)), 0.0f);
  std::vector<int8_t> q(static_cast<size_t>(k));
  for (int64_t r = first; r < first + count; ++r) {
    if (r < n) {
      quantize_int8(m.data() + r * k, 1, k, k, q.data(), &scales[size_t(r - first)]);
      w.put(q.data(), k);
    } else {
      w.zeros(k);
    }
  }
  w.put(scales.data(), int64_t(scales.size()));
}
// Bytes of such rows (design_families_fused.cpp, matrix_bytes).
int64_t matrix_bytes(DType t, int64_t rows, int64_t k) {
  return t == DType::I8 ? rows * k + round_up(rows * 4, 32) : rows * k * 2;
}

void put_vec(Writer& w, const std::vector<float>& v) {
  const std::vector<bf16> b = to_bf16(v);
  w.put(b.data(), int64_t(b.size()));
}

void check_len(const Design& d, const std::vector<float>& v, int64_t n, const char* what) {
  if (int64_t(v.size()) != n)
    fail(d, std::string(what) + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(n));
}

HostArgs empty_args(const Design& d) {
  HostArgs a;
  for (const HostArg& h : d.args) a.emplace_back(size_t(h.bytes), uint8_t{0});
  return a;
}

// decode_layer's weights_rest part: o rows, [post-attention gamma], ffn gamma, gate, up and
// down rows, [post-FFN gamma].
int64_t rest_bytes(const Geometry& g) {
  const int64_t Rh = g.rows(g.hidden), Ri = g.rows(g.I);
  return matrix_bytes(g.weights, Rh, g.q_dim()) + g.hidden * 2 + 2 * matrix_bytes(g.weights, Ri, g.hidden) +
         matrix_bytes(g.weights, Rh, g.I) + (g.post_norms ? 4 * g.hidden : 0);
}

void check_dims(const Design& d, const Geometry& g) {
  if (g.hidden % 16 || g.I % 16 || g.D % 16)
    fail(d, "hidden, intermediate and head_dim must be multiples of 16 (the GEMV kernels' lanes)");
  if (g.weights == DType::I8 && (g.hidden % 32 || g.I % 32 || g.q_dim() % 32))
    fail(d, "int8 weights need hidden, intermediate and heads x head_dim in multiples of 32 (the int8 GEMV's lanes)");
}

Geometry mlp_geometry(const Design& d) {
  Geometry g = geometry(d, false);
  g.hidden = param(d, "hidden"), g.I = param(d, "intermediate");
  g.D = 16;
  return g;
}

// LM head: logits of core p, object o at rows p * R + o * chunk; each column joins [object][core].
struct HeadGeometry {
  int64_t P, vocab, hidden, R, chunk, objects;
  DType weights;
};
HeadGeometry head_geometry(const Design& d) {
  const Geometry g = geometry(d, false);
  HeadGeometry h{g.P, param(d, "vocab"), param(d, "hidden"), 0, 0, 0, g.weights};
  h.R = param(d, "vocab_pad") / h.P;
  h.chunk = param(d, "chunk_rows");
  if (h.chunk <= 0 || h.R % h.chunk != 0 || h.R < ceil_div(h.vocab, h.P))
    fail(d, "chunk_rows does not split the padded vocabulary per core");
  h.objects = h.R / h.chunk;
  return h;
}

}  // namespace

// ---- public ---------------------------------------------------------------------------------------

SimKvCache::SimKvCache(int64_t kv_heads_, int64_t head_dim_, int64_t max_len_)
    : kv_heads(kv_heads_), head_dim(head_dim_), max_len(max_len_),
      k(size_t(kv_heads_ * max_len_ * head_dim_)), v(size_t(kv_heads_ * max_len_ * head_dim_)) {}

void SimKvCache::append(std::span<const aie::bf16> row) {
  const int64_t kvd = kv_heads * head_dim;
  if (int64_t(row.size()) != 2 * kvd)
    throw std::invalid_argument("npu-sim: kv row of " + std::to_string(row.size()) + " values, expected " +
                                std::to_string(2 * kvd));
  if (length >= max_len) throw std::invalid_argument("npu-sim: KV cache full (" + std::to_string(max_len) + ")");
  for (int64_t h = 0; h < kv_heads; ++h) {
    std::copy_n(row.begin() + h * head_dim, head_dim, k.begin() + (h * max_len + length) * head_dim);
    std::copy_n(row.begin() + kvd + h * head_dim, head_dim, v.begin() + (h * max_len + length) * head_dim);
  }
  ++length;
}

std::vector<float> rope_row(std::span<const float> inv_freq, int64_t position) {
  const size_t half = inv_freq.size();
  std::vector<float> r(2 * half);
  for (size_t i = 0; i < half; ++i) {
    const float a = float(position) * inv_freq[i];
    r[i] = std::cos(a);
    r[half + i] = std::sin(a);
  }
  return r;
}

std::vector<aie::bf16> to_bf16(std::span<const float> x) {
  std::vector<aie::bf16> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = aie::to_bf16(x[i], kSimRounding);
  return b;
}

std::vector<float> to_f32(std::span<const aie::bf16> x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = aie::to_float(x[i]);
  return f;
}

namespace {

// The layer's x, weights, rope parts of core p (decode_layer and qkv_rope share them).
void put_attn_parts(Writer& w, const Geometry& g, const SimLayerWeights& lw, std::span<const aie::bf16> x,
                    std::span<const float> rope, int64_t p) {
  const int64_t Rq = g.rows(g.n_qkv());
  w.part(g.hidden * 2);
  w.put(x.data(), g.hidden);
  w.part(g.hidden * 2 + matrix_bytes(g.weights, Rq, g.hidden) + (g.qk_norm ? 4 * g.D : 0));
  put_vec(w, lw.attn_norm);
  std::vector<float> qkv(lw.q);
  qkv.insert(qkv.end(), lw.k.begin(), lw.k.end());
  qkv.insert(qkv.end(), lw.v.begin(), lw.v.end());
  put_matrix(w, g.weights, qkv, g.n_qkv(), g.hidden, p * Rq, Rq);
  if (g.qk_norm) put_vec(w, lw.q_norm), put_vec(w, lw.k_norm);
  w.part(2 * g.D * 2);
  w.put(rope.data(), g.D);
}

void check_layer(const Design& d, const Geometry& g, const SimLayerWeights& w, std::span<const aie::bf16> x,
                 std::span<const float> rope, bool rest) {
  if (int64_t(x.size()) != g.hidden) fail(d, "x has " + std::to_string(x.size()) + " values");
  if (int64_t(rope.size()) != g.D) fail(d, "rope row has " + std::to_string(rope.size()) + " values, expected head_dim");
  check_len(d, w.attn_norm, g.hidden, "attn_norm");
  check_len(d, w.q, g.q_dim() * g.hidden, "q");
  check_len(d, w.k, g.kv_dim() * g.hidden, "k");
  check_len(d, w.v, g.kv_dim() * g.hidden, "v");
  if (g.qk_norm) check_len(d, w.q_norm, g.D, "q_norm"), check_len(d, w.k_norm, g.D, "k_norm");
  if (!rest) return;
  check_len(d, w.o, g.hidden * g.q_dim(), "o");
  check_len(d, w.ffn_norm, g.hidden, "ffn_norm");
  check_len(d, w.gate, g.I * g.hidden, "gate");
  check_len(d, w.up, g.I * g.hidden, "up");
  check_len(d, w.down, g.hidden * g.I, "down");
  if (g.post_norms)
    check_len(d, w.post_attn_norm, g.hidden, "post_attn_norm"), check_len(d, w.post_ffn_norm, g.hidden, "post_ffn_norm");
}

// Core p's kv part: per KV head of the core, K then V of its positions, cache positions
// first + t; positions at or past `have` (and idle cores) stay zero.
void put_kv(Writer& w, const Geometry& g, const SimKvCache& kv, int64_t first, int64_t have, int64_t p) {
  int64_t h0, h1, t0, t1;
  g.attn_range(p, h0, h1, t0, t1);
  w.part(g.kv_bytes());
  const int64_t ppc = g.ppc();
  for (int64_t h = h0; h < h0 + g.kv_per_core(); ++h)
    for (const auto* src : {&kv.k, &kv.v})
      for (int64_t t = t0; t < t0 + ppc; ++t) {
        if (h < h1 && t < t1 && first + t < have)
          w.put(src->data() + (h * kv.max_len + first + t) * g.D, g.D);
        else
          w.zeros(g.D * 2);
      }
}

void check_kv(const Design& d, const Geometry& g, const SimKvCache& kv) {
  if (kv.kv_heads != g.kv_heads || kv.head_dim != g.D) fail(d, "KV cache shape does not match the design");
}

// decode_layer's kv part per core: each K and V block padded to whole objects
// (design_families_fused.cpp, kv_block_align).
int64_t kv_stream_bytes(const Geometry& g) {
  return g.kv_per_core() * 2 * round_up(g.ppc(), kv_block_align(g.D)) * g.D * 2;
}

// The cached positions into a view of decode_layer's resident cache, bf16 [K | V][kv_heads_alloc]
// [kv_rows][D] (position t at row t; the rest zero), as the device keeps it: `out` holds the cache
// from byte `base` on (the kv or kv_row argument, kv_window_offset / kv_row_offset).
void write_resident_kv(const Design& d, const SimKvCache& kv, int64_t base, std::vector<uint8_t>& out) {
  const int64_t HA = param(d, "kv_heads_alloc"), rows = param(d, "kv_rows"), D = kv.head_dim;
  if (kv.length > rows || base < 0 || int64_t(out.size()) + base != kv_cache_bytes(d))
    fail(d, "the resident KV cache does not fit the cached positions");
  for (int64_t which = 0; which < 2; ++which)
    for (int64_t h = 0; h < kv.kv_heads; ++h) {
      const int64_t at = ((which * HA + h) * rows) * D * 2, n = kv.length * D * 2;  // bytes in the cache
      const int64_t from = std::max(at, base);
      if (from >= at + n) continue;
      std::memcpy(out.data() + (from - base),
                  reinterpret_cast<const uint8_t*>((which == 0 ? kv.k : kv.v).data() + h * kv.max_len * D) + (from - at),
                  size_t(at + n - from));
    }
}

}  // namespace

HostArgs pack_decode_layer(const Design& d, const SimLayerWeights& lw, std::span<const aie::bf16> x,
                           std::span<const float> rope, const SimKvCache& kv) {
  if (d.family != "decode_layer") fail(d, "is not a decode_layer design");
  const Geometry g = geometry(d, true);
  check_dims(d, g);
  check_layer(d, g, lw, x, rope, true);
  check_kv(d, g, kv);
  if (param(d, "position") != kv.length)
    fail(d, "is the token at position " + std::to_string(param(d, "position")) + ", the cache holds " +
                std::to_string(kv.length) + " positions");
  const int64_t Rh = g.rows(g.hidden), Ri = g.rows(g.I);
  std::vector<std::vector<uint8_t>> streams;
  for (int64_t p = 0; p < g.P; ++p) {
    Writer w;
    put_attn_parts(w, g, lw, x, rope, p);
    w.part(kv_stream_bytes(g));  // read in place from the resident cache (below)
    w.part(rest_bytes(g));
    put_matrix(w, g.weights, lw.o, g.hidden, g.q_dim(), p * Rh, Rh);
    if (g.post_norms) put_vec(w, lw.post_attn_norm);
    put_vec(w, lw.ffn_norm);
    put_matrix(w, g.weights, lw.gate, g.I, g.hidden, p * Ri, Ri);
    put_matrix(w, g.weights, lw.up, g.I, g.hidden, p * Ri, Ri);
    put_matrix(w, g.weights, lw.down, g.hidden, g.I, p * Rh, Rh);
    if (g.post_norms) put_vec(w, lw.post_ffn_norm);
    streams.push_back(w.finish());
  }
  HostArgs a = empty_args(d);
  scatter_streams(d, streams, a, "kv");
  write_resident_kv(d, kv, kv_window_offset(d), a.at(size_t(arg_index(d, "kv"))));
  write_resident_kv(d, kv, kv_row_offset(d), a.at(size_t(arg_index(d, "kv_row"))));
  return a;
}

std::vector<aie::bf16> kv_new_row(const Design& d, const HostArgs& args) {
  const std::vector<uint8_t> b = read_drain(d, args, "kv_new");
  std::vector<aie::bf16> row(b.size() / 2);
  std::memcpy(row.data(), b.data(), row.size() * 2);
  return row;
}

HostArgs pack_qkv_rope(const Design& d, const SimLayerWeights& lw, std::span<const aie::bf16> x,
                       std::span<const float> rope) {
  if (d.family != "qkv_rope") fail(d, "is not a qkv_rope design");
  const Geometry g = geometry(d, true);
  check_layer(d, g, lw, x, rope, false);
  std::vector<std::vector<uint8_t>> streams;
  for (int64_t p = 0; p < g.P; ++p) {
    Writer w;
    put_attn_parts(w, g, lw, x, rope, p);
    streams.push_back(w.finish());
  }
  HostArgs a = empty_args(d);
  scatter_streams(d, streams, a);
  return a;
}

HostArgs pack_attention_decode(const Design& d, std::span<const aie::bf16> q, const SimKvCache& kv) {
  if (d.family != "attention_decode") fail(d, "is not an attention_decode design");
  const Geometry g = geometry(d, true);
  check_kv(d, g, kv);
  if (int64_t(q.size()) != g.q_dim()) fail(d, "q has " + std::to_string(q.size()) + " values");
  if (g.context > kv.length) fail(d, "context " + std::to_string(g.context) + " > cached positions");
  std::vector<std::vector<uint8_t>> streams;
  for (int64_t p = 0; p < g.P; ++p) {
    Writer w;
    w.part(g.q_dim() * 2);
    w.put(q.data(), g.q_dim());
    put_kv(w, g, kv, kv.length - g.context, kv.length, p);
    streams.push_back(w.finish());
  }
  HostArgs a = empty_args(d);
  scatter_streams(d, streams, a);
  return a;
}

HostArgs pack_mlp_fused(const Design& d, const SimLayerWeights& lw, std::span<const aie::bf16> x) {
  if (d.family != "mlp_fused") fail(d, "is not an mlp_fused design");
  const Geometry g = mlp_geometry(d);
  if (g.weights != DType::BF16) fail(d, "npu-sim packs mlp_fused with bf16 weights only (no mlp_fused_int8 kernel)");
  check_dims(d, g);
  if (int64_t(x.size()) != g.hidden) fail(d, "x has " + std::to_string(x.size()) + " values");
  check_len(d, lw.gate, g.I * g.hidden, "gate");
  check_len(d, lw.up, g.I * g.hidden, "up");
  check_len(d, lw.down, g.hidden * g.I, "down");
  const int64_t Rh = g.rows(g.hidden), Ri = g.rows(g.I);
  std::vector<std::vector<uint8_t>> streams;
  for (int64_t p = 0; p < g.P; ++p) {
    Writer w;
    w.part(g.hidden * 2);
    w.put(x.data(), g.hidden);
    w.part(2 * Ri * g.hidden * 2 + Rh * g.I * 2);
    put_rows(w, lw.gate, g.I, g.hidden, p, Ri);
    put_rows(w, lw.up, g.I, g.hidden, p, Ri);
    put_rows(w, lw.down, g.hidden, g.I, p, Rh);
    streams.push_back(w.finish());
  }
  HostArgs a = empty_args(d);
  scatter_streams(d, streams, a);
  return a;
}

HostArgs pack_lm_head(const Design& d, std::span<const float> gamma, std::span<const float> head,
                      std::span<const aie::bf16> x) {
  if (d.family != "lm_head") fail(d, "is not an lm_head design");
  const HeadGeometry h = head_geometry(d);
  if (int64_t(gamma.size()) != h.hidden || int64_t(x.size()) != h.hidden ||
      int64_t(head.size()) != h.vocab * h.hidden)
    fail(d, "gamma, x or head weights do not match vocab x hidden");
  const std::vector<float> g(gamma.begin(), gamma.end()), m(head.begin(), head.end());
  std::vector<std::vector<uint8_t>> streams;
  for (int64_t p = 0; p < h.P; ++p) {
    Writer w;
    w.part(h.hidden * 2);
    w.put(x.data(), h.hidden);
    w.part(h.hidden * 2 + h.objects * matrix_bytes(h.weights, h.chunk, h.hidden));
    put_vec(w, g);
    for (int64_t o = 0; o < h.objects; ++o)
      put_matrix(w, h.weights, m, h.vocab, h.hidden, p * h.R + o * h.chunk, h.chunk);
    streams.push_back(w.finish());
  }
  HostArgs a = empty_args(d);
  scatter_streams(d, streams, a);
  return a;
}

void run_design(const Design& d, HostArgs& args, const SimKernelArgs& k) {
  if (args.size() != d.args.size()) fail(d, "takes " + std::to_string(d.args.size()) + " host arguments");
  for (size_t i = 0; i < args.size(); ++i)
    if (int64_t(args[i].size()) != d.args[i].bytes)
      fail(d, "argument '" + d.args[i].name + "' has " + std::to_string(args[i].size()) + " bytes, expected " +
                  std::to_string(d.args[i].bytes));
  // What the split assumes of the shape, refused with a message naming the design; the kernels'
  // L1 bounds are checked by the interpreter.
  if (d.family == "decode_layer" || d.family == "qkv_rope" || d.family == "attention_decode") {
    const Geometry g = geometry(d, true);
    if (d.family == "decode_layer") check_dims(d, g);
    if (d.family == "attention_decode" && param(d, "positions_per_core") != g.ppc())
      fail(d, "positions_per_core does not match the split");
  } else if (d.family == "mlp_fused") {
    check_dims(d, mlp_geometry(d));
  } else if (d.family == "lm_head") {
    const HeadGeometry h = head_geometry(d);
    if (h.hidden % (h.weights == DType::I8 ? 32 : 16))
      fail(d, "hidden must be a multiple of 16 (32 with int8 weights)");
  } else {
    fail(d, "family '" + d.family + "' has no functional model in npu-sim");
  }
  // The stage computation lives once, in the kernel sources: every core's program runs them.
  run_design_programs(d, args, k);
}

std::vector<aie::bf16> arg_bf16(const Design& d, const HostArgs& args, const std::string& name, int64_t n) {
  const std::vector<uint8_t>& a = args.at(size_t(arg_index(d, name)));
  if (int64_t(a.size()) < 2 * n) fail(d, "argument '" + name + "' holds fewer than " + std::to_string(n) + " bf16");
  std::vector<aie::bf16> v(static_cast<size_t>(n));
  std::memcpy(v.data(), a.data(), size_t(n) * 2);
  return v;
}

std::vector<float> arg_f32(const Design& d, const HostArgs& args, const std::string& name, int64_t n) {
  const std::vector<uint8_t>& a = args.at(size_t(arg_index(d, name)));
  if (int64_t(a.size()) < 4 * n) fail(d, "argument '" + name + "' holds fewer than " + std::to_string(n) + " f32");
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), a.data(), size_t(n) * 4);
  return v;
}

std::vector<float> lm_head_logits(const Design& d, const HostArgs& args) {
  const HeadGeometry h = head_geometry(d);
  std::vector<float> logits(static_cast<size_t>(h.P * h.R));
  for (int64_t c = 0; c < h.P / kCores; ++c) {
    const std::vector<uint8_t> col = read_drain(d, args, "out_c" + std::to_string(c) + "_l2l3");
    if (int64_t(col.size()) != h.objects * kCores * h.chunk * 4) fail(d, "LM-head drain of unexpected size");
    for (int64_t o = 0; o < h.objects; ++o)
      for (int r = 0; r < kCores; ++r)
        std::memcpy(logits.data() + (c * kCores + r) * h.R + o * h.chunk,
                    col.data() + ((o * kCores + r) * h.chunk) * 4, size_t(h.chunk) * 4);
  }
  logits.resize(size_t(h.vocab));
  return logits;
}

// ---- two routes through one layer ----------------------------------------------------------------

SimLayerResult fused_decode_layer(const DecodeLayerShape& shape, const SimLayerWeights& w,
                                  std::span<const aie::bf16> x, std::span<const float> rope, SimKvCache& kv,
                                  const SimKernelArgs& k, int columns) {
  DecodeLayerShape s = shape;
  s.context = kv.length + 1;
  s.capacity = kv.max_len;
  const Design d = decode_layer_design(DType::BF16, s, columns);
  HostArgs a = pack_decode_layer(d, w, x, rope, kv);
  run_design(d, a, k);
  kv.append(kv_new_row(d, a));
  return {arg_bf16(d, a, "result", s.hidden), {d.name}};
}

namespace {

Tensor row_tensor(std::span<const aie::bf16> v) { return Tensor::from_vector({1, int64_t(v.size())}, to_f32(v)); }

std::vector<aie::bf16> tensor_bf16(const Tensor& t) {
  const std::vector<float> f = t.to_vector();
  std::vector<aie::bf16> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = {f32_to_bf16(f[i])};  // exact: npu-sim stores bf16 values
  return b;
}

}  // namespace

SimLayerResult op_by_op_decode_layer(NpuSimBackend& sim, const DecodeLayerShape& shape, const SimLayerWeights& w,
                                     std::span<const aie::bf16> x, std::span<const float> rope, SimKvCache& kv,
                                     const SimKernelArgs& k, int columns) {
  DecodeLayerShape s = shape;
  s.context = kv.length + 1;
  if (s.window > 0) s.context = std::min(s.context, s.window);  // attention_decode reads the last context rows
  SimLayerResult r;
  const Design dq = qkv_rope_design(DType::BF16, s, columns);
  HostArgs aq = pack_qkv_rope(dq, w, x, rope);
  run_design(dq, aq, k);
  const std::vector<aie::bf16> q = arg_bf16(dq, aq, "result", s.heads * s.head_dim);
  kv.append(arg_bf16(dq, aq, "kv_new", 2 * s.kv_heads * s.head_dim));  // the host places the row
  const Design da = attention_decode_design(s, columns);
  HostArgs aa = pack_attention_decode(da, q, kv);
  run_design(da, aa, k);
  r.designs = {dq.name, da.name};

  // The rest as unfused dispatches of npu-sim, each a Node as the decoder's graph has it.
  const auto run = [&](OpKind op, std::vector<Tensor> in, const std::string& name) {
    Node n;
    n.op = op;
    n.name = name;
    n.attrs.eps = k.eps;
    n.attrs.rms_offset = k.rms_offset;
    if (!sim.supports(n, in)) throw std::logic_error("npu-sim refuses " + name + ": " + sim.refusals().at(std::string(op_name(op))));
    Tensor t = sim.compute(n, in);
    r.designs.push_back(name);
    return t;
  };
  const auto mat = [](const std::vector<float>& m, int64_t rows, int64_t cols) {
    return Tensor::from_vector({rows, cols}, m);
  };
  const int64_t H = s.hidden, I = s.intermediate, Q = s.heads * s.head_dim;
  const Tensor xt = row_tensor(x);
  Tensor o = run(OpKind::MatMul, {row_tensor(arg_bf16(da, aa, "result", Q)), mat(w.o, H, Q)}, "o");
  if (s.post_norms) o = run(OpKind::RMSNorm, {o, Tensor::from_vector({H}, w.post_attn_norm)}, "post_attn_norm");
  const Tensor h1 = run(OpKind::Add, {xt, o}, "attn_residual");
  const Tensor hn = run(OpKind::RMSNorm, {h1, Tensor::from_vector({H}, w.ffn_norm)}, "ffn_norm");
  const Tensor gate = run(OpKind::MatMul, {hn, mat(w.gate, I, H)}, "gate");
  const Tensor up = run(OpKind::MatMul, {hn, mat(w.up, I, H)}, "up");
  const Tensor act = run(s.gelu ? OpKind::GeluTanh : OpKind::Silu, {gate}, "act");
  const Tensor m = run(OpKind::Mul, {act, up}, "gated");
  Tensor dn = run(OpKind::MatMul, {m, mat(w.down, H, I)}, "down");
  if (s.post_norms) dn = run(OpKind::RMSNorm, {dn, Tensor::from_vector({H}, w.post_ffn_norm)}, "post_ffn_norm");
  r.out = tensor_bf16(run(OpKind::Add, {h1, dn}, "ffn_residual"));
  return r;
}

}  // namespace xdna::npu

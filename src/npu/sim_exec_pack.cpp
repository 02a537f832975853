// npu-sim's packing of the fused designs' host arguments (sim_exec.h, pack_*): each core's DDR
// stream written part by part in the bake's layout and scattered through the fills' access
// patterns; decode_layer's resident cache written from the KV cache (SimKvCache: sim_kv_cache.cpp).
#include "npu/sim_exec.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/numeric.h"
#include "npu/sim_exec_fused_internal.h"

namespace xdna::npu {

using namespace sim::fused;

namespace {

using aie::bf16;
using sim::fail;
using sim::param;
using sim::walk_runs;

// The inverse of sim::core_streams (packing): scatter each core's stream into the arguments the
// fills read, except the argument `in_place` (a resident buffer the fills read as it is: its
// stream bytes are skipped).
void scatter_streams(const Design& d, const std::vector<std::vector<uint8_t>>& streams, HostArgs& args,
                     const std::vector<std::string>& in_place = {}) {
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
      if (std::find(in_place.begin(), in_place.end(), d.args[size_t(s.arg)].name) != in_place.end()) {
        pos += size_t(s.pattern.bytes());
        continue;
      }
      walk_runs(s.pattern, [&](int64_t off, int64_t n) {
        if (pos + size_t(n) > col.size()) fail(d, "packed stream shorter than its fills");
        std::memcpy(a.data() + off, col.data() + pos, size_t(n));
        pos += size_t(n);
      });
    }
    if (pos != col.size()) fail(d, "fills of column " + std::to_string(c) + " do not take the packed stream");
  }
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
void put_rows(Writer& w, std::span<const float> m, int64_t n, int64_t k, int64_t p, int64_t R) {
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
struct Int8Slice {
  std::vector<int8_t> rows;   // count x k
  std::vector<float> scales;  // count, zero padded to a 32-byte block
};
Int8Slice quantize_slice(std::span<const float> m, int64_t n, int64_t k, int64_t first, int64_t count) {
  Int8Slice s{std::vector<int8_t>(size_t(count * k), 0), std::vector<float>(size_t(round_up(count, 8)), 0.0f)};
  for (int64_t r = first; r < std::min(first + count, n); ++r)
    quantize_int8(m.data() + r * k, 1, k, k, s.rows.data() + (r - first) * k, &s.scales[size_t(r - first)]);
  return s;
}
void put_matrix(Writer& w, DType t, std::span<const float> m, int64_t n, int64_t k, int64_t first,
                int64_t count) {
  if (t != DType::I8) {
    for (int64_t r = first; r < first + count; ++r) put_rows(w, m, n, k, r, 1);
    return;
  }
  const Int8Slice s = quantize_slice(m, n, k, first, count);
  w.put(s.rows.data(), int64_t(s.rows.size()));
  w.put(s.scales.data(), int64_t(s.scales.size()));
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
// down rows, [post-FFN gamma]; int8 rows without their scales (those travel in the weights part:
// design_families_fused.cpp, decode_layer_design).
int64_t rest_bytes(const Geometry& g) {
  const int64_t Rh = g.rows(g.hidden), Ri = g.rows(g.I);
  const auto rows = [&](int64_t r, int64_t k) { return g.weights == DType::I8 ? r * k : matrix_bytes(g.weights, r, k); };
  return rows(Rh, g.q_dim()) + g.hidden * 2 + 2 * rows(Ri, g.hidden) + rows(Rh, g.I) + (g.post_norms ? 4 * g.hidden : 0);
}

}  // namespace

namespace {

// The layer's x, weights, rope parts of core p (decode_layer and qkv_rope share them).
// x, then the weights part (attn gamma, QKV rows, QK-norm gammas, and `later`'s scales: the
// int8 matrices after attention, decode_layer), then the RoPE row.
void put_attn_parts(Writer& w, const Geometry& g, const SimLayerWeights& lw, std::span<const aie::bf16> x,
                    std::span<const float> rope, int64_t p, std::span<const Int8Slice> later = {}) {
  const int64_t Rq = g.rows(g.n_qkv());
  int64_t later_bytes = 0;
  for (const Int8Slice& m : later) later_bytes += int64_t(m.scales.size()) * 4;
  w.part(g.hidden * 2);
  w.put(x.data(), g.hidden);
  w.part(g.hidden * 2 + matrix_bytes(g.weights, Rq, g.hidden) + (g.qk_norm ? 4 * g.D : 0) + later_bytes);
  put_vec(w, lw.attn_norm);
  std::vector<float> qkv(lw.q);
  qkv.insert(qkv.end(), lw.k.begin(), lw.k.end());
  qkv.insert(qkv.end(), lw.v.begin(), lw.v.end());
  put_matrix(w, g.weights, qkv, g.n_qkv(), g.hidden, p * Rq, Rq);
  if (g.qk_norm) put_vec(w, lw.q_norm), put_vec(w, lw.k_norm);
  for (const Int8Slice& m : later) w.put(m.scales.data(), int64_t(m.scales.size()));
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
// (design_families_fused.cpp, kv_block_align); an int8 / int4 cache's scales part before it.
int64_t kv_stream_bytes(const Geometry& g, int64_t bits) {
  return g.kv_per_core() * 2 * round_up(g.ppc(), kv_block_align(g.D, bits)) * g.D * bits / 8;
}

std::string kv_type_name(int64_t bits) { return bits == 4 ? "int4" : bits == 8 ? "int8" : "bf16"; }
int64_t kv_cache_bits(const SimKvCache& kv) { return kv.int4 ? 4 : kv.int8 ? 8 : 16; }

// Refuses a cache of another type than design d reads, naming both.
void check_kv_type(const Design& d, const SimKvCache& kv) {
  const int64_t bits = kv_value_bits(d);
  if (bits != kv_cache_bits(kv))
    fail(d, std::string(bits == 16 ? "reads a " : "reads an ") + kv_type_name(bits) + " KV cache; the cache given is " +
                kv_type_name(kv_cache_bits(kv)));
}
int64_t kv_scale_stream_bytes(const Geometry& g) { return g.kv_per_core() * round_up(g.ppc(), kKvScaleAlign) * 8; }

// An int8 / int4 cache's scales into a view of the resident scale buffer, f32 [kv_heads_alloc][kv_rows]
// [K scale, V scale] (the rest zero): `out` holds the buffer from byte `base` on (kv_scales or
// kv_row_scales: kv_scales_window_offset / kv_scales_row_offset).
void write_resident_scales(const Design& d, const SimKvCache& kv, int64_t base, std::vector<uint8_t>& out) {
  const int64_t rows = param(d, "kv_rows");
  check_kv_type(d, kv);
  if (kv.length > rows || base < 0 || int64_t(out.size()) + base != kv_scales_bytes(d))
    fail(d, "the resident KV scale buffer does not fit the cached positions");
  for (int64_t h = 0; h < kv.kv_heads; ++h) {
    const int64_t at = h * rows * 8, n = kv.length * 8;
    const int64_t from = std::max(at, base);
    if (from >= at + n) continue;
    std::memcpy(out.data() + (from - base),
                reinterpret_cast<const uint8_t*>(kv.scales.data() + h * kv.max_len * 2) + (from - at),
                size_t(at + n - from));
  }
}

// The cached positions into a view of decode_layer's resident cache, bf16 [K | V][kv_heads_alloc]
// [kv_rows][D] (position t at row t; the rest zero), as the device keeps it: `out` holds the cache
// from byte `base` on (the kv or kv_row argument, kv_window_offset / kv_row_offset).
void write_resident_kv(const Design& d, const SimKvCache& kv, int64_t base, std::vector<uint8_t>& out) {
  const int64_t HA = param(d, "kv_heads_alloc"), rows = param(d, "kv_rows"), D = kv.head_dim;
  check_kv_type(d, kv);
  const int64_t bits = kv_cache_bits(kv), rb = D * bits / 8;  // bytes of a head's row
  if (kv.length > rows || base < 0 || int64_t(out.size()) + base != kv_cache_bytes(d))
    fail(d, "the resident KV cache does not fit the cached positions");
  std::vector<uint8_t> packed;  // int4: a head's cached rows, two values a byte (low nibble first)
  for (int64_t which = 0; which < 2; ++which)
    for (int64_t h = 0; h < kv.kv_heads; ++h) {
      const int64_t at = ((which * HA + h) * rows) * rb, n = kv.length * rb;  // bytes in the cache
      const int64_t from = std::max(at, base);
      if (from >= at + n) continue;
      const uint8_t* src = nullptr;
      if (bits == 16) {
        src = reinterpret_cast<const uint8_t*>((which == 0 ? kv.k : kv.v).data() + h * kv.max_len * D);
      } else if (bits == 8) {
        src = reinterpret_cast<const uint8_t*>((which == 0 ? kv.k8 : kv.v8).data() + h * kv.max_len * D);
      } else {
        const int8_t* q = (which == 0 ? kv.k8 : kv.v8).data() + h * kv.max_len * D;
        packed.assign(size_t(n), 0);
        for (int64_t i = 0; i < kv.length * D; ++i) packed[size_t(i / 2)] |= uint8_t((q[i] & 0xF) << (4 * (i % 2)));
        src = packed.data();
      }
      std::memcpy(out.data() + (from - base), src + (from - at), size_t(at + n - from));
    }
}

// The cached positions into all of decode_layer's resident-cache arguments: the kv and kv_row
// views, and for an int8 / int4 cache their scale views.
void write_resident_kv_args(const Design& d, const SimKvCache& kv, HostArgs& args) {
  write_resident_kv(d, kv, kv_window_offset(d), args.at(size_t(arg_index(d, "kv"))));
  write_resident_kv(d, kv, kv_row_offset(d), args.at(size_t(arg_index(d, "kv_row"))));
  if (kv_value_bits(d) < 16) {
    write_resident_scales(d, kv, kv_scales_window_offset(d), args.at(size_t(arg_index(d, "kv_scales"))));
    write_resident_scales(d, kv, kv_scales_row_offset(d), args.at(size_t(arg_index(d, "kv_row_scales"))));
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
    // int8: the o, gate, up and down slices' scales go in the weights part, their rows after
    // attention (aie_kernels/decode_layer_int8.h).
    std::vector<Int8Slice> later;
    if (g.weights == DType::I8)
      later = {quantize_slice(lw.o, g.hidden, g.q_dim(), p * Rh, Rh), quantize_slice(lw.gate, g.I, g.hidden, p * Ri, Ri),
               quantize_slice(lw.up, g.I, g.hidden, p * Ri, Ri), quantize_slice(lw.down, g.hidden, g.I, p * Rh, Rh)};
    const auto put_later = [&](size_t i, const std::vector<float>& m, int64_t n, int64_t k, int64_t R) {
      if (later.empty()) put_matrix(w, g.weights, m, n, k, p * R, R);
      else w.put(later[i].rows.data(), int64_t(later[i].rows.size()));
    };
    put_attn_parts(w, g, lw, x, rope, p, later);
    if (kv_value_bits(d) < 16) w.part(kv_scale_stream_bytes(g));  // read in place from the scale buffer (below)
    w.part(kv_stream_bytes(g, kv_value_bits(d)));                 // read in place from the resident cache (below)
    w.part(rest_bytes(g));
    put_later(0, lw.o, g.hidden, g.q_dim(), Rh);
    if (g.post_norms) put_vec(w, lw.post_attn_norm);
    put_vec(w, lw.ffn_norm);
    put_later(1, lw.gate, g.I, g.hidden, Ri);
    put_later(2, lw.up, g.I, g.hidden, Ri);
    put_later(3, lw.down, g.hidden, g.I, Rh);
    if (g.post_norms) put_vec(w, lw.post_ffn_norm);
    streams.push_back(w.finish());
  }
  HostArgs a = empty_args(d);
  scatter_streams(d, streams, a, {"kv", "kv_scales"});
  write_resident_kv_args(d, kv, a);
  return a;
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
  const std::vector<float> g(gamma.begin(), gamma.end());  // the head is read in place (no copy a token)
  std::vector<std::vector<uint8_t>> streams;
  for (int64_t p = 0; p < h.P; ++p) {
    Writer w;
    w.part(h.hidden * 2);
    w.put(x.data(), h.hidden);
    w.part(h.hidden * 2 + h.objects * matrix_bytes(h.weights, h.chunk, h.hidden));
    put_vec(w, g);
    for (int64_t o = 0; o < h.objects; ++o)
      put_matrix(w, h.weights, head, h.vocab, h.hidden, p * h.R + o * h.chunk, h.chunk);
    streams.push_back(w.finish());
  }
  HostArgs a = empty_args(d);
  scatter_streams(d, streams, a);
  return a;
}

namespace {

bool is_weight_arg(const std::string& name) { return name == "weights" || name == "weights_rest"; }

// Every argument of `args` but the weight arguments (packed once) made anew for d as the
// full pack leaves it before its parts are written: d's size, zero. Throws naming the design when
// `args` is not d's argument list (count, or a kept argument's size).
// Returns the bytes cleared.
int64_t reset_args(const Design& d, HostArgs& args, const std::vector<std::optional<ByteRanges>>* written = nullptr) {
  int64_t cleared = 0;
  if (args.size() != d.args.size())
    fail(d, "the kept arguments are " + std::to_string(args.size()) + ", the design takes " +
                std::to_string(d.args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_weight_arg(d.args[i].name)) {
      const std::optional<ByteRanges>* w = written && i < written->size() ? &(*written)[i] : nullptr;
      if (w && *w) {  // zero where written, then the size (a grown tail comes zeroed)
        for (const auto& [from, end] : **w) {
          const size_t to = std::min(end, args[i].size());
          if (from >= to) continue;
          std::memset(args[i].data() + from, 0, to - from);
          cleared += int64_t(to - from);
        }
        cleared += std::max<int64_t>(0, d.args[i].bytes - int64_t(args[i].size()));
        args[i].resize(size_t(d.args[i].bytes));
      } else {
        args[i].assign(size_t(d.args[i].bytes), 0);
        cleared += d.args[i].bytes;
      }
    } else if (int64_t(args[i].size()) != d.args[i].bytes) {
      fail(d, "the kept argument '" + d.args[i].name + "' has " + std::to_string(args[i].size()) +
                  " bytes, the design's has " + std::to_string(d.args[i].bytes));
    }
  }
  return cleared;
}

// A replicated part (x, the RoPE row: one copy every core reads) into its argument's start.
void put_replicated(const Design& d, HostArgs& args, const char* name, const void* src, size_t bytes) {
  std::vector<uint8_t>& a = args.at(size_t(arg_index(d, name)));
  if (bytes > a.size()) fail(d, std::string("argument '") + name + "' is shorter than its part");
  std::memcpy(a.data(), src, bytes);
}

}  // namespace

int64_t repack_decode_layer(const Design& d, HostArgs& args, std::span<const aie::bf16> x,
                            std::span<const float> rope, const SimKvCache& kv,
                            const std::vector<std::optional<ByteRanges>>* written) {
  if (d.family != "decode_layer") fail(d, "is not a decode_layer design");
  const Geometry g = geometry(d, true);
  check_dims(d, g);
  if (int64_t(x.size()) != g.hidden) fail(d, "x has " + std::to_string(x.size()) + " values");
  if (int64_t(rope.size()) != g.D) fail(d, "rope row has " + std::to_string(rope.size()) + " values, expected head_dim");
  check_kv(d, g, kv);
  if (param(d, "position") != kv.length)
    fail(d, "is the token at position " + std::to_string(param(d, "position")) + ", the cache holds " +
                std::to_string(kv.length) + " positions");
  const int64_t cleared = reset_args(d, args, written);
  put_replicated(d, args, "x", x.data(), x.size_bytes());
  put_replicated(d, args, "rope", rope.data(), rope.size_bytes());
  write_resident_kv_args(d, kv, args);
  return cleared;
}

std::vector<std::optional<ByteRanges>> kv_args_written(const Design& d, const SimKvCache& kv) {
  std::vector<std::optional<ByteRanges>> out(d.args.size());
  const int64_t HA = param(d, "kv_heads_alloc"), rows = param(d, "kv_rows");
  const int64_t rb = kv.head_dim * kv_value_bits(d) / 8;
  // Rows [0, kv.length) of `blocks` blocks of `block` bytes (rows of `row` bytes) in a buffer
  // viewed from byte `base` on.
  const auto ranges = [&](const char* name, int64_t base, int64_t blocks, int64_t block, int64_t row) {
    ByteRanges r;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = b * block, end = at + std::min(kv.length, rows) * row;
      if (end > base) r.emplace_back(size_t(std::max(at, base) - base), size_t(end - base));
    }
    out[size_t(arg_index(d, name))] = std::move(r);
  };
  ranges("kv", kv_window_offset(d), 2 * HA, rows * rb, rb);
  ranges("kv_row", kv_row_offset(d), 2 * HA, rows * rb, rb);
  if (kv_value_bits(d) < 16) {
    ranges("kv_scales", kv_scales_window_offset(d), HA, rows * 8, 8);
    ranges("kv_row_scales", kv_scales_row_offset(d), HA, rows * 8, 8);
  }
  return out;
}

void keep_weights_only(const Design& d, HostArgs& args, HostArgs* spare) {
  if (args.size() != d.args.size()) fail(d, "takes " + std::to_string(d.args.size()) + " host arguments");
  if (spare && spare->size() < args.size()) spare->resize(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_weight_arg(d.args[i].name)) continue;
    if (spare) (*spare)[i] = std::move(args[i]);
    std::vector<uint8_t>().swap(args[i]);
  }
}

void repack_lm_head(const Design& d, HostArgs& args, std::span<const aie::bf16> x) {
  if (d.family != "lm_head") fail(d, "is not an lm_head design");
  const HeadGeometry h = head_geometry(d);
  if (int64_t(x.size()) != h.hidden) fail(d, "x has " + std::to_string(x.size()) + " values, expected hidden");
  reset_args(d, args);
  put_replicated(d, args, "x", x.data(), x.size_bytes());
}

}  // namespace xdna::npu

// The fused decode designs and the LM head (design_families.h, "Fused decode designs"): each
// family's stage list, handed to the topology builder (design_families_fused_topology.cpp).
#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>

#include "npu/design_families_fused_internal.h"

namespace xdna::npu {

using namespace gen::fused;

namespace {

using gen::shim;
using gen::mem;
using gen::core;
using gen::cname;
using gen::crname;

// The design and kernel name suffix of s's KV cache precision.
std::string kv_suffix(const DecodeLayerShape& s) { return s.kv_int4 ? "_kv4" : s.kv_int8 ? "_kv8" : ""; }

void check_shape(const std::string& fam, const DecodeLayerShape& s) {
  for (auto [what, v] : {std::pair{"hidden", s.hidden}, {"heads", s.heads}, {"kv_heads", s.kv_heads},
                         {"head_dim", s.head_dim}, {"intermediate", s.intermediate}, {"context", s.context}})
    check(v > 0, fam, std::string(what) + " must be positive, got " + std::to_string(v));
  check(s.heads % s.kv_heads == 0, fam, "heads " + std::to_string(s.heads) +
        " is not a multiple of kv_heads " + std::to_string(s.kv_heads));
  check(s.hidden % 16 == 0 && s.head_dim % 16 == 0, fam, "hidden and head_dim must be multiples of 16");
}

// A core's slice of `rows` rows of k weights in its stream: int8 rows are followed by their f32
// per-row scales, padded to a 32-byte block (aie_kernels/fused_stage_int8.h).
int64_t matrix_bytes(DType t, int64_t rows, int64_t k) {
  return rows * dtype_bytes(t, k) + (t == DType::I8 ? round_up(rows * 4, 32) : 0);
}

void check_weights(const std::string& fam, DType t) {
  check(t == DType::BF16 || t == DType::BFP16 || t == DType::I8, fam,
        "dtype " + std::string(dtype_name(t)) + " is not bf16, bfp16 or i8");
}

std::string shape_name(const DecodeLayerShape& s) {
  return std::to_string(s.hidden) + "_h" + std::to_string(s.heads) + "kv" + std::to_string(s.kv_heads) +
         "d" + std::to_string(s.head_dim) + "_i" + std::to_string(s.intermediate) +
         (s.qk_norm ? "_qkn" : "") + (s.gelu ? "_geglu" : "");
}

// Per-core work of each stage, for `P` cores. Element-op counts per value as in the unfused
// families: RMSNorm 3, SiLU 4 / tanh-GELU 8 (+1 for the gate product), softmax 5, RoPE 3
// (two products and an add per value, cos/sin from a table in the stream).
struct Stages {
  int64_t P;
  DType dtype;
  const DecodeLayerShape& s;
  int64_t q_dim() const { return s.heads * s.head_dim; }
  int64_t kv_dim() const { return s.kv_heads * s.head_dim; }
  int64_t rows(int64_t n) const { return ceil_div(n, P); }
  int64_t wbytes(int64_t n, int64_t k) const { return matrix_bytes(dtype, rows(n), k); }
  // The same slice's rows alone and its scales alone (int8; 0 otherwise): decode_layer carries the
  // scales of the matrices after attention in its first weights part.
  int64_t row_bytes(int64_t n, int64_t k) const { return rows(n) * dtype_bytes(dtype, k); }
  int64_t scale_bytes(int64_t n) const { return dtype == DType::I8 ? round_up(rows(n) * 4, 32) : 0; }
  // Attention split: cores per KV head (position blocks) or KV heads per core.
  int64_t kv_per_core() const { return ceil_div(s.kv_heads, P); }
  int64_t cores_per_kv() const { return std::max<int64_t>(1, P / s.kv_heads); }
  int64_t positions_per_core() const { return ceil_div(s.context, cores_per_kv()); }
  int64_t kv_bytes() const { return kv_per_core() * 2 * positions_per_core() * s.head_dim * 2; }
  // decode_layer's kv part: each K and V block padded to whole objects (read in place); an
  // int8 cache (kv_int8) holds a byte a value, an int4 cache (kv_int4) half a byte, and their
  // scales part holds, per KV head of the core, 8 bytes a position (K scale, V scale) padded to
  // whole objects.
  int64_t kv_value_bits() const { return kv_bits(s); }
  bool kv_scaled() const { return kv_value_bits() < 16; }
  int64_t kv_row_bytes() const { return s.head_dim * kv_value_bits() / 8; }  // one head's row
  int64_t stream_positions() const {
    return round_up(positions_per_core(), kv_block_align(s.head_dim, kv_value_bits()));
  }
  int64_t kv_stream_bytes() const { return kv_per_core() * 2 * stream_positions() * kv_row_bytes(); }
  int64_t kv_scale_stream_bytes() const {
    return kv_scaled() ? kv_per_core() * round_up(positions_per_core(), kKvScaleAlign) * 8 : 0;
  }
  // The new token's K/V row as drained: values, then (int8 / int4) a K and V scale per KV head.
  int64_t kv_new_bytes() const { return 2 * s.kv_heads * kv_row_bytes() + (kv_scaled() ? s.kv_heads * 8 : 0); }
  int64_t attn_partial_bytes() const {  // per core: f32 max and sum, bf16 out per query head
    return kv_per_core() * (s.heads / s.kv_heads) * (s.head_dim * 2 + 8);
  }
  // The attention partials travel as several exchange objects of `slice` bytes each (a core's
  // partial is larger than its slice of any other stage's output).
  int64_t attn_objects(int64_t slice) const { return ceil_div(attn_partial_bytes(), slice); }
  int64_t attn_macs() const {
    return kv_per_core() * (s.heads / s.kv_heads) * positions_per_core() * s.head_dim * 2;
  }
  int64_t attn_ops() const {
    return kv_per_core() * (s.heads / s.kv_heads) * positions_per_core() * 5 +
           s.heads * cores_per_kv() * s.head_dim * 2;  // combine every core's partials
  }
  int64_t rope_ops() const { return (q_dim() + kv_dim()) * 3 + (s.qk_norm ? (q_dim() + kv_dim()) * 3 : 0); }
  int64_t act_ops() const { return rows(s.intermediate) * ((s.gelu ? 8 : 4) + 1); }
};

// decode_layer's resident KV cache, bf16 [K | V][heads_alloc][rows][D] (DecodeLayerShape::
// capacity): the per-column fills that read the cores' blocks in place and the drains that write
// the new row. The fills' offsets are relative to the window argument (`kv`, bound at the first
// row read: `first`), the drains' to the slot argument (`kv_row`, bound at the new row), so no
// pattern holds the position; window_bytes / slot_bytes: the cache from those rows on.
// A column's stream is [object][core][2 KiB], so one pattern per (KV head
// of the column, K or V): 512 words of a core's block, the column's 4 cores one stride apart,
// then the block's objects (a fill per object and core where the cores are not one stride apart). Reads past a core's positions (padding to whole objects, the next
// core's rows) land in positions the kernel skips; so does the new row's slot (the kernel takes
// the new K/V from the array), which the drain writes.
// With an int8 or int4 cache (kv_int8, kv_int4) the scale buffer, f32 [heads_alloc][rows]
// [K scale, V scale], is read and written the same way through its own views (`kv_scales` from row `first`,
// `kv_row_scales` from row `pos`): scale_fills before the values' fills, scale_drains after the
// values' drains (the kv_new object is [K][V][scales]).
struct ResidentKv {
  int64_t rows = 0, heads_alloc = 0, bytes = 0, window_bytes = 0, slot_bytes = 0;
  std::vector<std::vector<AccessPattern>> fills;  // per column, relative to row `first`
  std::vector<AccessPattern> drains;              // relative to row `pos`
  int64_t scale_bytes = 0, scale_window_bytes = 0, scale_slot_bytes = 0;  // int8 / int4 cache only
  std::vector<std::vector<AccessPattern>> scale_fills;
  std::vector<AccessPattern> scale_drains;
};

ResidentKv resident_kv(const Stages& st, int columns, int64_t first, int64_t pos, int64_t capacity_rows) {
  const DecodeLayerShape& s = st.s;
  const int64_t W = 4, obj_words = kObj / W, rb = st.kv_row_bytes(), row_words = rb / W;
  const int64_t cpk = st.cores_per_kv(), kvpc = st.kv_per_core(), ppc = st.positions_per_core();
  ResidentKv r;
  r.rows = capacity_rows;
  r.heads_alloc = cpk == 1 ? st.P * kvpc : s.kv_heads;  // cpk 1: every core's heads exist (padding heads)
  r.bytes = 2 * r.heads_alloc * r.rows * rb;
  r.window_bytes = r.bytes - first * rb;
  r.slot_bytes = r.bytes - pos * rb;
  auto row_at = [&](int64_t kv, int64_t h, int64_t t) { return ((kv * r.heads_alloc + h) * r.rows + t) * row_words; };
  auto scale_at = [&](int64_t, int64_t h, int64_t t) { return (h * r.rows + t) * 2; };  // words
  // Column c's fills of one block per (KV head of the core, which) of `objs` objects, a core's
  // block of head h at position t starting at word at(which, h, t).
  auto column_fills = [&](int c, int64_t blocks, int64_t objs, auto at_fn) {
    std::vector<AccessPattern> col;
    for (int64_t hl = 0; hl < kvpc; ++hl)
      for (int64_t kv = 0; kv < blocks; ++kv) {
        int64_t at[kCores];  // where each core's block starts (words)
        for (int rr = 0; rr < kCores; ++rr) {
          const int64_t p = int64_t(c) * kCores + rr, h = p / cpk;
          if (cpk == 1) at[rr] = at_fn(kv, p * kvpc + hl, 0);
          else if (h < s.kv_heads) at[rr] = at_fn(kv, h, (p % cpk) * ppc);
          else at[rr] = at_fn(kv, s.kv_heads - 1, 0);  // an idle core reads the last head's first rows
        }
        const int64_t stride = at[1] - at[0];
        bool even = stride >= 0;
        for (int rr = 2; rr < kCores; ++rr) even = even && at[rr] - at[rr - 1] == stride;
        if (even) {  // cores_per_kv 1 or a multiple of 4: the column's cores one stride apart
          col.push_back({W, at[0], {{obj_words, 1}, {kCores, stride}, {objs, obj_words}}, 1});
        } else {  // 2 or 3 (heads change inside the column): one fill per object and core
          for (int64_t o = 0; o < objs; ++o)
            for (int rr = 0; rr < kCores; ++rr) col.push_back({W, at[rr] + o * obj_words, {{obj_words, 1}}, 1});
        }
      }
    return col;
  };
  const int64_t objs = st.stream_positions() * rb / kObj;
  for (int c = 0; c < columns; ++c) r.fills.push_back(column_fills(c, 2, objs, row_at));
  // The new row: per K / V all heads at once when the head stride fits the shim BD, else per head.
  const auto row_drains = [&](std::vector<AccessPattern>& out, int64_t words, int64_t head_stride, auto at_fn,
                              int64_t blocks) {
    for (int64_t kv = 0; kv < blocks; ++kv) {
      if (head_stride <= kAie2p.max_stride_words && s.kv_heads <= kAie2p.max_size1_words) {
        out.push_back({W, at_fn(kv, 0, 0), {{words, 1}, {s.kv_heads, head_stride}}, 1});
      } else {
        for (int64_t h = 0; h < s.kv_heads; ++h) out.push_back({W, at_fn(kv, h, 0), {{words, 1}}, 1});
      }
    }
  };
  row_drains(r.drains, row_words, r.rows * row_words, row_at, 2);
  if (st.kv_scaled()) {
    r.scale_bytes = r.heads_alloc * r.rows * 8;
    r.scale_window_bytes = r.scale_bytes - first * 8;
    r.scale_slot_bytes = r.scale_bytes - pos * 8;
    const int64_t scale_objs = st.kv_scale_stream_bytes() / kvpc / kObj;
    for (int c = 0; c < columns; ++c) r.scale_fills.push_back(column_fills(c, 1, scale_objs, scale_at));
    row_drains(r.scale_drains, 2, r.rows * 2, scale_at, 1);  // K and V scale of each head: one pair
  }
  return r;
}

}  // namespace

int64_t kv_value_bits(const Design& d) {
  const auto on = [&](const char* k) {
    const auto it = d.params.find(k);
    return it != d.params.end() && it->second != 0;
  };
  return on("kv_int4") ? 4 : on("kv_int8") ? 8 : 16;
}

int64_t kv_block_align(int64_t head_dim, int64_t value_bits) {
  const int64_t values = kObj * 8 / value_bits;  // cache values per object
  return values / std::gcd(values, head_dim);
}

namespace {

int64_t decode_layer_param(const Design& d, const char* name) {
  if (d.family != "decode_layer") throw std::invalid_argument("design '" + d.name + "' is not a decode_layer design");
  const auto it = d.params.find(name);
  if (it == d.params.end()) throw std::invalid_argument("design '" + d.name + "' has no parameter " + name);
  return it->second;
}

}  // namespace

// The window starts at the first position read (context - the positions read: the design's
// context parameter is min(context, window)), the slot at the new token's.
namespace {

int64_t first_row(const Design& d) {
  return decode_layer_param(d, "position") + 1 - decode_layer_param(d, "context");
}
// Bytes of one head's cached row of design d.
int64_t kv_row_bytes(const Design& d) { return decode_layer_param(d, "head_dim") * kv_value_bits(d) / 8; }
void check_kv_scaled(const Design& d) {
  if (kv_value_bits(d) == 16)
    throw std::invalid_argument("design '" + d.name + "' has no int8 or int4 KV cache (no kv_scales / kv_row_scales)");
}

}  // namespace

int64_t kv_window_offset(const Design& d) {
  return first_row(d) * kv_row_bytes(d);
}

int64_t kv_row_offset(const Design& d) {
  return decode_layer_param(d, "position") * kv_row_bytes(d);
}

int64_t kv_cache_bytes(const Design& d) {
  return 2 * decode_layer_param(d, "kv_heads_alloc") * decode_layer_param(d, "kv_rows") * kv_row_bytes(d);
}

int64_t kv_scales_window_offset(const Design& d) {
  check_kv_scaled(d);
  return first_row(d) * 8;
}

int64_t kv_scales_row_offset(const Design& d) {
  check_kv_scaled(d);
  return decode_layer_param(d, "position") * 8;
}

int64_t kv_scales_bytes(const Design& d) {
  check_kv_scaled(d);
  return decode_layer_param(d, "kv_heads_alloc") * decode_layer_param(d, "kv_rows") * 8;
}

int64_t kv_cache_rows(const DecodeLayerShape& s, int columns) {
  const int64_t P = int64_t(columns) * kCores, cpk = std::max<int64_t>(1, P / std::max<int64_t>(1, s.kv_heads));
  // The padded per-core reads run past the last position by less than a block (int8 / int4:
  // also a scale block).
  const int64_t bits = kv_bits(s);
  const int64_t slack =
      bits < 16 ? std::max(kv_block_align(s.head_dim, bits), kKvScaleAlign) : kv_block_align(s.head_dim);
  return std::max(s.capacity, s.context) + cpk + slack;
}

Design mlp_fused_design(DType dtype, const DecodeLayerShape& s, int columns) {
  const std::string fam = "mlp_fused";
  check_weights(fam, dtype);
  check_shape(fam, s);
  const Stages st{int64_t(columns) * kCores, dtype, s};
  FusedSpec f;
  f.family = fam;
  f.columns = columns;
  f.name = fam + "_" + std::string(dtype_name(dtype)) + "_" + std::to_string(s.hidden) + "x" +
           std::to_string(s.intermediate) + (s.gelu ? "_geglu" : "_swiglu") + "_c" + std::to_string(columns);
  f.params = {{"hidden", s.hidden}, {"intermediate", s.intermediate}, {"gelu", s.gelu}};
  f.parts = {{"x", s.hidden * 2, true},
             {"weights", 2 * st.wbytes(s.intermediate, s.hidden) + st.wbytes(s.hidden, s.intermediate), false}};
  const int64_t macs = 2 * st.rows(s.intermediate) * s.hidden + st.rows(s.hidden) * s.intermediate;
  f.kernel = {"mlp_fused_" + std::string(dtype_name(dtype)), dtype,
              {{"cores", st.P}, {"gelu", s.gelu}, {"hidden", s.hidden}, {"intermediate", s.intermediate}},
              0, macs, st.act_ops()};
  f.exchanges = 2;  // h, then y
  f.slice_bytes = round_up(std::max(st.rows(s.intermediate), st.rows(s.hidden)) * 2, 4);
  f.core_buffers = {{"x", s.hidden * 2, DType::BF16}, {"h", s.intermediate * 2, DType::BF16},
                    {"acc", f.slice_bytes * 2, DType::F32}};
  f.result_bytes = s.hidden * 2;
  f.stages = {{"x", s.hidden * 2, true},
              {"gate_up", 2 * st.wbytes(s.intermediate, s.hidden), true, 1},
              {"down", st.wbytes(s.hidden, s.intermediate), false, 1, {"result"}}};
  return build_fused(f);
}

Design qkv_rope_design(DType dtype, const DecodeLayerShape& s, int columns) {
  const std::string fam = "qkv_rope";
  check_weights(fam, dtype);
  check_shape(fam, s);
  const Stages st{int64_t(columns) * kCores, dtype, s};
  const int64_t n = st.q_dim() + 2 * st.kv_dim();
  FusedSpec f;
  f.family = fam;
  f.columns = columns;
  f.name = fam + "_" + std::string(dtype_name(dtype)) + "_" + shape_name(s) + "_c" + std::to_string(columns);
  f.params = {{"hidden", s.hidden}, {"heads", s.heads}, {"kv_heads", s.kv_heads},
              {"head_dim", s.head_dim}, {"qk_norm", s.qk_norm}};
  // gamma, qkv rows, then QK-norm gammas and the RoPE cos/sin row of this position.
  f.parts = {{"x", s.hidden * 2, true},
             {"weights", s.hidden * 2 + st.wbytes(n, s.hidden) + (s.qk_norm ? 4 * s.head_dim : 0), false},
             {"rope", 2 * s.head_dim * 2, true}};
  f.kernel = {"qkv_rope_" + std::string(dtype_name(dtype)), dtype,
              {{"cores", st.P}, {"head_dim", s.head_dim}, {"heads", s.heads}, {"hidden", s.hidden},
               {"kv_heads", s.kv_heads}, {"qk_norm", s.qk_norm}},
              0, st.rows(n) * s.hidden, s.hidden * 3 + st.rope_ops()};
  f.exchanges = 1;
  f.slice_bytes = round_up(st.rows(n) * 2, 4);
  f.core_buffers = {{"x", s.hidden * 2, DType::BF16}, {"qkv", n * 2, DType::BF16}};
  f.result_bytes = st.q_dim() * 2;
  f.kv_new_bytes = 2 * st.kv_dim() * 2;
  f.stages = {{"x", s.hidden * 2, true},
              {"qkv", f.parts[1].bytes_per_core, true, 1},
              {"rope", 2 * s.head_dim * 2, true, 0, {"result", "kv_new"}}};
  return build_fused(f);
}

Design attention_decode_design(const DecodeLayerShape& s, int columns) {
  const std::string fam = "attention_decode";
  check_shape(fam, s);
  const Stages st{int64_t(columns) * kCores, DType::BF16, s};
  FusedSpec f;
  f.family = fam;
  f.columns = columns;
  f.name = fam + "_" + shape_name(s) + "_c" + std::to_string(columns);
  f.params = {{"heads", s.heads}, {"kv_heads", s.kv_heads}, {"head_dim", s.head_dim},
              {"context", s.context}, {"positions_per_core", st.positions_per_core()}};
  f.parts = {{"q", st.q_dim() * 2, true}, {"kv", st.kv_bytes(), false}};
  f.kernel = {"attention_decode_bf16", DType::BF16,
              {{"context", s.context}, {"cores", st.P}, {"head_dim", s.head_dim}, {"heads", s.heads},
               {"kv_heads", s.kv_heads}},
              0, st.attn_macs(), st.attn_ops()};
  f.core_index = true;
  f.slice_bytes = std::min<int64_t>(256, st.attn_partial_bytes());
  f.exchanges = int(st.attn_objects(f.slice_bytes));
  f.core_buffers = {{"q", st.q_dim() * 2, DType::BF16}, {"partial", st.attn_partial_bytes(), DType::F32},
                    {"scores", kObj / 2 * 4, DType::F32}};
  f.result_bytes = st.q_dim() * 2;
  f.stages = {{"q", st.q_dim() * 2, true}, {"attention", st.kv_bytes(), true, f.exchanges, {"result"}}};
  return build_fused(f);
}

Design decode_layer_design(DType dtype, const DecodeLayerShape& shape, int columns) {
  const std::string fam = "decode_layer";
  check_weights(fam, dtype);
  check_shape(fam, shape);
  check(shape.window >= 0, fam, "window must be 0 (full attention) or positive, got " + std::to_string(shape.window));
  // A sliding-window layer reads only the last `window` positions: a shorter KV part, the same
  // configuration (the context is a runtime parameter).
  check(!shape.kv_int8 || dtype == DType::I8, fam,
        "an int8 KV cache needs int8 weights (kernel decode_layer_int8_kv8), got " + std::string(dtype_name(dtype)));
  check(!shape.kv_int4 || dtype == DType::I8, fam,
        "an int4 KV cache needs int8 weights (kernel decode_layer_int8_kv4), got " + std::string(dtype_name(dtype)));
  check(!(shape.kv_int8 && shape.kv_int4), fam, "kv_int8 and kv_int4 are exclusive (one KV cache precision)");
  check(shape.capacity == 0 || shape.capacity >= shape.context, fam,
        "KV capacity " + std::to_string(shape.capacity) + " is smaller than the context " + std::to_string(shape.context));
  DecodeLayerShape s = shape;
  if (s.window > 0) s.context = std::min(s.context, s.window);
  const int64_t post = s.post_norms ? s.hidden * 2 : 0;  // a post-norm gamma (bf16) in the o and down stages
  const Stages st{int64_t(columns) * kCores, dtype, s};
  const int64_t n_qkv = st.q_dim() + 2 * st.kv_dim();
  FusedSpec f;
  f.family = fam;
  f.columns = columns;
  f.name = fam + "_" + std::string(dtype_name(dtype)) + "_" + shape_name(s) + (s.post_norms ? "_pn" : "") +
           kv_suffix(s) + "_c" + std::to_string(columns);
  f.params = {{"hidden", s.hidden},     {"heads", s.heads},       {"kv_heads", s.kv_heads},
              {"head_dim", s.head_dim}, {"intermediate", s.intermediate}, {"context", s.context},
              {"qk_norm", s.qk_norm},   {"gelu", s.gelu}};
  if (s.window > 0) f.params["window"] = s.window;
  if (s.post_norms) f.params["post_norms"] = 1;
  if (s.kv_int8) f.params["kv_int8"] = 1;
  if (s.kv_int4) f.params["kv_int4"] = 1;
  // The resident cache: positions [first, pos] are read (pos, the new token's, is drained);
  // `first` and `pos` only place the kv / kv_row arguments inside it (kv_window_offset).
  const int64_t pos = shape.context - 1, first = shape.context - s.context;
  const ResidentKv kv = resident_kv(st, columns, first, pos, kv_cache_rows(shape, columns));
  f.params["capacity"] = std::max(shape.capacity, shape.context);
  f.params["kv_rows"] = kv.rows;
  f.params["kv_heads_alloc"] = kv.heads_alloc;
  f.params["position"] = pos;
  // The weights part: attn gamma, QKV rows (+ scales), QK-norm gammas, then (int8) the scales of
  // the o, gate, up and down rows, which the core keeps until their rows arrive after attention:
  // the scales' 32-byte blocks would otherwise leave a partial object at the end of both parts.
  const int64_t rest_scales = 2 * st.scale_bytes(s.hidden) + 2 * st.scale_bytes(s.intermediate);
  const int64_t w_attn = s.hidden * 2 + st.wbytes(n_qkv, s.hidden) + (s.qk_norm ? 4 * s.head_dim : 0) + rest_scales;
  const int64_t o_rows = st.row_bytes(s.hidden, st.q_dim()), gate_up_rows = 2 * st.row_bytes(s.intermediate, s.hidden),
                down_rows = st.row_bytes(s.hidden, s.intermediate);
  const int64_t w_rest = o_rows + post + s.hidden * 2 + gate_up_rows + down_rows + post;
  f.parts = {{"x", s.hidden * 2, true}, {"weights", w_attn, false}, {"rope", 2 * s.head_dim * 2, true}};
  if (st.kv_scaled())
    f.parts.push_back({"kv_scales", st.kv_scale_stream_bytes(), false, kv.scale_fills, kv.scale_window_bytes});
  f.parts.push_back({"kv", st.kv_stream_bytes(), false, kv.fills, kv.window_bytes});
  f.parts.push_back({"weights_rest", w_rest, false});
  const int64_t macs = st.rows(n_qkv) * s.hidden + st.attn_macs() + st.rows(s.hidden) * st.q_dim() +
                       2 * st.rows(s.intermediate) * s.hidden + st.rows(s.hidden) * s.intermediate;
  // Norms and residual adds run on every core over the whole vector (no exchange needed).
  const int64_t ops = (s.post_norms ? 4 : 2) * s.hidden * 3 + 2 * s.hidden + st.rope_ops() + st.attn_ops() +
                      st.act_ops();
  // post_norms is always passed (0 or 1): Qwen3 and Gemma 3 layers call one signature.
  f.kernel = {"decode_layer_" + std::string(dtype_name(dtype)) + kv_suffix(s), dtype,
              {{"context", s.context}, {"cores", st.P}, {"gelu", s.gelu}, {"head_dim", s.head_dim},
               {"heads", s.heads}, {"hidden", s.hidden}, {"intermediate", s.intermediate},
               {"kv_heads", s.kv_heads}, {"post_norms", s.post_norms ? 1 : 0}, {"qk_norm", s.qk_norm}},
              0, macs, ops};
  f.core_index = true;
  // Exchanged stages: qkv, attention partials (several objects), o, h, down.
  f.slice_bytes = round_up(std::max({st.rows(n_qkv) * 2, st.rows(s.intermediate) * 2, st.rows(s.hidden) * 2}), 4);
  f.exchanges = 4 + int(st.attn_objects(f.slice_bytes));
  f.core_buffers = {{"residual", s.hidden * 4, DType::F32},
                    {"x_norm", s.hidden * 2, DType::BF16},
                    {"partial", st.attn_partial_bytes(), DType::F32},
                    {"acc", f.slice_bytes * 2, DType::F32}};
  if (s.post_norms) f.core_buffers.push_back({"post_gamma", post, DType::BF16});
  if (rest_scales > 0) f.core_buffers.push_back({"rest_scales", rest_scales, DType::F32});
  f.result_bytes = s.hidden * 2;
  f.kv_new_bytes = st.kv_new_bytes();
  f.kv_new_arg = "kv_row";
  f.kv_new_drains = kv.drains;
  f.kv_new_arg_bytes = kv.slot_bytes;
  if (st.kv_scaled()) {  // the row's values into kv_row, then its scales into kv_row_scales
    f.kv_new_drain_args.assign(kv.drains.size(), {"kv_row", kv.slot_bytes});
    f.kv_new_drains.insert(f.kv_new_drains.end(), kv.scale_drains.begin(), kv.scale_drains.end());
    f.kv_new_drain_args.resize(f.kv_new_drains.size(), {"kv_row_scales", kv.scale_slot_bytes});
  }
  // x; norm + QKV rows (exchange); QK-norm + RoPE, the new K/V row out; attention partials
  // (exchanges) and their combine; o rows (exchange) + residual; ffn norm + gate/up rows
  // (exchange h); down rows (exchange) + residual, the result out. With post_norms the o and
  // down stages also read a gamma after their rows and normalise the exchanged vector before
  // the residual add (extra work in those stages, no new stage).
  f.stages = {{"x", s.hidden * 2, true},
              {"qkv", w_attn, true, 1},
              {"rope", 2 * s.head_dim * 2, true, 0, {"kv_new"}}};
  if (st.kv_scaled()) f.stages.push_back({"kv_scales", st.kv_scale_stream_bytes(), true});
  f.stages.insert(f.stages.end(),
                  {{"attention", st.kv_stream_bytes(), true, int(st.attn_objects(f.slice_bytes))},
                   {"o", o_rows + post, true, 1},
                   {"gate_up", s.hidden * 2 + gate_up_rows, false, 1},
                   {"down", down_rows + post, false, 1, {"result"}}});
  return build_fused(f);
}

Design lm_head_design(DType dtype, int64_t vocab, int64_t hidden, int columns) {
  const std::string fam = "lm_head";
  check_weights(fam, dtype);
  check(vocab > 0 && hidden > 0 && hidden % 16 == 0, fam, "vocab and hidden must be positive, hidden a multiple of 16");
  const int64_t P = int64_t(columns) * kCores;
  // Logits leave in the fewest objects of <= 256 rows (1 KiB of f32) a core, rows spread evenly.
  const int64_t per_core = ceil_div(vocab, P), objects = ceil_div(per_core, 256), chunk = ceil_div(per_core, objects);
  FusedSpec f;
  f.family = fam;
  f.columns = columns;
  f.name = fam + "_" + std::string(dtype_name(dtype)) + "_" + std::to_string(vocab) + "x" +
           std::to_string(hidden) + "_c" + std::to_string(columns);
  const int64_t rows = objects * chunk;
  f.params = {{"vocab", vocab}, {"hidden", hidden}, {"vocab_pad", rows * P}, {"chunk_rows", chunk}};
  f.parts = {{"x", hidden * 2, true}, {"weights", hidden * 2 + objects * matrix_bytes(dtype, chunk, hidden), false}};
  f.kernel = {"lm_head_" + std::string(dtype_name(dtype)), dtype,
              {{"cores", P}, {"hidden", hidden}, {"vocab", vocab}}, 0, rows * hidden, hidden * 3};
  f.join_bytes = chunk * 4;
  f.join_objects = objects;
  f.core_buffers = {{"x", hidden * 2, DType::BF16}};
  // x; the norm gamma; then per logits object its rows, the object out.
  f.stages = {{"x", hidden * 2, true}, {"norm", hidden * 2, true}};
  for (int64_t o = 0; o < objects; ++o)
    f.stages.push_back({"rows", matrix_bytes(dtype, chunk, hidden), false, 0, {"out"}});
  return build_fused(f);
}

}  // namespace xdna::npu

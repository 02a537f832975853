// npu-sim's functional execution of the fused designs (design_families.h, "Fused decode designs"):
// a design runs from its host arguments, the DDR buffers the device runtime would pass. Each
// column's DDR stream is gathered through the runtime sequence's fill access patterns and split
// over its 4 cores ([object][core][2 KiB], as the memtile split does); every core runs its
// program (design.h CoreStep) over the entry points of its stage kernel (aie_kernels/<kernel>.cc)
// through the interpreter of sim_program.h; the exchanges gather the cores' output slices in
// (column, row) order, as the memtile join chain does; the outputs leave through the drain
// steps' access patterns. Only bf16 designs are executed.
// The cost model still prices the same design (sim_backend.h); this file computes, it does not
// time. Layouts and what is not modelled: docs/npu-sim.md, "Fused designs".
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "npu/aie_numerics.h"
#include "npu/design.h"
#include "npu/design_families.h"

namespace xdna::npu {

// The rounding every simulated kernel stores bf16 with (the kernels select conv_even).
inline constexpr aie::Rounding kSimRounding = aie::Rounding::NearestEven;

class NpuSimBackend;

using HostArgs = std::vector<std::vector<uint8_t>>;  // one byte vector per Design::args entry

// Scalar kernel arguments that are not part of a design's shape.
struct SimKernelArgs {
  float eps = 1e-6f;          // RMSNorm epsilon
  float rms_offset = 0.0f;    // Gemma's (1 + w): added to every norm gamma in f32
  float attn_scale = 0.0f;    // 0: 1 / sqrt(head_dim)
  bool rope_interleaved = false;  // pairs (2i, 2i + 1) instead of (i, i + D/2)
};

// One decoder layer's weights as f32 values (rounded to bf16 nearest-even when packed):
// matrices row-major [out][in], norm gammas [n]. q_norm / k_norm only with QK-norm;
// post_attn_norm / post_ffn_norm only with post_norms (Gemma's sandwich norms).
struct SimLayerWeights {
  std::vector<float> attn_norm, q, k, v, q_norm, k_norm, o, ffn_norm, gate, up, down;
  std::vector<float> post_attn_norm, post_ffn_norm;
};

// A layer's KV cache as npu-sim keeps it in DDR: bf16 [kv_head][max_len][head_dim]; with
// int8 set (a quantized KV cache: DecodeLayerShape::kv_int8, or kv_int4 with int4 also set) the
// designs read k8 / v8, the quantized values one a byte [kv_head][max_len][head_dim] (int4: in
// [-7, 7], packed two a byte into the resident buffer), and scales, f32 [kv_head][max_len]
// [K scale, V scale], and k / v hold the same rows dequantized (bf16(q * scale): a host-side
// mirror, not what is read).
struct SimKvCache {
  int64_t kv_heads = 0, head_dim = 0, max_len = 0, length = 0;
  std::vector<aie::bf16> k, v;
  bool int8 = false, int4 = false;
  std::vector<int8_t> k8, v8;
  std::vector<float> scales;
  SimKvCache() = default;
  // int4 (an int4 cache) implies int8 (quantized).
  SimKvCache(int64_t kv_heads, int64_t head_dim, int64_t max_len, bool int8 = false, bool int4 = false);
  // Appends one position from a bf16 kv_new row (k [kv_heads x head_dim] then v; an int8 cache
  // quantizes it as the kernel does); throws when full.
  void append(std::span<const aie::bf16> kv_row);
  // Appends one position from an int8 kv_new row as drained ([K int8][V int8][per KV head:
  // K scale, V scale f32]); throws unless int8, when full or for a row of another size.
  void append_int8(std::span<const uint8_t> kv_row);
  // Appends one position from an int4 kv_new row as drained ([K int4][V int4], two a byte, low
  // nibble first, then the scales); throws unless int4, when full or for a row of another size.
  void append_int4(std::span<const uint8_t> kv_row);
  // (append_int8 / append_int4's common part: the row's values and scales into k8 / v8, scales, k, v.)
  void append_quantized(std::span<const uint8_t> kv_row);
  // An int8 / int4 cache: (re)quantizes positions [from, to) from k / v (rows written there directly,
  // e.g. a prefill done on the host); nothing for a bf16 cache.
  void quantize_rows(int64_t from, int64_t to);
};

// The RoPE row of one position ("rope" argument): cos[D/2] then sin[D/2], f32, angles
// position * inv_freq[i] in f32 as the host's rope computes them.
std::vector<float> rope_row(std::span<const float> inv_freq, int64_t position);

std::vector<aie::bf16> to_bf16(std::span<const float> x);
std::vector<float> to_f32(std::span<const aie::bf16> x);

// Host arguments of the fused designs, in the DDR layouts their fills read (zero-filled
// elsewhere). x: the layer input [hidden] bf16. decode_layer: the design is the token at
// position kv.length; its `kv` argument is the resident cache (the cached positions in the
// design's layout, DecodeLayerShape::capacity), which its fills read in place (the last
// `context` positions, the new token's slot included: the kernel takes that row from the array)
// and its drains write the new row into. attention_decode: the last `context` cached positions.
// `rope`: the row of this layer's frequencies (a local layer's own base for Gemma 3).
HostArgs pack_decode_layer(const Design& d, const SimLayerWeights& w, std::span<const aie::bf16> x,
                           std::span<const float> rope, const SimKvCache& kv);
HostArgs pack_qkv_rope(const Design& d, const SimLayerWeights& w, std::span<const aie::bf16> x,
                       std::span<const float> rope);
HostArgs pack_attention_decode(const Design& d, std::span<const aie::bf16> q, const SimKvCache& kv);
HostArgs pack_mlp_fused(const Design& d, const SimLayerWeights& w, std::span<const aie::bf16> x);
// lm_head: final-norm gamma [hidden] and the head [vocab][hidden].
HostArgs pack_lm_head(const Design& d, std::span<const float> gamma, std::span<const float> head,
                      std::span<const aie::bf16> x);

// The same packing for a later token around weights packed once (the device keeps them resident):
// `args` from an earlier pack_decode_layer / pack_lm_head of the same layer or head (any
// position) keeps its weight arguments ("weights", "weights_rest": they do not depend on the
// token); every other argument is rewritten as the full pack writes it for `d` (x, the RoPE row,
// the KV views, zeroed outputs). Throws std::invalid_argument naming the design when `args` is
// not d's argument list or the inputs do not fit it.
// `written` (optional, one entry per argument): byte ranges outside which args[i] is known to be
// zero (kv_args_written), so only those are cleared; nullopt or no entry: all of it. Returns the
// bytes it cleared.
using ByteRanges = std::vector<std::pair<size_t, size_t>>;
int64_t repack_decode_layer(const Design& d, HostArgs& args, std::span<const aie::bf16> x,
                         std::span<const float> rope, const SimKvCache& kv,
                         const std::vector<std::optional<ByteRanges>>* written = nullptr);
// After decode_layer `d` ran with `kv` (its new row appended): per argument, the byte ranges that
// can be non-zero for the KV views (kv, kv_row, kv_scales, kv_row_scales: the cached rows of each
// head's block, the drained one included), nullopt for every other argument.
std::vector<std::optional<ByteRanges>> kv_args_written(const Design& d, const SimKvCache& kv);
void repack_lm_head(const Design& d, HostArgs& args, std::span<const aie::bf16> x);
// Moves every argument of a decode_layer's or lm_head's `args` but the weight arguments (what the
// repacks keep) out: into the same slots of `spare` when given, whose buffers the next repack of a
// design with the same arguments can take back (no fresh pages a token), else freed. (A layer's
// KV views are about its cache's size: kept for every layer, they would double the cache.)
void keep_weights_only(const Design& d, HostArgs& args, HostArgs* spare = nullptr);

// How the cores' DDR objects of runs were read from their arguments: in place (an object that is
// one run of one argument: no copy) or gathered into a buffer of their own (an object spanning
// runs or arguments), in bytes.
struct SimStreamCounts {
  int64_t in_place_bytes = 0, gathered_bytes = 0;
};

// Runs one invocation of `d` (families decode_layer, qkv_rope, attention_decode, mlp_fused,
// lm_head; dtype bf16) on `args`, writing its drained outputs into them (and, with `counts`,
// adding how its DDR objects were read). Throws std::invalid_argument naming the design and what
// it cannot execute (family, dtype, argument sizes).
void run_design(const Design& d, HostArgs& args, const SimKernelArgs& k = {}, SimStreamCounts* counts = nullptr);
// run_design's checks of the design (its family, the split's shape) and its core programs resolved
// (sim_program.h), once for many invocations: the layers of a decode token share one. `d` must
// outlive it.
class CorePrograms;
std::shared_ptr<const CorePrograms> prepare_design(const Design& d, const SimKernelArgs& k = {});
// run_design on a prepared design: the same checks of the arguments, the same outputs.
void run_design(const CorePrograms& prepared, HostArgs& args, SimStreamCounts* counts = nullptr);

// Appends the new K/V row a decode_layer invocation drained to `kv` (bf16, or int8 / int4 rows
// and their scales for an int8- / int4-KV design).
void append_kv_new(const Design& d, const HostArgs& args, SimKvCache& kv);
// The new K/V row (k [kv_heads x head_dim] then v) a decode_layer or qkv_rope invocation drained.
std::vector<aie::bf16> kv_new_row(const Design& d, const HostArgs& args);
// A drained output argument as bf16 / f32 values (`n` of them).
std::vector<aie::bf16> arg_bf16(const Design& d, const HostArgs& args, const std::string& name, int64_t n);
std::vector<float> arg_f32(const Design& d, const HostArgs& args, const std::string& name, int64_t n);
// The logits [vocab] f32 an lm_head invocation drained (per column [object][core][chunk_rows]).
std::vector<float> lm_head_logits(const Design& d, const HostArgs& args);

// ---- One decoder layer, two routes -------------------------------------------------------------
struct SimLayerResult {
  std::vector<aie::bf16> out;        // [hidden]
  std::vector<std::string> designs;  // the dispatches, in order (design names; unfused ops by node name)
};

// Route A: the whole layer as one decode_layer design (context = kv.length + 1, at most
// shape.window when set), the new K/V row appended to `kv` from the kv_new output. An int8
// `kv` (SimKvCache::int8) runs decode_layer_int8_kv8 (int8 weights, int8 KV cache), an int4 one
// (SimKvCache::int4) decode_layer_int8_kv4.
SimLayerResult fused_decode_layer(const DecodeLayerShape& shape, const SimLayerWeights& w,
                                  std::span<const aie::bf16> x, std::span<const float> rope, SimKvCache& kv,
                                  const SimKernelArgs& k = {}, int columns = 8);

// Route B: the same layer op by op: qkv_rope design, the K/V row placed in the cache by the
// host, attention_decode design, then o-projection, residual add, RMSNorm, gate, up, act, mul,
// down and residual add each as its own unfused dispatch of `sim` (NpuSimBackend::compute).
SimLayerResult op_by_op_decode_layer(NpuSimBackend& sim, const DecodeLayerShape& shape,
                                     const SimLayerWeights& w, std::span<const aie::bf16> x,
                                     std::span<const float> rope, SimKvCache& kv, const SimKernelArgs& k = {},
                                     int columns = 8);

// What the npu-sim executors (sim_exec*.cpp) share.
namespace sim {
// Throws std::invalid_argument "npu-sim: design '<name>': <what>".
[[noreturn]] void fail(const Design& d, const std::string& what);
// The design's parameter `name`; throws naming the design when it has none.
int64_t param(const Design& d, const char* name);
// The sequence's (first) drain step of `fifo`; throws when the design has none.
const SeqStep& drain_step(const Design& d, const std::string& fifo);
// The P cores' DDR streams as references into the bytes the fills read (nothing copied): core
// p's object i is pieces[p][first[p][i] .. first[p][i + 1]), 2 KiB together, in stream order.
struct StreamRefs {
  struct Piece {
    const uint8_t* src;
    size_t bytes;
  };
  std::vector<std::vector<Piece>> pieces;
  std::vector<std::vector<uint32_t>> first;  // per core: its objects + 1 entries
  size_t objects(size_t p) const { return first[p].empty() ? 0 : first[p].size() - 1; }
  // Core p's object i (2 KiB) into dst.
  void read(size_t p, size_t i, uint8_t* dst) const;
  // Core p's object i in place when it is one run of one argument (2 KiB), else null.
  const uint8_t* whole(size_t p, size_t i) const {
    return first[p][i + 1] - first[p][i] == 1 ? pieces[p][first[p][i]].src : nullptr;
  }
};
// Each of the P cores' DDR stream: its column's fills walked through their access patterns,
// split [object][core][2 KiB] as the memtile split does; references into `args`, which must
// outlive them unchanged.
StreamRefs core_stream_refs(const Design& d, const HostArgs& args, int64_t P);
// References to whole streams held elsewhere (one per core, whole 2 KiB objects).
StreamRefs stream_refs(const std::vector<std::vector<uint8_t>>& streams);
// The same streams gathered into buffers of their own (one per core).
std::vector<std::vector<uint8_t>> core_streams(const Design& d, const HostArgs& args, int64_t P);
// Writes `bytes` through the drain steps of `fifo`, in sequence order.
void drain(const Design& d, HostArgs& args, const std::string& fifo, const std::vector<uint8_t>& bytes);
// Visits the byte offset of every element `p` moves, in transfer order (dims[0] innermost).
template <class F>
void walk(const AccessPattern& p, F&& f) {
  Dim d[3];
  for (size_t i = 0; i < p.dims.size() && i < 3; ++i) d[i] = p.dims[i];
  for (int64_t rep = 0; rep < p.repeat; ++rep)
    for (int64_t i2 = 0; i2 < d[2].size; ++i2)
      for (int64_t i1 = 0; i1 < d[1].size; ++i1)
        for (int64_t i0 = 0; i0 < d[0].size; ++i0)
          f((p.offset + i0 * d[0].stride + i1 * d[1].stride + i2 * d[2].stride) * p.elem_bytes);
}
// The same elements as walk, in the same order, as runs f(byte offset, bytes): an innermost row
// is one run when its elements are adjacent (dims[0] stride 1), else each element is one.
template <class F>
void walk_runs(const AccessPattern& p, F&& f) {
  Dim d[3];
  for (size_t i = 0; i < p.dims.size() && i < 3; ++i) d[i] = p.dims[i];
  if (d[0].stride != 1) {
    walk(p, [&](int64_t off) { f(off, p.elem_bytes); });
    return;
  }
  const int64_t run = d[0].size * p.elem_bytes;
  if (run <= 0) return;
  for (int64_t rep = 0; rep < p.repeat; ++rep)
    for (int64_t i2 = 0; i2 < d[2].size; ++i2)
      for (int64_t i1 = 0; i1 < d[1].size; ++i1) f((p.offset + i1 * d[1].stride + i2 * d[2].stride) * p.elem_bytes, run);
}
}  // namespace sim

}  // namespace xdna::npu

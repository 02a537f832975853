// Parameterised design families: each function returns a Design (design.h) for one shape that
// passes validate_design, or throws std::invalid_argument naming the parameter that cannot be
// met. The layouts they expect in DDR (what the bake step writes) are in docs/npu-designs.md.
//
// Shared conventions:
//  - `columns` array columns are used (1..8), each with its shim, memtile and 4 compute rows;
//  - shapes are padded up to whole tiles: the design's host buffers have the padded sizes
//    (params "*_pad"); the host pads activations, the bake step pads weights;
//  - every core keeps kStackBytes of L1 for its stack (assumption: mlir-aie's default core
//    stack is 1 KiB; aie2p.md does not list it).
#pragma once
#include <cstdint>
#include <string>

#include "npu/design.h"

namespace xdna::npu {

inline constexpr int64_t kStackBytes = 1024;

// y[N] = W[N x K] . x[K]; weights streamed from DDR (row-major N_pad x K, padded rows zero)
// through each column's memtile, split over its 4 cores in chunks of rows. dtype: BF16 (bf16
// output), BFP16 (bfp16ebs8 weights and x, bf16 output), I8 (int8 weights and x, int8 output
// after shift-round-saturate).
Design gemv_design(DType dtype, int64_t n_out, int64_t k_in, int columns = 8);

// C[M x N] = A[M x K] . B[K x N] on `columns` x `rows` cores (rows <= columns). A row-major;
// B pre-tiled by the bake step as [N_pad / n][K][n]; C row-major. Each core owns an m x n tile
// of C (m = n: the largest multiple of 8 whose double-buffered A/B tiles, accumulator and
// output fit L1, k = 64); A tiles are broadcast along array rows, B tiles down array columns.
// When a K x n panel of B fits a memtile it is loaded once and reused for every row block.
// dtype: BF16 (bf16 out), BFP16 (bf16 out), I8 (int8 out after SRS).
Design gemm_design(DType dtype, int64_t M, int64_t K, int64_t N, int columns = 8, int rows = 4);

// Elementwise over n values. Unary ops ("silu", "gelu", "exp", "scale") use 4 cores per
// column; binary ops ("add", "mul") use 2 (two input splits need 4 memtile MM2S channels each
// otherwise, and a memtile has 6). bf16 only.
Design elementwise_design(const std::string& op, int64_t n, int columns = 8);

// RMSNorm or LayerNorm over `rows` rows of `hidden` bf16 values (f32 statistics), one row per
// object, rows spread over columns x 4 cores; gamma (and beta) broadcast once per column.
enum class NormKind : uint8_t { RMS, Layer };
Design norm_design(NormKind kind, int64_t rows, int64_t hidden, int columns = 8);

// Row softmax over `rows` rows of `len` bf16 values (exp and reciprocal from lookup tables).
Design softmax_design(int64_t rows, int64_t len, int columns = 8);

// Contiguous DDR range as a shim access pattern (32-bit words, factored into sizes within the
// DMA limits). Throws if bytes is not a multiple of 4 or has no such factoring.
AccessPattern contiguous_pattern(int64_t offset_bytes, int64_t bytes);

// What the family generators (design_families*.cpp) share: column c's shim, memtile and compute
// row r, and the per-column / per-core names of their FIFOs ("in_c3", "in_c3r1").
namespace gen {
inline TileCoord shim(int c) { return {c, kAie2p.shim_row}; }
inline TileCoord mem(int c) { return {c, kAie2p.memtile_row}; }
inline TileCoord core(int c, int r) { return {c, kAie2p.first_compute_row + r}; }
inline std::string cname(const std::string& base, int c) { return base + "_c" + std::to_string(c); }
inline std::string crname(const std::string& base, int c, int r) { return cname(base, c) + "r" + std::to_string(r); }
}  // namespace gen

}  // namespace xdna::npu

namespace xdna::npu {

// ---- Fused decode designs (design_families_fused.cpp) ------------------------------------------
// One decoder layer's shape at decode (one new token). `context`: KV positions the attention
// reads, the new token included (a runtime parameter: it sizes the KV fills of the runtime
// sequence, not the array configuration, so it is not part of the design's name).
struct DecodeLayerShape {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  int64_t context = 1;
  bool qk_norm = false;  // per-head RMSNorm of q and k (Qwen3, Gemma 3)
  bool gelu = false;     // GeGLU (tanh GELU) instead of SwiGLU
  // Gemma 3 (decode_layer only; the defaults are the Qwen3 / Llama layer):
  //  - window > 0: a sliding-window (local) layer: attention reads only the last `window`
  //    positions, so the design's context is min(context, window). Like the context it is a
  //    runtime parameter (the array configuration and the name do not change: local and global
  //    layers share one design); the local layers' own RoPE base is in the rope row the host
  //    passes.
  //  - post_norms: sandwich norms, RMSNorm of the o-projection and of the down projection
  //    before each residual add (gammas in the o and down stages' stream; name suffix "_pn").
  int64_t window = 0;
  bool post_norms = false;
  // decode_layer only: positions the resident KV cache holds (0: context). The cache is one
  // buffer, bf16 [K | V][kv_head][kv_cache_rows][head_dim] with position p at row p, passed
  // twice at an offset inside it (kv_window_offset, kv_row_offset): `kv` from the first row the
  // token reads, which the fills read in place, and `kv_row` from the new row's slot (position
  // context - 1), which the drains write. The patterns are relative to those starts, so the
  // runtime sequence does not depend on the position, only on the per-core split of the
  // context. Not part of the name (like the context).
  int64_t capacity = 0;
  // decode_layer with int8 weights only: an int8 KV cache (name suffix "_kv8", kernel
  // decode_layer_int8_kv8). The values buffer is int8 [K | V][kv_head][kv_cache_rows][head_dim],
  // passed as `kv` / `kv_row` like the bf16 cache; each (KV head, position) row has an f32 scale
  // (max|x| / 127) in a second buffer, f32 [kv_head][kv_cache_rows][K scale, V scale], passed as
  // `kv_scales` (from the first row read) and `kv_row_scales` (from the new row's slot). The
  // scales travel in their own stream part before the int8 K/V blocks, so the runtime sequence
  // stays position-independent (the two scale views carry the position in their addresses).
  bool kv_int8 = false;
  // decode_layer with int8 weights only: an int4 KV cache (name suffix "_kv4", kernel
  // decode_layer_int8_kv4): as kv_int8, with each row's values signed int4, two a byte (value
  // 2i in the low nibble of byte i; scale max|x| / 7, values saturated to +-7), so the values
  // buffer is [K | V][kv_head][kv_cache_rows][head_dim / 2] bytes; the same scale buffer and
  // views. Exclusive with kv_int8.
  bool kv_int4 = false;
};

// Bits a value of s's KV cache: 16 (bf16), 8 (kv_int8) or 4 (kv_int4).
inline int64_t kv_bits(const DecodeLayerShape& s) { return s.kv_int4 ? 4 : s.kv_int8 ? 8 : 16; }

// Rows per KV head of decode_layer's resident cache for `s` on `columns` columns: capacity
// plus the slack the padded per-core reads run past the last position into.
int64_t kv_cache_rows(const DecodeLayerShape& s, int columns = 8);
// Positions one core's K (or V) block is padded to in the DDR stream: whole 2 KiB objects
// (value_bits: 16 for the bf16 cache, 8 for int8, 4 for int4).
int64_t kv_block_align(int64_t head_dim, int64_t value_bits = 16);
// Bits a cached value of a design: 4 or 8 for a decode_layer with the kv_int4 / kv_int8
// parameter, else 16.
int64_t kv_value_bits(const Design& d);
// Positions a core's K/V scale block (8 bytes a position) is padded to: one 2 KiB object.
inline constexpr int64_t kKvScaleAlign = 256;
// Where a decode_layer design's `kv` (the read window) and `kv_row` (the new row's slot)
// arguments start inside the layer's resident cache buffer, in bytes, and the buffer's size
// (kv_cache_bytes). Throw std::invalid_argument for another family.
int64_t kv_window_offset(const Design& decode_layer);
int64_t kv_row_offset(const Design& decode_layer);
int64_t kv_cache_bytes(const Design& decode_layer);
// An int8- or int4-KV decode_layer's scale buffer: where `kv_scales` (the read window) and
// `kv_row_scales` (the new row's slot) start in it, in bytes, and its size. Throw
// std::invalid_argument for another design (naming it).
int64_t kv_scales_window_offset(const Design& decode_layer);
int64_t kv_scales_row_offset(const Design& decode_layer);
int64_t kv_scales_bytes(const Design& decode_layer);

// The fused designs share one topology (docs/npu-designs.md, "Fused decode designs"):
//  - DDR stream: per column, shim MM2S0 -> memtile S2MM0 -> split over the 4 cores (4 KiB
//    objects, double-buffered). Everything a core reads from DDR arrives here in the order it
//    is used: the input vector, its weight rows (and norm gammas), its share of the KV cache.
//  - Exchange (activations stay on the array): each core's output slice of a stage goes to its
//    column's memtile (S2MM 1+r); memtiles chain left to right (MM2S5 -> S2MM5), each joining
//    its 4 slices behind what arrived from the left; the last memtile broadcasts the whole
//    vector to all 32 cores (MM2S4 -> core S2MM1). Every core then holds the full activation
//    for the next stage: no DDR round trip, no host round trip.
//  - Outputs: the last core drains the result (core MM2S1 -> shim S2MM0 of its column); the
//    fused QKV and whole-layer designs also drain the new token's K/V row from core (0,2).
// Each generator calls validate_design and lets its error (naming the tile and resource) out.

// y = W_down . act(W_gate . x) * (W_up . x): gate/up rows split over the 32 cores (each core
// applies act and the product to its rows), the h vector exchanged, down rows split.
Design mlp_fused_design(DType dtype, const DecodeLayerShape& s, int columns = 8);

// RMSNorm(x) -> [q | k | v] = W_qkv . x (rows split over the cores), then QK-norm and RoPE on the
// exchanged vector; drains q (bf16) and the new K/V row.
Design qkv_rope_design(DType dtype, const DecodeLayerShape& s, int columns = 8);

// Decode attention with the KV cache in DDR (bf16, per KV head [position][head_dim]): the 32
// cores split (KV head, position block); each computes a partial softmax-weighted sum (running
// max and sum, flash-decoding) for the query heads of its KV head; the partials are exchanged
// and every core combines them. Drains the attention output [heads x head_dim] bf16.
Design attention_decode_design(const DecodeLayerShape& s, int columns = 8);

// One whole decoder layer in one design: RMSNorm, QKV (+ QK-norm, RoPE), KV write, attention,
// o-projection + residual, RMSNorm, gate/up/act, down + residual. Weights streamed from DDR
// once, activations in L1/L2 between the five exchanged stages. The KV cache is resident in
// DDR (DecodeLayerShape::capacity): per column one fill per (KV head of its cores, K or V)
// reads the cores' position blocks in place, and one drain per (KV head, K or V) writes the
// new row. When cores / kv_heads is 2 or 3 (a column's cores span two heads, not one stride
// apart) the column reads its cores' blocks with one fill per object and core instead.
Design decode_layer_design(DType dtype, const DecodeLayerShape& s, int columns = 8);

// Final RMSNorm + LM head: every core normalises x, then computes its rows of logits; logits
// join per column and drain (no exchange).
Design lm_head_design(DType dtype, int64_t vocab, int64_t hidden, int columns = 8);

}  // namespace xdna::npu

namespace xdna::npu {

// ---- Encoder attention (design_families_encoder.cpp) --------------------------------------------
// Attention over a whole sequence at once (BERT-family and Whisper encoders): q [T, heads, D],
// k/v [S, kv_heads, D], GQA when heads > kv_heads, not causal by default, optionally banded
// (|p - j| < window: ModernBERT's local layers) or causal (j <= p, within window if set).
struct EncoderAttentionShape {
  int64_t T = 0, S = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  int64_t window = 0;  // 0: every key
};

// Work is split into units (head, round of 4 x q_tile query rows); unit u runs on column
// u % columns, its 4 cores taking q_tile rows each. Per unit the column's shim sends the query
// rows (split over the cores through the memtile) and the K/V blocks the rows can see (broadcast
// to the 4 cores, kv_block keys of K then V per object); each core keeps f32 running max, sum
// and output (online softmax, flash-attention form) and drains its rows through the memtile
// join. DDR layouts: q and out [T_pad][heads][D] bf16; kv [kv_heads][S_pad / kv_block][K | V]
// with K and V [kv_block][D] bf16 each. q_tile and kv_block: the largest (16..64, q_tile first)
// whose buffers fit L1; when none fits, validate_design's error names the tile and L1.
Design encoder_attention_design(const EncoderAttentionShape& s, int columns = 8);

// The schedule both the generator and npu-sim follow: the units of one column, in order.
struct EncoderAttentionUnit {
  int64_t head = 0;
  int64_t q0 = 0;          // first query row of the round (4 x q_tile rows)
  int64_t b0 = 0, b1 = 0;  // K/V blocks [b0, b1) the round's rows can see
};
std::vector<EncoderAttentionUnit> encoder_attention_units(const EncoderAttentionShape& s, int64_t q_tile,
                                                          int64_t kv_block, int columns, int column);

}  // namespace xdna::npu

namespace xdna::npu {

// ---- Conv designs for the conv models (design_families_conv.cpp) -----------------------------
// One conv layer: input height x width x c_in (NHWC bf16), c_out outputs of a kernel x kernel
// window at `stride`; dense (groups 1) or depthwise (groups = c_in = c_out). out_height /
// out_width come from the model's padding (any split of the border: the staged input tile
// carries its zero border).
struct ConvShape {
  int64_t height = 0, width = 0, c_in = 0, c_out = 0, kernel = 1, stride = 1;
  int64_t out_height = 0, out_width = 0;
  bool depthwise = false;
};

// What one core computes per invocation: `rows` output rows x `cols` output columns x `channels`
// output channels (a multiple of 16: one accumulator lane per channel). The 32 cores take
// consecutive row blocks of one band (32 x rows output rows) at the same (column, channel)
// tile; an image is covered by bands x column tiles x channel tiles invocations of one design.
struct ConvTile {
  int64_t rows = 1, cols = 1, channels = 16;
};

// L1 bytes one core needs for a tile: stack, input window (depth 2), weights + epilogue
// constants (depth 1), output tile (depth 2) and one row of f32 accumulators.
int64_t conv_tile_l1_bytes(const ConvShape& s, const ConvTile& t);
// The tile with the most outputs per core that fits L1 (channels tried from all of c_out down,
// then columns, then rows). Throws naming the layer shape when not even 1 x 1 x 16 fits.
ConvTile choose_conv_tile(const ConvShape& s);
// Invocations of the tile's design that cover the whole output.
int64_t conv_invocations(const ConvShape& s, const ConvTile& t, int columns = 8);
// The design for one tile shape: per column, the input windows stream shim -> memtile -> 4
// cores (split), the weights and epilogue constants broadcast shim -> 4 cores (depth 1), the
// output tiles join core -> memtile -> shim. Validated: a tile that does not fit throws the
// validator's error naming the compute tile and its L1 (or the memtile and its L2).
Design conv_design(const ConvShape& s, const ConvTile& t, int columns = 8);
// Channels as the designs pad them: c_in of a dense conv to 8, output channels to 16.
int64_t conv_padded_c_in(const ConvShape& s);
int64_t conv_padded_c_out(const ConvShape& s);

}  // namespace xdna::npu

// A decoder-only LLM's decode token through the fused plan on npu-sim, executed functionally
// (sim_exec.h) and priced by the cost model (sim_backend.h: cost_report), the two reported
// separately. What the planner plans for a decoder (planner.h, plan_decoder), run.
#pragma once
#include <cstdint>
#include <vector>

#include "core/graph.h"
#include "npu/sim_backend.h"
#include "npu/sim_exec.h"

namespace xdna::npu {

// ---- One decode token through the fused plan ---------------------------------------------------
// A decoder-only LLM as the fused plan runs it: every layer one decode_layer design, the final
// RMSNorm and LM head one lm_head design, all in one dispatch; the embedding row gather (scaled
// by embed_scale: Gemma's sqrt(hidden)) and the sampling on the host. Weights f32 (the bake
// rounds them to bf16). Gemma 3: shape.post_norms for the sandwich norms; the layers with
// layer_is_local[i] set are sliding-window layers (window `sliding_window`, RoPE inv_freq_local).
struct SimDecoderModel {
  DecodeLayerShape shape;  // context is set per token, window per layer
  SimKernelArgs kernel;
  int64_t vocab = 0;
  std::vector<float> embed;  // [vocab][hidden]
  float embed_scale = 1.0f;
  std::vector<float> inv_freq;  // [head_dim / 2] RoPE frequencies (global layers)
  std::vector<float> inv_freq_local;  // local layers' (empty: none)
  std::vector<bool> layer_is_local;
  int64_t sliding_window = 0;
  bool is_local(size_t layer) const {
    return sliding_window > 0 && layer < layer_is_local.size() && layer_is_local[layer];
  }
  std::vector<SimLayerWeights> layers;
  std::vector<float> final_norm, head;  // [hidden], [vocab][hidden]
  int columns = 8;
  // The designs' weights: bf16 (decode_layer_bf16, lm_head_bf16) or i8 (decode_layer_int8,
  // lm_head_int8: every matrix quantized per row when packed, aie_kernels/fused_stage_int8.h).
  DType weights = DType::BF16;
  // shape.kv_int8 (with i8 weights): an int8 KV cache (decode_layer_int8_kv8; the state's
  // caches are made int8); shape.kv_int4 likewise an int4 one (decode_layer_int8_kv4).
};

struct SimDecoderState {
  std::vector<SimKvCache> kv;  // per layer
  int64_t position = 0;
  // Unique per constructed state (a copy continues the same sequence): a device holding this
  // sequence's cache (DeviceFusedDecoder) knows when another one arrives.
  uint64_t sequence_id = 0;
  SimDecoderState(const SimDecoderModel& m, int64_t max_len);
};

struct SimTokenResult {
  std::vector<float> logits;  // [vocab] f32
  RunReport report;           // every op of the token: where it ran (npu-sim or host)
  CostReport cost;            // the token's invocations priced by the cost model (modelled)
};

// The host arguments npu-sim keeps across a model's tokens, as the device keeps its buffers
// resident: each layer's and the head's, their weight arguments ("weights", "weights_rest":
// every matrix rounded to bf16 or quantized per row) packed at the first token and reused after;
// the rest (x, the RoPE row, the KV views, the outputs) rewritten per token (repack_decode_layer,
// repack_lm_head) in buffers reused from token to token. One per model; any sequence of it may
// use it, one token at a time.
struct SimResidentArgs {
  std::vector<HostArgs> layers;  // per layer: its weight arguments (none until its first token)
  HostArgs head;
  HostArgs spare;  // the layers' other arguments' buffers, passed from layer to layer
  // Per spare buffer: the byte ranges that can be non-zero (the KV views' cached rows: only those
  // are cleared when the next layer takes it), or nullopt (cleared whole).
  std::vector<std::optional<ByteRanges>> spare_written;
  int64_t weight_packs = 0;  // layers and heads whose weights were packed: layers + 1 once all ran
  SimStreamCounts last_token;  // how the last token's DDR objects were read (in place or gathered)
  int64_t last_token_cleared = 0;  // bytes of the layers' non-weight arguments the last token zeroed
};

// Runs token `id` at state.position, appends its K/V and advances the position. Throws
// std::invalid_argument for an id outside the vocabulary or a full cache. With `resident` (of
// this model) the weights are packed once and kept there; without, every token packs them anew.
// Either way the same arguments run: the same logits, bit for bit.
SimTokenResult fused_decode_token(const SimDecoderModel& m, int32_t id, SimDecoderState& state,
                                  SimResidentArgs* resident = nullptr);

}  // namespace xdna::npu

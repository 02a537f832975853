// `--device npu` decode through the fused plan, on the device: the same invocations npu-sim runs
// (sim_exec_decoder.h, fused_decode_token: one decode_layer per layer at context = cached + 1,
// then one lm_head), sent through DeviceRuntime. npu (needs hardware, unverified here): it has run
// only over DryRunIo, which answers the ioctls and computes nothing.
//
// The designs are the plan's at SimDecoderModel::weights: bf16, or int8 (each matrix's rows as
// int8 then their f32 scales, quantized once here).
// At construction every layer's weights are converted once into the designs' DDR layout (the
// "weights" / "weights_rest" arguments npu-sim's packer writes: pack_decode_layer, pack_lm_head)
// and uploaded into resident BOs (DeviceRuntime::allocate_resident) that stay for the decoder's
// life. The activations ping-pong between two resident BOs: layer i's `result` drains into the
// BO layer i + 1 reads as `x`, and the lm_head reads the last one; the RoPE row has one BO (two
// for Gemma 3: its sliding-window layers have their own RoPE base).
// Gemma 3: a sliding-window layer's decode_layer reads the last min(context, window) positions
// (DecodeLayerShape::window, a runtime parameter: same design and artifact as the global layers)
// and the sandwich-norm gammas travel in weights_rest (the "_pn" designs).
// The KV cache is device-resident: per layer one BO holds decode_layer's `kv` argument, the
// cache in the design's layout (DecodeLayerShape::capacity = max_len), made once. The design
// reads it in place through its fill patterns and drains the new token's K/V row into it; the
// host never writes it per token. Rows the host state holds that the BO does not (a prefill
// done on the host) are written once, before the first token that needs them.
// decode_layer passes the cache twice, at the first row it reads (`kv`) and at the new row
// (`kv_row`): its runtime sequence does not hold the position, so one instruction stream serves
// every token with the same per-core split of the context (kv_views; DeviceRuntime keeps the
// loaded sequences bounded).
// With an int8 or int4 KV cache (m.shape.kv_int8 / kv_int4: decode_layer_int8_kv8 / _kv4) each
// layer has a second resident BO, the rows' f32 scales, passed the same way as two views
// (`kv_scales` at the first row read, `kv_row_scales` at the new row: kv_scale_views).
// Per token: the host writes the embedding row and the RoPE row(s), submits the token's
// invocations as one run_sequence (one CMD_CHAIN, one EXEC_CMD, one wait), and reads back the
// logits and each layer's new K/V row (from the cache BO, to keep the host's SimDecoderState
// in step; nothing reads it on the device path).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "npu/design.h"
#include "npu/runtime/device_runtime.h"
#include "npu/sim_exec_decoder.h"

namespace xdna::npu {

// The designs of the token at `position` (the KV cache holds `position` rows), in invocation
// order: decode_layer (at m.weights: bf16 or int8; context = position + 1, window set on
// sliding-window layers) per layer, then lm_head, exactly the ones fused_decode_token builds.
// capacity: the KV cache positions the decode_layer designs' resident `kv` argument holds
// (0: position + 1).
std::vector<Design> fused_token_designs(const SimDecoderModel& m, int64_t position, int64_t capacity = 0);

// A decode_layer design's `kv` (the read window) and `kv_row` (the new row's slot) arguments as
// views of the layer's resident cache buffer (kv_window_offset, kv_row_offset). The per-token
// runtime sequence holds no position: the views' addresses, patched into the command packet,
// carry it. Throws std::out_of_range naming the design and the argument when a view runs past
// `cache`, std::invalid_argument when `cache` is not the design's cache layout.
struct KvViews {
  std::span<uint8_t> window, row;
};
KvViews kv_views(const Design& d, std::span<uint8_t> cache);
// An int8-KV design's `kv_scales` / `kv_row_scales` as views of the layer's scale buffer
// (kv_scales_window_offset, kv_scales_row_offset); the same errors, naming the argument.
KvViews kv_scale_views(const Design& d, std::span<uint8_t> scales);

// Why `rt` cannot run the fused plan of `m` (the decode_layer or lm_head design has no compiled
// artifact: "no compiled artifact for design NAME in DIR"), or "" when it can.
std::string fused_device_refusal(const DeviceRuntime& rt, const SimDecoderModel& m);

class DeviceFusedDecoder {
 public:
  // Uploads the weights of `m` (max_len: the KV capacity, the model's context length). Throws
  // std::runtime_error with fused_device_refusal()'s text when an artifact is missing.
  DeviceFusedDecoder(DeviceRuntime& rt, const SimDecoderModel& m, int64_t max_len);

  // Decodes token `id` at state.position on the device: one run_sequence of layers + 1
  // invocations. Appends the token's K/V rows to `state` and advances it; returns the logits.
  // Throws std::invalid_argument for an id outside the vocabulary or a full cache.
  std::vector<float> decode(int32_t id, SimDecoderState& state);

  // The resident weight buffers of layer i ("weights", "weights_rest") and of the head.
  std::span<const uint8_t> layer_weights(size_t i) const { return layers_.at(i).weights; }
  std::span<const uint8_t> layer_weights_rest(size_t i) const { return layers_.at(i).weights_rest; }
  std::span<const uint8_t> head_weights() const { return head_weights_; }
  int64_t tokens() const { return tokens_; }
  // Layer i's resident KV cache BO (decode_layer's `kv` argument) and, with an int8 KV cache,
  // its scale BO (`kv_scales`; empty otherwise).
  std::span<const uint8_t> layer_kv(size_t i) const { return layers_.at(i).kv; }
  std::span<const uint8_t> layer_kv_scales(size_t i) const { return layers_.at(i).kv_scales; }

 private:
  struct LayerBuffers {
    std::span<uint8_t> weights, weights_rest, kv, kv_scales;  // kv_scales: an int8 KV cache's
  };
  DeviceRuntime& rt_;
  const SimDecoderModel& m_;
  int64_t max_len_ = 0;
  std::vector<LayerBuffers> layers_;
  std::span<uint8_t> head_weights_, act_[2], rope_, rope_local_, logits_;
  int64_t tokens_ = 0;
  int64_t kv_rows_ = 0, kv_heads_alloc_ = 0;  // the resident cache's layout (design params)
  int64_t device_length_ = 0;                 // positions the cache BOs hold
  uint64_t sequence_id_ = 0;                  //   of this sequence (SimDecoderState::sequence_id)
};

}  // namespace xdna::npu

// `--device npu-sim` decode through the fused plan: each decode token of a generation runs as the
// planner plans it (npu/sim_exec_decoder.h, fused_decode_token): the embedding row gather on the
// host, one decode_layer invocation per layer, the final norm and LM head one lm_head invocation,
// all in one dispatch. The prompt (prefill) still runs op by op on npu-sim; its K/V, which the
// host KV cache holds in f32 [pos][kv_head][dim], is then rounded to bf16 and laid out as the
// fused design reads it (SimKvCache: [kv_head][pos][dim]).
//
// With `--device npu` (prepare(lm, device)) the same invocations run on the device instead
// (npu/runtime/fused_decoder.h); the prefill then ran op by op on the NpuBackend.
//
// A file's GGML block tensors (q8_0, q4_k, q6_k, q5_0 ...) are dequantized to f32 first, then
// packed like f32 weights. The plan's weight precision is prepare()'s `weights`: bf16
// (decode_layer_bf16, lm_head_bf16) or int8 (decode_layer_int8, lm_head_int8: every matrix
// quantized per row to int8 with f32 row scales when packed; the planner's default decoder plan).
// Only models whose every layer is one decode_layer design npu-sim executes take this path
// (Gemma 3's sliding-window layers and sandwich norms included: decode_layer parameters); for any
// other model (soft-capping, q/k/v biases) prepare() says why (refusal()) and generation runs op
// by op as before. Callers print placement_text(), so the choice is never silent.
//
//   auto fused = NpuSimFusedDecode::prepare(*lm);
//   req.fused_decode = fused;                 // GenerateRequest; ignored when !fused->enabled()
//   generate(*lm, req);
//   fputs(fused->placement_text().c_str(), stderr);
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/graph.h"
#include "npu/runtime/fused_decoder.h"
#include "npu/sim_exec_decoder.h"

namespace xdna {

class LanguageModel;
class Decoder;
struct DecoderState;

class NpuSimFusedDecode {
 public:
  // The fused plan's model for `lm` at its context length with `weights` DType::BF16 or DType::I8
  // (weights copied as f32; the packing rounds them to bf16 or quantizes them per row), or an
  // object whose refusal() says why npu-sim cannot run it fused. Throws std::invalid_argument
  // for another `weights`. `kv` DType::I8 (int8 weights only): an int8 KV cache
  // (decode_layer_int8_kv8: each cached K/V row int8 with an f32 scale); std::invalid_argument
  // for another kv or int8 KV with bf16 weights.
  static std::shared_ptr<NpuSimFusedDecode> prepare(const LanguageModel& lm, DType weights = DType::BF16,
                                                    DType kv = DType::BF16);
  // The same from the decoder alone (no tokenizer: `npu bench llm` decodes token ids), its plan
  // named `name`, at `context` positions.
  static std::shared_ptr<NpuSimFusedDecode> prepare(const Decoder& decoder, const std::string& name, int64_t context,
                                                    DType weights = DType::BF16, DType kv = DType::BF16);
  // `--device npu`: the same plan and refusals, run on `device` (npu/runtime/fused_decoder.h:
  // weights uploaded once here, one command chain per token). Also refused, with the reason,
  // when the device's artifacts lack the decode_layer or lm_head design; decode then runs op by
  // op on the NpuBackend. npu (needs hardware, unverified here).
  static std::shared_ptr<NpuSimFusedDecode> prepare(const LanguageModel& lm, npu::DeviceRuntime& device,
                                                    DType weights = DType::BF16, DType kv = DType::BF16);
  bool on_device() const { return device_ != nullptr; }
  // The fused plan's model (weights as f32): what npu-sim runs and the device decoder uploads.
  const npu::SimDecoderModel& model() const { return model_; }
  // The plan's weight precision (DType::BF16 or DType::I8), as asked of prepare().
  DType weights() const { return weights_; }

  bool enabled() const { return refusal_.empty(); }
  // Why decode runs op by op (empty when fused): every reason found, joined by "; ".
  const std::string& refusal() const { return refusal_; }

  // One generation's fused state: the KV cache of every layer (bf16, or int8 rows and scales),
  // in the design's layout.
  struct Sequence {
    npu::SimDecoderState state;
  };
  // Starts the fused decode after the prefill: the K/V of the host cache's `host.position`
  // positions, rounded to bf16 nearest-even (an int8 KV cache: then quantized per row as the
  // kernel quantizes a new row). Throws std::logic_error when !enabled().
  std::unique_ptr<Sequence> begin(const DecoderState& host) const;
  // Decodes token `id` at seq's position; returns its logits [vocab] and appends the token's ops
  // (npu-sim (modelled), the embedding on the host) to `report`. npu-sim packs the weights into
  // the designs' layout at the first token and keeps them (npu::SimResidentArgs), as the device
  // keeps them resident; calls are serialized.
  std::vector<float> decode(Sequence& seq, int32_t id, RunReport& report);

  // Totals over every decode() so far. Times are the cost model's (modelled), not measured.
  struct Stats {
    int64_t tokens = 0, dispatches = 0, configures = 0, xclbin_switches = 0, ddr_bytes = 0;
    double modelled_s = 0;               // cost model total
    int64_t weight_packs = 0;            // npu-sim: layers and LM heads packed (once: layers + 1)
    std::map<std::string, int> designs;  // design name -> invocations
  };
  const Stats& stats() const { return stats_; }
  // "npu-sim: decode ran fused: 1 dispatch per token (...)" and the designs run, or
  // "npu-sim: decode ran op by op, not fused: WHY".
  // Prefixed, when the file held GGML blocks: "npu-sim: weights dequantized from the file's GGML
  // blocks (q4_k, q5_0, ...) to f32, then quantized per row to int8 for the fused plan".
  std::string placement_text() const;
  nlohmann::json placement_json() const;

 private:
  NpuSimFusedDecode() = default;
  std::string dequantized_text() const;
  std::string refusal_;
  std::string dequantized_;  // the file's GGML block types the weights were dequantized from
  npu::SimDecoderModel model_;
  DType weights_ = DType::BF16;
  int64_t invocations_per_token_ = 0;  // decode_layer per layer + lm_head
  std::unique_ptr<npu::DeviceFusedDecoder> device_;  // --device npu (after model_: it reads it)
  int64_t device_weight_bytes_ = 0;                  // uploaded once into resident BOs
  bool for_device_ = false;                          // prepared for --device npu (refused or not)
  Stats stats_;
  npu::SimResidentArgs resident_;  // npu-sim: the designs' arguments, weights packed once
  std::mutex decode_mutex_;        // one decode() at a time: they share resident_ and stats_
};

}  // namespace xdna

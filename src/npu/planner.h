// The planner: places a graph's nodes as npu-sim would, without computing anything. It infers
// every value's shape from the graph's inputs and constants, asks the design cache for each
// node (the same decision NpuSimBackend::supports makes), and prices the NPU invocations with
// the cost model. Every time it reports is modelled (kModelledLabel).
#pragma once
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/graph.h"
#include "npu/design_families.h"
#include "npu/sim_backend.h"

namespace xdna::npu {

struct PlannedOp {
  std::string node;
  OpKind op;
  Shape out_shape;
  bool on_npu = false;
  std::string design;  // design name when on the NPU
  std::string reason;  // host fallback reason
  double modelled_us = 0;  // design time of this invocation (no dispatch / reconfiguration)
};

struct Plan {
  std::vector<PlannedOp> ops;
  CostReport cost;
  XclbinPolicy policy = XclbinPolicy::Single;
  int npu_ops() const;
  int host_ops() const;
  std::string text() const;  // a table, one line per op, then the modelled totals
  nlohmann::json to_json() const;
};

// Output shape and dtype of a node from its inputs' (throws naming the node when it cannot).
ValueInfo infer_output(const Node& node, std::span<const ValueInfo> inputs);

Plan plan_graph(const Graph& g, XclbinPolicy policy = XclbinPolicy::Single);

// The same for nodes already seen with their inputs' shapes (e.g. recorded while a model ran a
// pass whose graphs it does not expose: Whisper), in run order. Output shapes are inferred where
// the planner can (else left empty).
struct SeenNode {
  Node node;
  std::vector<ValueInfo> inputs;
};
Plan plan_nodes(std::span<const SeenNode> nodes, XclbinPolicy policy = XclbinPolicy::Single);

// ---- Decoder (LLM) decode plans -------------------------------------------------------------
// What the planner needs of a decoder-only model (the CLI fills it from a DecoderSpec; the npu
// layer does not depend on the model loaders).
struct DecoderPlanInput {
  std::string name;     // model name or path, for the report
  std::string family;   // "qwen3", "llama", "gemma3"
  int64_t layers = 0, vocab = 0;
  DecodeLayerShape shape;          // context is set from the options
  std::vector<bool> layer_is_local;  // sliding-window layers
  int64_t sliding_window = 0;
};

struct DecoderPlanOptions {
  DType weights = DType::I8;  // bf16, bfp16 or i8
  int64_t context = 1024;     // KV positions per token (the decode position)
  int columns = 8;
  DType kv = DType::BF16;     // the resident KV cache: bf16, or i8 / i4 (int8 weights only: decode_layer_int8_kv8 / _kv4)
};

struct DecoderLayerPlan {
  int64_t layer = 0;
  bool local = false;
  bool fused = false;                // one whole-layer design
  std::vector<std::string> designs;  // invocations, in order
  std::string note;                  // why the whole-layer design was not used
};

// What a token's DDR traffic consists of (bytes per token, summed over the invocations), from
// the designs' runtime sequences; the weight streams are split by the layout the generators
// bake (design_families_fused.cpp). The items add up to the run's DDR bytes.
struct DdrItem {
  std::string name;   // e.g. "kv values read"
  int64_t bytes = 0;
  std::string note;   // how it arises (one line)
};
// Items for the invocations in `designs` (one entry per invocation, in run order).
std::vector<DdrItem> ddr_items(std::span<const Design* const> designs);

// One decode token: every layer and the LM head in one dispatch (one instruction stream), the
// embedding row gather and sampling on the host. Counts and times are per token in the steady
// state (the configure back to the first design of the next token is counted).
struct DecoderPlan {
  DecoderPlanInput model;
  DecoderPlanOptions options;
  std::vector<DecoderLayerPlan> layers;
  std::vector<std::string> lm_head;               // LM head invocations (vocab pieces)
  std::vector<std::pair<std::string, std::string>> host_ops;  // op, why it stays on the host
  CostReport cost;                                 // per token, modelled
  int64_t weight_bytes = 0;                        // weights at the chosen precision, per token
  int64_t kv_read_bytes = 0;                       // KV cache read per token (DDR -> array)
  int64_t kv_write_bytes = 0;                      // the new K/V rows written per token (array -> DDR)
  int64_t kv_upload_bytes = 0;                     // KV rows the host writes per token (unfused layers)
  std::vector<DdrItem> ddr;                        // the token's DDR bytes itemised (ddr_items)
  // Host -> device per token: the embedding row, the RoPE row(s), kv_upload_bytes. The fused
  // layers' KV cache stays in device memory (decode_layer reads and writes it in place).
  int64_t host_upload_bytes() const;
  double tok_per_s() const { return cost.run.total_s > 0 ? 1.0 / cost.run.total_s : 0; }
  std::string text() const;
  nlohmann::json to_json() const;
};

// Throws std::invalid_argument naming what cannot be planned (shape, dtype).
DecoderPlan plan_decoder(const DecoderPlanInput& model, const DecoderPlanOptions& options = {});

}  // namespace xdna::npu

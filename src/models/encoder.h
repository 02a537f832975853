// The encoder: one implementation for every BERT-family architecture (bert, roberta,
// xlm-roberta, modernbert, esm), driven by an EncoderSpec. A forward pass lowers the model into
// the op set as an xdna::Graph and runs it with an xdna::Executor, so every run returns a
// RunReport saying where each op ran.
//
// Batching: the tokens of all sequences are packed as rows [sum T, hidden] for the embeddings,
// matmuls, norms and activations (no padding, no wasted rows), and attention runs per sequence
// on row slices of q/k/v, its outputs concatenated back into the packed rows. So the big GEMMs
// see every token of the batch at once and attention never needs a padding mask.
//
// Weights are zero-copy views of the WeightSource in whatever dtype the file holds (host::matmul
// takes f32, f16, bf16, int8/int4 with scales, bfp16, GGML blocks); only biases, which the
// matmul wants in f32, are converted at load.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph.h"
#include "core/tensor.h"
#include "models/spec.h"
#include "weights/source.h"

namespace xdna {

struct EncoderLayerWeights {
  Tensor q, k, v, qkv;  // q/k/v or fused qkv
  Tensor bq, bk, bv, bqkv;
  Tensor attn_out, attn_out_b;
  Tensor attn_norm, attn_norm_b;  // attn_norm undefined: no norm (ModernBERT layer 0)
  Tensor mlp_in, mlp_in_b, mlp_out, mlp_out_b;
  Tensor mlp_norm, mlp_norm_b;
  Tensor layer_scale_attn, layer_scale_mlp;  // f32 [hidden], or undefined (no LayerScale)
};

struct EncoderWeights {
  Tensor word, position, token_type;
  Tensor embed_norm, embed_norm_b;
  std::vector<EncoderLayerWeights> layers;
  Tensor final_norm, final_norm_b;
};

struct EncoderOutput {
  Tensor hidden;                 // [sum T, hidden] f32: last hidden state, sequences packed
  std::vector<int64_t> offsets;  // sequence b is rows [offsets[b], offsets[b + 1])
  RunReport report;
};

// The forward pass as a graph, not yet run: the planner (npu plan) prices it without computing.
struct EncoderGraph {
  Graph graph;
  ValueId output = -1;           // [sum T, hidden]
  std::vector<int64_t> offsets;  // as in EncoderOutput
};

struct GraphBuilder;

// Layer i's weights as the Encoder loads them, every name behind `prefix`. For models that embed
// their own inputs and reuse the encoder's layers (vision: models/vision.h). Throws
// std::runtime_error naming the missing or mis-shaped tensor.
EncoderLayerWeights load_encoder_layer(const EncoderSpec& spec, const WeightSource& source,
                                       const std::string& prefix, int64_t layer);
// The encoder's transformer layers (not the final norm) over embeddings x [sum T, hidden], the
// sequences packed as rows [offsets[b], offsets[b + 1]): what Encoder::lower adds after its
// token embeddings. Returns the last layer's output.
ValueId lower_encoder_layers(GraphBuilder& builder, const EncoderSpec& spec,
                             const std::vector<EncoderLayerWeights>& layers, ValueId x,
                             const std::vector<int64_t>& offsets);
// LayerNorm of x with weight w (and bias b when defined), the weights entering as constants named
// `name`.w / `name`.b.
ValueId add_layer_norm(GraphBuilder& bld, ValueId x, const Tensor& w, const Tensor& b, float eps,
                       const std::string& name);

class Encoder {
 public:
  // Resolves and shape-checks every weight the spec names. The checkpoint may prefix its names
  // ("bert.", "model.", "roberta.", "esm." ...): the prefix is found once, from the word
  // embeddings. Throws std::runtime_error naming the missing or mis-shaped tensor.
  Encoder(EncoderSpec spec, std::shared_ptr<const WeightSource> weights);

  const EncoderSpec& spec() const { return spec_; }
  const std::string& weight_prefix() const { return prefix_; }
  const EncoderWeights& weights() const { return w_; }

  // Runs the sequences (token ids; type_ids may be empty, or one vector per sequence) through
  // the encoder. `backends` in order of preference; empty = the host backend only. Each sequence
  // must be non-empty and at most spec().max_positions long (std::invalid_argument otherwise).
  EncoderOutput forward(const std::vector<std::vector<int32_t>>& ids,
                        const std::vector<std::vector<int32_t>>& type_ids = {},
                        std::vector<Backend*> backends = {}) const;
  // The same checks and graph as forward(), without running it.
  EncoderGraph lower(const std::vector<std::vector<int32_t>>& ids,
                     const std::vector<std::vector<int32_t>>& type_ids = {}) const;

 private:
  EncoderSpec spec_;
  std::shared_ptr<const WeightSource> source_;
  std::string prefix_;
  EncoderWeights w_;
};

}  // namespace xdna

// The decoder: one implementation for every decoder-only LLM family (llama, qwen3, gemma3),
// driven by a DecoderSpec. A forward step lowers the new tokens into the op set as an
// xdna::Graph and runs it with an xdna::Executor (so --device npu-sim works and every step can
// report where each op ran). Prefill runs T tokens at once (GEMM); decode runs one (GEMV).
//
// Weights are zero-copy views of the WeightSource in whatever dtype the file holds (f32, f16,
// bf16, int8/int4, bfp16, GGML Q4_K/Q6_K/Q8_0 ...): host::matmul reads them all directly.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/backend.h"
#include "core/graph.h"
#include "core/tensor.h"
#include "host/kv_cache.h"
#include "models/decoder_spec.h"
#include "weights/source.h"

namespace xdna {

struct DecodeGraph;  // decoder.cpp

// One sequence's state: its KV cache (preallocated for the context length) and its position.
struct DecoderState {
  host::KvCache cache;
  int64_t position = 0;  // tokens already in the cache
  int64_t context_length() const { return cache.max_len(); }
  // The graph of this sequence's last one-token step, which the next one runs again with the
  // new token and position bound instead of building it anew. Used only by the decoder and the
  // state (at this address, on this cache) it was built for; reset() forces a fresh build.
  std::shared_ptr<DecodeGraph> decode_graph;
};

struct DecoderStep {
  Tensor logits;  // [rows, vocab] f32: the last token's logits, or every token's (all_logits)
  RunReport report;
};

// RoPE inverse frequencies [head_dim / 2] of the global (local = false) or local layers:
// theta^(-2i/D), then llama3 or linear scaling, then GGUF's per-pair divisors (rope_freqs; may be
// undefined). The decoder and npu-sim's fused decode both use it.
Tensor rope_frequencies(const DecoderSpec& s, bool local, const Tensor& divisors);

// GGUF weights as the decoder uses them.
// The engine dtype of a GGML block tensor (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K); nullopt for other
// tensors. (A q5_0 matrix stacked with q8_0 ones is widened to q8_0 there: decoder.cpp.)
std::optional<DType> ggml_block_dtype(const TensorInfo& info);
// The tensor `info` names in `src`, in the dtype the file has it.
Tensor load_decoder_weight(const WeightSource& src, const TensorInfo& info);

class Decoder {
 public:
  // Resolves and shape-checks every weight the spec names; throws std::runtime_error naming the
  // missing or mis-shaped tensor.
  Decoder(DecoderSpec spec, std::shared_ptr<const WeightSource> weights);

  const DecoderSpec& spec() const { return spec_; }
  // The checkpoint the weights are views of (npu-sim's fused decode copies them: llm_npu_fused.h).
  const WeightSource& weights() const { return *source_; }

  // A fresh sequence state. context_length 0 = the model's maximum, capped so the KV cache fits
  // in memory_budget_bytes (0 = no cap). Throws std::invalid_argument when even 1 token cannot fit.
  DecoderState new_state(int64_t context_length = 0, uint64_t memory_budget_bytes = 0) const;
  // Bytes the KV cache takes for a context length (for budgets and reports), at kv_dtype()'s size.
  uint64_t kv_cache_bytes(int64_t context_length) const;
  // The element type of the KV caches new_state makes: f32 (the default), f16 or bf16 (half the
  // bytes; K and V are rounded to nearest even when written). Throws std::invalid_argument for
  // any other type. Set it before making states.
  void set_kv_dtype(DType t);
  DType kv_dtype() const { return kv_dtype_; }

  // Runs `ids` at positions state.position... appending their K/V to the cache, then advances
  // the position. Throws std::invalid_argument (stating both lengths) if the cache would overflow
  // or an id is out of the vocabulary. `backends` in order of preference; empty = host only.
  DecoderStep forward(const std::vector<int32_t>& ids, DecoderState& state,
                      bool all_logits = false, std::vector<Backend*> backends = {}) const;

  // One decode step of several sequences together (continuous batching): ids[i] runs at
  // states[i]->position on states[i]'s cache, which then advances by one. The projections, MLP
  // and head run as one matmul over the rows (at most 4 rows each, the host GEMV's limit, so
  // every row is bit-identical to forward({ids[i]}, *states[i])); attention runs per sequence.
  // Returns logits [n, vocab], row i for sequence i. Throws std::invalid_argument as forward()
  // does (naming the sequence), and when ids and states differ in count, a state is null or given
  // twice. On a throw no state has advanced.
  DecoderStep forward_batch(const std::vector<int32_t>& ids, const std::vector<DecoderState*>& states,
                            std::vector<Backend*> backends = {}) const;

 private:
  // What forward and forward_batch share, after their checks (decoder.cpp).
  std::shared_ptr<DecodeGraph> build_step(const std::vector<int32_t>& ids, const std::vector<int64_t>& rows,
                                          const std::vector<DecoderState*>& states, bool all_logits) const;
  DecoderStep step(const std::vector<int32_t>& ids, const std::vector<int64_t>& rows,
                   const std::vector<DecoderState*>& states, bool all_logits, std::vector<Backend*> backends) const;
  struct Impl;
  DecoderSpec spec_;
  DType kv_dtype_ = DType::F32;
  std::shared_ptr<const WeightSource> source_;
  std::shared_ptr<const Impl> impl_;  // resolved weight views
};

}  // namespace xdna

// The fused plan's model (SimDecoderModel) from a DecoderSpec and its checkpoint: plain f32
// copies of the weights, every kernel parameter from the spec. Shared by the npu-sim decoder tests
// and experiments/npu_kv_k8v4_gate.cpp.
#pragma once
#include <string>
#include <vector>

#include "models/decoder.h"
#include "models/decoder_spec.h"
#include "models/spec.h"
#include "npu/sim_exec_decoder.h"
#include "weights/source.h"

namespace xdna::npu::test_util {

inline std::vector<float> values(const WeightSource& w, const std::string& name) { return w.get(name).to_vector(); }

inline SimDecoderModel sim_model(const DecoderSpec& s, const WeightSource& w) {
  SimDecoderModel m;
  m.shape = {s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, 1, s.qk_norm, s.act != Activation::Silu};
  m.shape.post_norms = s.sandwich_norms;
  m.kernel.eps = s.norm_eps;
  m.kernel.rms_offset = s.rms_offset;
  m.kernel.attn_scale = s.attn_scale;
  m.kernel.rope_interleaved = s.rope_layout == 0;
  m.vocab = s.vocab_size;
  m.embed = values(w, s.names.token_embd);
  m.embed_scale = s.embed_scale;
  m.inv_freq = rope_frequencies(s, /*local=*/false, Tensor{}).to_vector();  // as the host computes them
  if (s.sliding_window > 0) {
    m.sliding_window = s.sliding_window;
    m.layer_is_local = s.layer_is_local;
    m.inv_freq_local = rope_frequencies(s, /*local=*/true, Tensor{}).to_vector();
  }
  const auto L = [](const std::string& p, int64_t i) { return layer_name(p, i); };
  for (int64_t i = 0; i < s.layers; ++i) {
    const DecoderWeightNames& n = s.names;
    SimLayerWeights lw;
    lw.attn_norm = values(w, L(n.attn_norm, i));
    lw.q = values(w, L(n.q, i)), lw.k = values(w, L(n.k, i)), lw.v = values(w, L(n.v, i));
    if (s.qk_norm) lw.q_norm = values(w, L(n.q_norm, i)), lw.k_norm = values(w, L(n.k_norm, i));
    lw.o = values(w, L(n.o, i));
    if (s.sandwich_norms)
      lw.post_attn_norm = values(w, L(n.post_attn_norm, i)), lw.post_ffn_norm = values(w, L(n.post_ffn_norm, i));
    lw.ffn_norm = values(w, L(n.ffn_norm, i));
    lw.gate = values(w, L(n.gate, i)), lw.up = values(w, L(n.up, i)), lw.down = values(w, L(n.down, i));
    m.layers.push_back(std::move(lw));
  }
  m.final_norm = values(w, s.names.final_norm);
  m.head = !s.tied_embeddings && w.contains(s.names.output) ? values(w, s.names.output) : m.embed;
  return m;
}

}  // namespace xdna::npu::test_util

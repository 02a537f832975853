// Whisper: encoder (two conv1d + GELU stem, sinusoidal positions, pre-LN transformer) and decoder
// (learned positions, causal self-attention with a KV cache, cross-attention over the encoder
// output whose K/V are computed once per 30-s window, tied output projection). One
// implementation for every size (tiny ... large, .en or multilingual): a WhisperSpec is data.
//
// Weights use the Hugging Face transformers names ("model.encoder.conv1.weight",
// "model.decoder.layers.0.encoder_attn.k_proj.weight", ...), whatever the file: an HF checkpoint
// directory (config.json + model.safetensors), or a baked file (written by the CTranslate2
// importer, src/weights/ctranslate2.h, or by `npu checkpoint bake`). Weights stay in the file's
// dtype (f16/bf16/f32/int8 ...): host::matmul reads them directly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/graph.h"  // RunReport
#include "core/tensor.h"
#include "host/kv_cache.h"
#include "weights/source.h"

namespace xdna {

struct WhisperSpec {
  int64_t n_mels = 80;
  int64_t n_audio_ctx = 1500;  // encoder positions (30 s / 20 ms)
  int64_t n_text_ctx = 448;    // decoder positions
  int64_t d_model = 0;
  int64_t encoder_layers = 0, encoder_heads = 0;
  int64_t decoder_layers = 0, decoder_heads = 0;
  int64_t ffn_dim = 0;  // 4 * d_model in every released size
  int64_t vocab = 0;    // 51864 (.en) or 51865+ (multilingual)
  // Decoder cross-attention heads that track the audio position of each token, as (layer, head)
  // pairs (openai-whisper's _ALIGNMENT_HEADS; config.json or generation_config.json
  // "alignment_heads"). Word timestamps need them; empty when the model's files do not say.
  std::vector<std::pair<int64_t, int64_t>> alignment_heads;
  bool multilingual() const { return vocab >= 51865; }
  int64_t head_dim() const { return d_model / encoder_heads; }

  // From transformers' WhisperConfig (config.json: d_model, encoder_layers, encoder_attention_heads,
  // decoder_*, num_mel_bins, max_source_positions, max_target_positions, vocab_size,
  // encoder_ffn_dim; optional alignment_heads). Throws std::runtime_error naming a missing or
  // invalid field.
  static WhisperSpec from_hf_config(const nlohmann::json& config);
  // Inferred from the tensor shapes of a source with HF names (for baked files that carry no
  // config); heads come from `heads` since shapes do not tell them.
  static WhisperSpec from_weights(const WeightSource& w, int64_t heads);
};

// One 30-s window's decoding state for `beams` sequences that advance together: each beam's
// self-attention cache, and the cross-attention K/V (shared by all beams, computed once).
struct WhisperDecodeState {
  std::vector<host::KvCache> self;  // one per beam: [n_text_ctx, heads, head_dim] per layer
  std::vector<Tensor> cross_k, cross_v;  // per layer, [n_audio_ctx, heads, head_dim] f32
  int64_t position = 0;                  // tokens already fed to every beam
  int64_t beams() const { return static_cast<int64_t>(self.size()); }
};

class WhisperModel {
 public:
  // Resolves and shape-checks every weight; throws std::runtime_error naming the missing or
  // mis-shaped tensor.
  WhisperModel(WhisperSpec spec, std::shared_ptr<const WeightSource> weights);
  // An HF checkpoint directory (config.json + safetensors), or a model directory in the store
  // holding model.baked (+ config.json). Throws std::runtime_error naming what is missing.
  static std::shared_ptr<WhisperModel> load(const std::string& path);

  const WhisperSpec& spec() const { return spec_; }
  const WeightSource& weights() const { return *source_; }

  // mel [n_mels, 2 * n_audio_ctx] -> audio features [n_audio_ctx, d_model] f32.
  // std::invalid_argument stating the expected shape otherwise.
  Tensor encode(const Tensor& mel, std::vector<Backend*> backends = {},
                RunReport* report = nullptr) const;

  // A fresh state over the audio features: computes every layer's cross K/V once (GEMMs, placed
  // on `backends` like encode's).
  WhisperDecodeState start(const Tensor& audio_features, int64_t beams = 1,
                           std::vector<Backend*> backends = {}, RunReport* report = nullptr) const;
  // Feeds tokens[b] to beam b (all the same length T >= 1; T > 1 is the prompt, run as a GEMM),
  // at positions state.position ...; returns logits [beams, vocab] f32 of each beam's last token.
  // Throws std::invalid_argument if the text context (n_text_ctx) would overflow or an id is out
  // of the vocabulary.
  Tensor decode(const std::vector<std::vector<int32_t>>& tokens, WhisperDecodeState& state,
                std::vector<Backend*> backends = {}, RunReport* report = nullptr) const;
  // Beam bookkeeping: beam i continues what beam source[i] held (copies its self-attention
  // cache). source.size() may differ from beams() (the state then has source.size() beams).
  void reorder(WhisperDecodeState& state, const std::vector<int64_t>& source) const;

  // One forward pass of the decoder over a whole token sequence (positions 0 ...), as
  // openai-whisper's find_alignment re-runs it for word timestamps. Returns the cross-attention
  // scores of the given (layer, head) pairs before the softmax, q.k / sqrt(head_dim):
  // [heads.size(), tokens, n_audio_ctx] f32, and (when `logits` is given) the logits of every
  // position [tokens, vocab] f32. Throws std::invalid_argument for a head outside the decoder,
  // an empty or too long sequence, or an id outside the vocabulary.
  Tensor cross_attention_scores(const Tensor& audio_features, const std::vector<int32_t>& tokens,
                                const std::vector<std::pair<int64_t, int64_t>>& heads,
                                Tensor* logits = nullptr, std::vector<Backend*> backends = {}) const;

 private:
  struct Impl;
  WhisperSpec spec_;
  std::shared_ptr<const WeightSource> source_;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace xdna

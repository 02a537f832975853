// DecoderSpec: everything the decoder needs to know about a decoder-only LLM architecture, read
// from a Hugging Face config.json or from GGUF metadata. One decoder implementation runs every
// family; the families differ only in the data below (docs/models-decoders.md says where each
// field comes from).
//
//   llama (Llama 3.x, SmolLM2): RMSNorm pre-norm, SwiGLU MLP, RoPE (optionally llama3-scaled).
//   qwen3: llama + per-head RMSNorm on q and k (QK-norm), explicit head_dim.
//   gemma3: (1 + w) RMSNorm, norms before and after attention and MLP (sandwich), GeGLU with tanh
//       GELU, embeddings scaled by sqrt(hidden), QK-norm, interleaved sliding-window (local) and
//       global layers with their own RoPE bases, query scale from query_pre_attn_scalar.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/spec.h"  // Activation

namespace xdna {

class GgufFile;

// Checkpoint tensor names ("{i}" = layer index). Empty: the family has no such tensor. For HF
// checkpoints these are the safetensors keys without any prefix; for GGUF the blk.{i}.* names.
struct DecoderWeightNames {
  std::string token_embd, output;  // output empty (or absent in the file) = tied to token_embd
  std::string attn_norm, q, k, v, o, q_norm, k_norm, post_attn_norm;
  std::string ffn_norm, gate, up, down, post_ffn_norm;
  std::string final_norm;
  std::string rope_freqs;  // GGUF llama3: per-pair frequency divisors (optional in the file)
};

struct DecoderSpec {
  std::string family;  // "llama", "qwen3", "gemma3"
  std::string source_format;  // "hf" or "gguf": GGUF llama q/k rows are permuted (see rope_layout)
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t max_positions = 0;  // the model's maximum context

  Activation act = Activation::Silu;  // gate activation of the gated MLP
  float norm_eps = 1e-6f;
  float rms_offset = 0.0f;  // gemma: x * (1 + w)
  bool qk_norm = false;
  bool sandwich_norms = false;  // gemma: post-attention and post-MLP norms as well
  bool attn_bias = false;       // q/k/v biases (Qwen2-style checkpoints)
  float embed_scale = 1.0f;     // gemma: sqrt(hidden)
  float attn_scale = 0.0f;      // 0 = 1/sqrt(head_dim); gemma: query_pre_attn_scalar^-0.5
  float final_softcap = 0.0f;   // logit soft-capping (0 = off)
  bool tied_embeddings = true;

  // Rotary embeddings.
  int rope_layout = 1;              // 0 = interleaved (GGUF llama), 1 = half-split (HF, neox)
  float rope_theta = 10000.0f;      // global layers
  float rope_theta_local = 10000.0f;  // sliding-window layers (gemma3)
  // llama3 rope scaling (factor 0 = none).
  float rope_scale_factor = 0.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int64_t rope_original_max_positions = 0;
  float rope_linear_factor = 1.0f;  // linear position scaling of the global layers (gemma3 1B+)

  // Sliding window: layer i is local when layer_is_local[i]; local layers see window keys.
  int64_t sliding_window = 0;
  std::vector<bool> layer_is_local;

  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;

  DecoderWeightNames names;

  bool is_local(int64_t layer) const {
    return sliding_window > 0 && layer < static_cast<int64_t>(layer_is_local.size()) &&
           layer_is_local[static_cast<size_t>(layer)];
  }
};

// Throw std::invalid_argument naming the missing or unsupported key and `origin`.
DecoderSpec decoder_spec_from_config(const nlohmann::json& config,
                                     const std::string& origin = "config.json");
DecoderSpec decoder_spec_from_gguf(const GgufFile& gguf);

}  // namespace xdna

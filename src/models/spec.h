// EncoderSpec: everything the encoder needs to know about a BERT-family architecture, read from a
// Hugging Face config.json. One encoder implementation runs every family; the families differ
// only in the data below (see docs/models-encoders.md for what each field is read from).
//
//   bert / roberta / xlm-roberta (E5, BGE, MiniLM are bert): learned absolute positions, token
//       types, post-norm LayerNorm, biases everywhere, GELU MLP.
//   modernbert: no positions table (rotary), pre-norm without biases, GeGLU MLP, fused Wqkv,
//       local (sliding-window) attention except every n-th layer, two rope thetas.
//   esm (ESM-2): rotary (half-split), pre-norm, final LayerNorm, token-dropout scaling.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace xdna {

enum class Activation : uint8_t { Gelu, GeluTanh, Relu, Silu };
enum class PositionKind : uint8_t { Absolute, Rotary };

// Checkpoint tensor names, without the prefix an export may add ("bert.", "model.", "esm." ...).
// "{i}" stands for the layer index. An empty name means the family has no such tensor. Bias
// names are the weight names with ".weight" replaced by ".bias".
struct EncoderWeightNames {
  std::string word_embeddings, position_embeddings, token_type_embeddings, embed_norm;
  std::string q, k, v, qkv;  // separate q/k/v, or one fused qkv ([3 * hidden, hidden])
  std::string attn_out, attn_norm;
  std::string mlp_in, mlp_out, mlp_norm;  // mlp_in is [2 * intermediate, hidden] when gated
  std::string final_norm;
  // LayerScale (DINOv2): per-channel [hidden] factors on the attention / MLP branch before the
  // residual add. Empty: no LayerScale.
  std::string layer_scale_attn, layer_scale_mlp;
};

struct EncoderSpec {
  std::string family;  // "bert", "roberta", "xlm-roberta", "modernbert", "esm"
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t max_positions = 0;  // usable tokens per sequence (roberta's 2 reserved rows removed)

  Activation act = Activation::Gelu;
  bool gated_mlp = false;  // GeGLU: act(first half of mlp_in) * second half
  float norm_eps = 1e-12f;
  bool norm_bias = true;
  bool pre_norm = false;  // norm before attention / MLP (ESM, ModernBERT) or after the residual
  bool attn_bias = true;
  bool mlp_bias = true;

  PositionKind positions = PositionKind::Absolute;
  int64_t position_offset = 0;  // roberta: position ids start at pad_token_id + 1
  float rope_theta = 10000.0f;        // global layers (and ESM)
  float rope_theta_local = 10000.0f;  // ModernBERT sliding-window layers
  int64_t local_window = 0;           // ModernBERT: keys within |i - j| <= local_window
  int64_t global_every = 1;           // layer i is global when i % global_every == 0

  int64_t type_vocab_size = 0;  // 0: no token type embeddings
  int32_t pad_token_id = 0;
  int32_t mask_token_id = -1;
  bool token_dropout = false;  // ESM: embeddings * (1 - 0.12) / (1 - masked fraction)

  EncoderWeightNames names;

  bool layer_is_global(int64_t i) const { return local_window <= 0 || i % global_every == 0; }
};

// Throws std::invalid_argument naming the missing or unsupported key (and `origin`, a path or
// "config.json", for messages).
EncoderSpec spec_from_config(const nlohmann::json& config, const std::string& origin = "config.json");

// "{i}" replaced by the layer index.
std::string layer_name(const std::string& pattern, int64_t layer);
// "x.weight" -> "x.bias".
std::string bias_name(const std::string& weight_name);

const char* activation_name(Activation a);

}  // namespace xdna

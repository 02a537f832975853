#include "models/spec.h"
#include "models/config_reader.h"

#include <stdexcept>

namespace xdna {

namespace {

using Reader = ConfigReader;

Activation parse_activation(const Reader& r, const char* key, const std::string& fallback) {
  const std::string a = r.string(key, fallback);
  if (a == "gelu") return Activation::Gelu;
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return Activation::GeluTanh;
  if (a == "relu") return Activation::Relu;
  if (a == "silu" || a == "swish") return Activation::Silu;
  r.fail(std::string("unsupported \"") + key + "\": \"" + a + "\"");
}

// The shared size fields (BERT naming, which ESM and ModernBERT also use).
void read_sizes(const Reader& r, EncoderSpec& s) {
  s.vocab_size = r.integer("vocab_size");
  s.hidden = r.integer("hidden_size");
  s.layers = r.integer("num_hidden_layers");
  s.heads = r.integer("num_attention_heads");
  s.intermediate = r.integer("intermediate_size");
  s.max_positions = r.integer("max_position_embeddings");
  if (s.vocab_size <= 0 || s.hidden <= 0 || s.layers <= 0 || s.heads <= 0 || s.intermediate <= 0 ||
      s.max_positions <= 0)
    r.fail("sizes must be positive");
  if (s.hidden % s.heads != 0)
    r.fail("hidden_size " + std::to_string(s.hidden) + " is not a multiple of num_attention_heads " +
           std::to_string(s.heads));
  s.head_dim = r.integer("head_dim", s.hidden / s.heads);
  if (s.head_dim * s.heads != s.hidden) r.fail("head_dim * num_attention_heads != hidden_size");
  s.pad_token_id = static_cast<int32_t>(r.integer("pad_token_id", 0));
}

// BERT and its RoBERTa variants: the names of transformers' BertModel.
EncoderWeightNames bert_names() {
  EncoderWeightNames n;
  n.word_embeddings = "embeddings.word_embeddings.weight";
  n.position_embeddings = "embeddings.position_embeddings.weight";
  n.token_type_embeddings = "embeddings.token_type_embeddings.weight";
  n.embed_norm = "embeddings.LayerNorm.weight";
  n.q = "encoder.layer.{i}.attention.self.query.weight";
  n.k = "encoder.layer.{i}.attention.self.key.weight";
  n.v = "encoder.layer.{i}.attention.self.value.weight";
  n.attn_out = "encoder.layer.{i}.attention.output.dense.weight";
  n.attn_norm = "encoder.layer.{i}.attention.output.LayerNorm.weight";
  n.mlp_in = "encoder.layer.{i}.intermediate.dense.weight";
  n.mlp_out = "encoder.layer.{i}.output.dense.weight";
  n.mlp_norm = "encoder.layer.{i}.output.LayerNorm.weight";
  return n;
}

void bert_like(const Reader& r, EncoderSpec& s) {
  read_sizes(r, s);
  s.act = parse_activation(r, "hidden_act", "gelu");
  s.norm_eps = static_cast<float>(r.number("layer_norm_eps", 1e-12));
  const std::string pos = r.string("position_embedding_type", "absolute");
  if (pos != "absolute")
    r.fail("position_embedding_type \"" + pos + "\" is not supported (only \"absolute\")");
  if (r.boolean("is_decoder", false) || r.boolean("add_cross_attention", false))
    r.fail("decoder / cross-attention configurations are not encoders");
  s.type_vocab_size = r.integer("type_vocab_size", 2);
  s.names = bert_names();
  if (s.type_vocab_size <= 0) s.names.token_type_embeddings.clear();
  if (s.family != "bert") {
    // RoBERTa reserves position rows 0..pad for padding: ids start at pad_token_id + 1.
    s.position_offset = s.pad_token_id + 1;
    s.max_positions -= s.position_offset;
    if (s.max_positions <= 0) r.fail("max_position_embeddings leaves no room after the padding offset");
  }
}

void modernbert(const Reader& r, EncoderSpec& s) {
  read_sizes(r, s);
  s.act = parse_activation(r, "hidden_activation", "gelu");
  s.gated_mlp = true;
  s.pre_norm = true;
  s.norm_eps = static_cast<float>(r.number("norm_eps", 1e-5));
  s.norm_bias = r.boolean("norm_bias", false);
  s.attn_bias = r.boolean("attention_bias", false);
  s.mlp_bias = r.boolean("mlp_bias", false);
  s.positions = PositionKind::Rotary;
  s.type_vocab_size = 0;
  // Rope thetas: transformers >= 5 writes rope_parameters per layer type; older configs have
  // global_rope_theta / local_rope_theta.
  s.rope_theta = static_cast<float>(r.number("global_rope_theta", 160000.0));
  s.rope_theta_local = static_cast<float>(r.number("local_rope_theta", 10000.0));
  if (r.j.contains("rope_parameters") && r.j["rope_parameters"].is_object()) {
    const auto& rp = r.j["rope_parameters"];
    for (const auto& [type, p] : rp.items()) {
      if (!p.is_object()) continue;
      const std::string kind = p.value("rope_type", std::string("default"));
      if (kind != "default") r.fail("rope_type \"" + kind + "\" is not supported (only \"default\")");
      if (p.contains("rope_theta") && p["rope_theta"].is_number()) {
        const float theta = p["rope_theta"].get<float>();
        if (type == "full_attention") s.rope_theta = theta;
        if (type == "sliding_attention") s.rope_theta_local = theta;
      }
    }
  }
  // Local attention: a token sees keys within local_attention / 2 on either side.
  const int64_t local_attention = r.integer("local_attention", 128);
  s.local_window = local_attention / 2;
  s.global_every = r.integer("global_attn_every_n_layers", 3);
  if (r.j.contains("layer_types") && r.j["layer_types"].is_array()) {
    // Newer configs list the pattern explicitly: check it is the periodic one we model.
    const auto& types = r.j["layer_types"];
    if (static_cast<int64_t>(types.size()) != s.layers) r.fail("layer_types has the wrong length");
    int64_t period = 0;
    for (int64_t i = 1; i < s.layers && !period; ++i)
      if (types[i] == "full_attention") period = i;
    if (period) s.global_every = period;
    else s.global_every = s.layers;  // only layer 0 is global
    for (int64_t i = 0; i < s.layers; ++i) {
      const bool global = types[i] == "full_attention";
      if (!global && types[i] != "sliding_attention")
        r.fail("unknown layer type " + types[i].dump());
      if (global != (i % s.global_every == 0))
        r.fail("layer_types is not a periodic full/sliding pattern");
    }
  }
  if (s.global_every <= 0) r.fail("global_attn_every_n_layers must be positive");

  EncoderWeightNames& n = s.names;
  n.word_embeddings = "embeddings.tok_embeddings.weight";
  n.embed_norm = "embeddings.norm.weight";
  n.qkv = "layers.{i}.attn.Wqkv.weight";
  n.attn_out = "layers.{i}.attn.Wo.weight";
  n.attn_norm = "layers.{i}.attn_norm.weight";  // absent in layer 0 (identity)
  n.mlp_in = "layers.{i}.mlp.Wi.weight";
  n.mlp_out = "layers.{i}.mlp.Wo.weight";
  n.mlp_norm = "layers.{i}.mlp_norm.weight";
  n.final_norm = "final_norm.weight";
}

void esm(const Reader& r, EncoderSpec& s) {
  read_sizes(r, s);
  s.act = Activation::Gelu;  // hard-coded erf GELU in transformers' EsmIntermediate
  s.pre_norm = true;
  s.norm_eps = static_cast<float>(r.number("layer_norm_eps", 1e-12));
  s.token_dropout = r.boolean("token_dropout", false);
  s.mask_token_id = static_cast<int32_t>(r.integer("mask_token_id", -1));
  if (s.token_dropout && s.mask_token_id < 0) r.fail("token_dropout needs mask_token_id");
  if (r.boolean("is_decoder", false)) r.fail("decoder configurations are not encoders");

  EncoderWeightNames& n = s.names;
  n.word_embeddings = "embeddings.word_embeddings.weight";
  const std::string pos = r.string("position_embedding_type", "absolute");
  if (pos == "rotary") {
    s.positions = PositionKind::Rotary;
    s.rope_theta = static_cast<float>(r.number("rope_theta", 10000.0));
  } else if (pos == "absolute") {  // ESM-1b: learned positions offset like RoBERTa's
    n.position_embeddings = "embeddings.position_embeddings.weight";
    s.position_offset = s.pad_token_id + 1;
    s.max_positions -= s.position_offset;
  } else {
    r.fail("position_embedding_type \"" + pos + "\" is not supported");
  }
  if (r.boolean("emb_layer_norm_before", false)) n.embed_norm = "embeddings.layer_norm.weight";
  n.q = "encoder.layer.{i}.attention.self.query.weight";
  n.k = "encoder.layer.{i}.attention.self.key.weight";
  n.v = "encoder.layer.{i}.attention.self.value.weight";
  n.attn_out = "encoder.layer.{i}.attention.output.dense.weight";
  n.attn_norm = "encoder.layer.{i}.attention.LayerNorm.weight";
  n.mlp_in = "encoder.layer.{i}.intermediate.dense.weight";
  n.mlp_out = "encoder.layer.{i}.output.dense.weight";
  n.mlp_norm = "encoder.layer.{i}.LayerNorm.weight";
  n.final_norm = "encoder.emb_layer_norm_after.weight";
}

}  // namespace

EncoderSpec spec_from_config(const nlohmann::json& config, const std::string& origin) {
  if (!config.is_object()) throw std::invalid_argument(origin + ": config is not a JSON object");
  const Reader r{config, origin};
  EncoderSpec s;
  s.family = r.string("model_type", "");
  if (s.family == "bert" || s.family == "roberta" || s.family == "xlm-roberta" ||
      s.family == "camembert")
    bert_like(r, s);
  else if (s.family == "modernbert")
    modernbert(r, s);
  else if (s.family == "esm")
    esm(r, s);
  else if (s.family.empty())
    r.fail("missing \"model_type\"");
  else
    r.fail("model_type \"" + s.family +
           "\" is not an encoder this engine runs (bert, roberta, xlm-roberta, modernbert, esm)");
  return s;
}

std::string layer_name(const std::string& pattern, int64_t layer) {
  std::string out = pattern;
  const auto at = out.find("{i}");
  if (at != std::string::npos) out.replace(at, 3, std::to_string(layer));
  return out;
}

std::string bias_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.ends_with(suffix))
    return weight_name.substr(0, weight_name.size() - suffix.size()) + ".bias";
  return weight_name + ".bias";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::Relu: return "relu";
    case Activation::Silu: return "silu";
  }
  return "?";
}

}  // namespace xdna

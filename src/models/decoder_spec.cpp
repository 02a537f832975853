#include "models/decoder_spec.h"
#include "models/config_reader.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

#include "weights/gguf.h"

namespace xdna {

namespace {

using Reader = ConfigReader;

// "eos_token_id": 1 or [1, 106].
std::vector<int32_t> id_list(const nlohmann::json& v) {
  std::vector<int32_t> out;
  if (v.is_number_integer()) out.push_back(v.get<int32_t>());
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) out.push_back(e.get<int32_t>());
  return out;
}

DecoderWeightNames hf_names(const std::string& family) {
  DecoderWeightNames n;
  n.token_embd = "model.embed_tokens.weight";
  n.output = "lm_head.weight";
  n.final_norm = "model.norm.weight";
  const std::string L = "model.layers.{i}.";
  n.attn_norm = L + "input_layernorm.weight";
  n.q = L + "self_attn.q_proj.weight";
  n.k = L + "self_attn.k_proj.weight";
  n.v = L + "self_attn.v_proj.weight";
  n.o = L + "self_attn.o_proj.weight";
  n.gate = L + "mlp.gate_proj.weight";
  n.up = L + "mlp.up_proj.weight";
  n.down = L + "mlp.down_proj.weight";
  if (family != "llama") {
    n.q_norm = L + "self_attn.q_norm.weight";
    n.k_norm = L + "self_attn.k_norm.weight";
  }
  if (family == "gemma3") {  // sandwich norms: post_attention_layernorm follows attention here
    n.post_attn_norm = L + "post_attention_layernorm.weight";
    n.ffn_norm = L + "pre_feedforward_layernorm.weight";
    n.post_ffn_norm = L + "post_feedforward_layernorm.weight";
  } else {  // llama / qwen3: post_attention_layernorm is the norm before the MLP
    n.ffn_norm = L + "post_attention_layernorm.weight";
  }
  return n;
}

DecoderWeightNames gguf_names(const std::string& family) {
  DecoderWeightNames n;
  n.token_embd = "token_embd.weight";
  n.output = "output.weight";
  n.final_norm = "output_norm.weight";
  n.rope_freqs = "rope_freqs.weight";
  n.attn_norm = "blk.{i}.attn_norm.weight";
  n.q = "blk.{i}.attn_q.weight";
  n.k = "blk.{i}.attn_k.weight";
  n.v = "blk.{i}.attn_v.weight";
  n.o = "blk.{i}.attn_output.weight";
  n.ffn_norm = "blk.{i}.ffn_norm.weight";
  n.gate = "blk.{i}.ffn_gate.weight";
  n.up = "blk.{i}.ffn_up.weight";
  n.down = "blk.{i}.ffn_down.weight";
  if (family != "llama") {
    n.q_norm = "blk.{i}.attn_q_norm.weight";
    n.k_norm = "blk.{i}.attn_k_norm.weight";
  }
  if (family == "gemma3") {
    n.post_attn_norm = "blk.{i}.post_attention_norm.weight";
    n.post_ffn_norm = "blk.{i}.post_ffw_norm.weight";
  }
  return n;
}

// What the family fixes, whatever the checkpoint says.
void family_defaults(DecoderSpec& s) {
  if (s.family == "qwen3") s.qk_norm = true;
  if (s.family == "gemma3") {
    s.qk_norm = true;
    s.sandwich_norms = true;
    s.rms_offset = 1.0f;
    s.act = Activation::GeluTanh;
    s.embed_scale = std::sqrt(static_cast<float>(s.hidden));
  }
}

void check_sizes(const DecoderSpec& s, const std::function<void(const std::string&)>& fail) {
  if (s.vocab_size <= 0 || s.hidden <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 ||
      s.head_dim <= 0 || s.intermediate <= 0 || s.max_positions <= 0)
    fail("sizes must be positive (vocab " + std::to_string(s.vocab_size) + ", hidden " +
         std::to_string(s.hidden) + ", layers " + std::to_string(s.layers) + ", heads " +
         std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + ", head_dim " +
         std::to_string(s.head_dim) + ", intermediate " + std::to_string(s.intermediate) +
         ", context " + std::to_string(s.max_positions) + ")");
  if (s.heads % s.kv_heads != 0)
    fail("attention heads " + std::to_string(s.heads) + " not a multiple of kv heads " +
         std::to_string(s.kv_heads));
  if (s.head_dim % 2) fail("head_dim " + std::to_string(s.head_dim) + " must be even for RoPE");
}

// One rope parameter set (transformers >= 5 "rope_parameters", or the older "rope_scaling" plus
// "rope_theta") into the global-layer fields of the spec.
void read_rope(const Reader& r, const nlohmann::json& p, DecoderSpec& s, bool global) {
  if (!p.is_object()) return;
  if (p.contains("rope_theta") && p["rope_theta"].is_number()) {
    (global ? s.rope_theta : s.rope_theta_local) = p["rope_theta"].get<float>();
  }
  std::string type = p.value("rope_type", std::string());
  if (type.empty()) type = p.value("type", std::string("default"));
  if (type == "default") return;
  if (!global) r.fail("rope_type \"" + type + "\" on sliding-window layers is not supported");
  const auto num = [&](const char* key, double fallback) {
    return p.contains(key) && p[key].is_number() ? p[key].get<double>() : fallback;
  };
  if (type == "linear") {
    s.rope_linear_factor = static_cast<float>(num("factor", 1.0));
  } else if (type == "llama3") {
    s.rope_scale_factor = static_cast<float>(num("factor", 8.0));
    s.rope_low_freq_factor = static_cast<float>(num("low_freq_factor", 1.0));
    s.rope_high_freq_factor = static_cast<float>(num("high_freq_factor", 4.0));
    s.rope_original_max_positions = static_cast<int64_t>(num("original_max_position_embeddings", 8192));
  } else {
    r.fail("rope_type \"" + type + "\" is not supported (default, linear, llama3)");
  }
}

}  // namespace

DecoderSpec decoder_spec_from_config(const nlohmann::json& config, const std::string& origin) {
  // Gemma 3 multimodal checkpoints nest the language model's config.
  const nlohmann::json& j =
      config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
  const Reader r{j, origin};
  if (!j.is_object()) r.fail("not a JSON object");

  std::string mt = r.string("model_type", "");
  if (mt.empty() && config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty() && config["architectures"][0].is_string()) {
    const std::string a = config["architectures"][0];
    if (a == "LlamaForCausalLM") mt = "llama";
    else if (a == "Qwen3ForCausalLM") mt = "qwen3";
    else if (a == "Gemma3ForCausalLM") mt = "gemma3_text";
  }
  DecoderSpec s;
  if (mt == "llama" || mt == "mistral") s.family = "llama";
  else if (mt == "qwen3") s.family = "qwen3";
  else if (mt == "gemma3_text" || mt == "gemma3") s.family = "gemma3";
  else r.fail("unsupported model_type \"" + mt + "\" (supported: llama, qwen3, gemma3_text)");
  s.source_format = "hf";

  s.vocab_size = r.integer("vocab_size");
  s.hidden = r.integer("hidden_size");
  s.layers = r.integer("num_hidden_layers");
  s.heads = r.integer("num_attention_heads");
  s.kv_heads = r.integer("num_key_value_heads", s.heads);
  s.head_dim = r.integer("head_dim", s.heads > 0 ? s.hidden / s.heads : 0);
  s.intermediate = r.integer("intermediate_size");
  s.max_positions = r.integer("max_position_embeddings");
  family_defaults(s);
  check_sizes(s, [&](const std::string& m) { r.fail(m); });

  const std::string act = r.string(s.family == "gemma3" ? "hidden_activation" : "hidden_act",
                                   s.family == "gemma3" ? "gelu_pytorch_tanh" : "silu");
  if (act == "silu" || act == "swish") s.act = Activation::Silu;
  else if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") s.act = Activation::GeluTanh;
  else if (act == "gelu") s.act = Activation::Gelu;
  else r.fail("unsupported activation \"" + act + "\"");

  s.norm_eps = static_cast<float>(r.number("rms_norm_eps", 1e-6));
  s.attn_bias = r.boolean("attention_bias", false);
  if (r.boolean("mlp_bias", false)) r.fail("\"mlp_bias\": true is not supported");
  // Gemma 3 multimodal configs keep tie_word_embeddings at the top level.
  const Reader top{config, origin};
  s.tied_embeddings = r.boolean("tie_word_embeddings", top.boolean("tie_word_embeddings", s.family != "llama"));
  s.final_softcap = static_cast<float>(r.number("final_logit_softcapping", 0.0));
  if (r.number("attn_logit_softcapping", 0.0) != 0.0)
    r.fail("\"attn_logit_softcapping\" is not supported (Gemma 2)");
  if (s.family == "gemma3")
    s.attn_scale = static_cast<float>(1.0 / std::sqrt(r.number("query_pre_attn_scalar", double(s.head_dim))));

  // RoPE: older configs have rope_theta (+ rope_local_base_freq) and rope_scaling; transformers
  // >= 5 writes rope_parameters, flat or per layer type.
  s.rope_theta = static_cast<float>(r.number("rope_theta", s.family == "gemma3" ? 1e6 : 10000.0));
  s.rope_theta_local = static_cast<float>(r.number("rope_local_base_freq", 10000.0));
  if (r.has("rope_scaling")) read_rope(r, j["rope_scaling"], s, true);
  if (r.has("rope_parameters")) {
    const auto& rp = j["rope_parameters"];
    if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
      if (rp.contains("full_attention")) read_rope(r, rp["full_attention"], s, true);
      if (rp.contains("sliding_attention")) read_rope(r, rp["sliding_attention"], s, false);
    } else {
      read_rope(r, rp, s, true);
    }
  }

  // Sliding window: gemma3 always; qwen3 only with use_sliding_window.
  const bool sliding = s.family == "gemma3" || r.boolean("use_sliding_window", false);
  if (sliding && r.has("sliding_window")) {
    s.sliding_window = r.integer("sliding_window");
    s.layer_is_local.assign(static_cast<size_t>(s.layers), false);
    if (r.has("layer_types")) {
      const auto& types = j["layer_types"];
      if (!types.is_array() || static_cast<int64_t>(types.size()) != s.layers)
        r.fail("\"layer_types\" must list " + std::to_string(s.layers) + " layer types");
      for (int64_t i = 0; i < s.layers; ++i) {
        if (types[i] == "sliding_attention") s.layer_is_local[i] = true;
        else if (types[i] != "full_attention") r.fail("unknown layer type " + types[i].dump());
      }
    } else {
      // Gemma 3: every pattern-th layer is global (sliding_window_pattern, 6 by default).
      int64_t pattern = r.integer("sliding_window_pattern", r.integer("_sliding_window_pattern", 6));
      if (pattern <= 0) r.fail("\"sliding_window_pattern\" must be positive");
      if (s.family != "gemma3") pattern = s.layers + 1;  // qwen3 with use_sliding_window: all local
      for (int64_t i = 0; i < s.layers; ++i) s.layer_is_local[i] = (i + 1) % pattern != 0;
    }
    if (s.sliding_window <= 0) r.fail("\"sliding_window\" must be positive");
  }

  if (config.contains("eos_token_id")) s.eos_token_ids = id_list(config["eos_token_id"]);
  if (s.eos_token_ids.empty() && j.contains("eos_token_id")) s.eos_token_ids = id_list(j["eos_token_id"]);
  const auto bos = id_list(j.contains("bos_token_id") ? j["bos_token_id"]
                                                      : config.value("bos_token_id", nlohmann::json()));
  if (!bos.empty()) s.bos_token_id = bos.front();

  s.rope_layout = 1;
  s.names = hf_names(s.family);
  if (s.tied_embeddings) s.names.output.clear();
  return s;
}

DecoderSpec decoder_spec_from_gguf(const GgufFile& g) {
  const std::string origin = g.path();
  const auto fail = [&](const std::string& m) { throw std::invalid_argument(origin + ": " + m); };
  if (!g.has("general.architecture")) fail("missing general.architecture");
  const std::string arch = g.get_string("general.architecture");
  DecoderSpec s;
  if (arch == "llama" || arch == "qwen3" || arch == "gemma3") s.family = arch;
  else fail("unsupported general.architecture \"" + arch + "\" (supported: llama, qwen3, gemma3)");
  s.source_format = "gguf";
  const std::string a = arch + ".";
  const auto need = [&](const std::string& key) {
    if (!g.has(key)) fail("missing " + key);
    return g.get_int(key);
  };
  s.hidden = need(a + "embedding_length");
  s.layers = need(a + "block_count");
  s.heads = need(a + "attention.head_count");
  s.kv_heads = g.get_int(a + "attention.head_count_kv", s.heads);
  s.head_dim = g.get_int(a + "attention.key_length", s.heads > 0 ? s.hidden / s.heads : 0);
  s.intermediate = need(a + "feed_forward_length");
  s.max_positions = need(a + "context_length");
  if (g.has(a + "vocab_size")) s.vocab_size = g.get_int(a + "vocab_size");
  else if (const TensorInfo* t = g.find("token_embd.weight")) s.vocab_size = t->shape.at(0);
  else fail("missing tensor token_embd.weight");
  family_defaults(s);
  check_sizes(s, fail);

  s.norm_eps = static_cast<float>(g.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6));
  s.rope_theta = static_cast<float>(g.get_float(a + "rope.freq_base", s.family == "gemma3" ? 1e6 : 10000.0));
  if (g.get_int(a + "rope.dimension_count", s.head_dim) != s.head_dim)
    fail(a + "rope.dimension_count differs from the head size (partial RoPE is not supported)");
  const std::string scaling = g.get_string(a + "rope.scaling.type", "none");
  if (scaling == "linear") s.rope_linear_factor = static_cast<float>(g.get_float(a + "rope.scaling.factor", 1.0));
  else if (scaling != "none") fail(a + "rope.scaling.type \"" + scaling + "\" is not supported");
  s.final_softcap = static_cast<float>(g.get_float(a + "final_logit_softcapping", 0.0));
  // llama.cpp writes "output.weight" only when the head is not tied.
  s.tied_embeddings = g.find("output.weight") == nullptr;

  if (s.family == "llama") {
    s.rope_layout = 0;  // the converter permuted q/k rows for GGML's interleaved ("normal") RoPE
  }
  if (s.family == "gemma3") {
    // The converter adds 1 to every Gemma norm weight, so the file holds (1 + w): plain RMSNorm.
    s.rms_offset = 0.0f;
    // llama.cpp fixes what the GGUF does not store: local RoPE base 10000, every 6th layer global,
    // query scale 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim for 270M / 1B / 4B / 12B).
    s.rope_theta_local = 10000.0f;
    s.attn_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    s.sliding_window = g.get_int(a + "attention.sliding_window", 0);
    const int64_t pattern = g.get_int(a + "attention.sliding_window_pattern", 6);
    if (s.sliding_window > 0) {
      s.layer_is_local.assign(static_cast<size_t>(s.layers), false);
      for (int64_t i = 0; i < s.layers; ++i) s.layer_is_local[i] = (i + 1) % pattern != 0;
    }
  }
  if (g.has("tokenizer.ggml.eos_token_id"))
    s.eos_token_ids.push_back(static_cast<int32_t>(g.get_int("tokenizer.ggml.eos_token_id")));
  if (g.has("tokenizer.ggml.eot_token_id"))
    s.eos_token_ids.push_back(static_cast<int32_t>(g.get_int("tokenizer.ggml.eot_token_id")));
  // Gemma's chat turns end with <end_of_turn> (HF configs list it as a second eos id); GGUF
  // files often carry only <eos>.
  if (s.family == "gemma3" && g.has("tokenizer.ggml.tokens")) {
    const auto at = g.find_in_string_array("tokenizer.ggml.tokens", "<end_of_turn>");
    const auto id = static_cast<int32_t>(at.value_or(0));
    if (at && std::find(s.eos_token_ids.begin(), s.eos_token_ids.end(), id) == s.eos_token_ids.end())
      s.eos_token_ids.push_back(id);
  }
  if (g.has("tokenizer.ggml.bos_token_id"))
    s.bos_token_id = static_cast<int32_t>(g.get_int("tokenizer.ggml.bos_token_id"));
  s.names = gguf_names(s.family);
  if (s.tied_embeddings) s.names.output.clear();
  return s;
}

}  // namespace xdna

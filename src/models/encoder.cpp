#include "models/encoder.h"
#include "models/graph_builder.h"

#include <cmath>
#include <stdexcept>

#include "host/host_backend.h"
#include "host/ops.h"

namespace xdna {

namespace {

// Prefixes that exports put in front of the base model's names: BertModel saves none,
// BertForMaskedLM "bert.", ModernBertForMaskedLM "model.", EsmForMaskedLM "esm.", ...
const char* const kPrefixes[] = {"", "bert.", "model.", "roberta.", "esm.", "encoder.", "0.auto_model."};

class Loader {
 public:
  Loader(const WeightSource& src, std::string prefix) : src_(src), prefix_(std::move(prefix)) {}

  bool has(const std::string& name) const { return src_.contains(resolve(name)); }

  Tensor get(const std::string& name, const Shape& expect) const {
    const std::string full = resolve(name);
    if (!src_.contains(full))
      throw std::runtime_error(src_.path() + ": missing tensor '" + full + "'");
    Tensor t = src_.get(full);
    if (t.shape() != expect)
      throw std::runtime_error(src_.path() + ": tensor '" + full + "' has shape " +
                               shape_str(t.shape()) + ", expected " + shape_str(expect));
    return t;
  }
  // The bias beside a weight, as f32 (host::matmul wants f32 biases). Absent and not required:
  // an undefined tensor.
  Tensor bias(const std::string& weight_name, int64_t n, bool required) const {
    const std::string name = bias_name(weight_name);
    if (!required && !has(name)) return {};
    return host::to_f32(get(name, {n}));
  }
  // Norm weight and (optional) bias; an absent weight means no norm when `optional`.
  void norm(const std::string& name, int64_t n, bool bias_required, bool optional, Tensor& w,
            Tensor& b) const {
    if (name.empty() || (optional && !has(name))) return;
    w = get(name, {n});
    b = bias(name, n, bias_required);
  }

 private:
  // The prefixed name; LayerNorm parameters may be stored under TensorFlow's names (gamma,
  // beta), as transformers still writes them for some models (ESM).
  std::string resolve(const std::string& name) const {
    const std::string full = prefix_ + name;
    if (src_.contains(full)) return full;
    for (const auto& [from, to] : {std::pair{".weight", ".gamma"}, std::pair{".bias", ".beta"}}) {
      const std::string f(from);
      if (name.ends_with(f) && name.find("LayerNorm") != std::string::npos) {
        const std::string alt = full.substr(0, full.size() - f.size()) + to;
        if (src_.contains(alt)) return alt;
      }
    }
    return full;
  }

  const WeightSource& src_;
  std::string prefix_;
};

// Graph-building helpers: weights enter the graph as constant inputs (add_layer_norm: encoder.h).

struct Builder : GraphBuilder {
  ValueId layer_norm(ValueId x, const Tensor& w, const Tensor& b, float eps, const std::string& name) {
    return add_layer_norm(*this, x, w, b, eps, name);
  }
};

}  // namespace

ValueId add_layer_norm(GraphBuilder& bld, ValueId x, const Tensor& w, const Tensor& b, float eps,
                       const std::string& name) {
  std::vector<ValueId> in{x, bld.constant(name + ".w", w)};
  if (b.defined()) in.push_back(bld.constant(name + ".b", b));
  OpAttrs a;
  a.eps = eps;
  return bld.g.add(OpKind::LayerNorm, in, a, name);
}

EncoderLayerWeights load_encoder_layer(const EncoderSpec& s, const WeightSource& source,
                                       const std::string& prefix, int64_t i) {
  const EncoderWeightNames& n = s.names;
  const Loader L(source, prefix);
  const int64_t H = s.hidden, I = s.intermediate;
  EncoderLayerWeights lw;
  const auto name = [&](const std::string& pattern) { return layer_name(pattern, i); };
  if (!n.qkv.empty()) {
    lw.qkv = L.get(name(n.qkv), {3 * H, H});
    lw.bqkv = L.bias(name(n.qkv), 3 * H, s.attn_bias);
  } else {
    lw.q = L.get(name(n.q), {H, H});
    lw.k = L.get(name(n.k), {H, H});
    lw.v = L.get(name(n.v), {H, H});
    lw.bq = L.bias(name(n.q), H, s.attn_bias);
    lw.bk = L.bias(name(n.k), H, s.attn_bias);
    lw.bv = L.bias(name(n.v), H, s.attn_bias);
  }
  lw.attn_out = L.get(name(n.attn_out), {H, H});
  lw.attn_out_b = L.bias(name(n.attn_out), H, s.attn_bias);
  // ModernBERT's first layer has no attention norm (the embeddings were just normed).
  const bool optional_attn_norm = s.family == "modernbert" && i == 0;
  L.norm(name(n.attn_norm), H, s.norm_bias, optional_attn_norm, lw.attn_norm, lw.attn_norm_b);
  const int64_t in_rows = s.gated_mlp ? 2 * I : I;
  lw.mlp_in = L.get(name(n.mlp_in), {in_rows, H});
  lw.mlp_in_b = L.bias(name(n.mlp_in), in_rows, s.mlp_bias);
  lw.mlp_out = L.get(name(n.mlp_out), {H, I});
  lw.mlp_out_b = L.bias(name(n.mlp_out), H, s.mlp_bias);
  L.norm(name(n.mlp_norm), H, s.norm_bias, false, lw.mlp_norm, lw.mlp_norm_b);
  if (!n.layer_scale_attn.empty())
    lw.layer_scale_attn = host::to_f32(L.get(name(n.layer_scale_attn), {H}));
  if (!n.layer_scale_mlp.empty())
    lw.layer_scale_mlp = host::to_f32(L.get(name(n.layer_scale_mlp), {H}));
  return lw;
}

Encoder::Encoder(EncoderSpec spec, std::shared_ptr<const WeightSource> weights)
    : spec_(std::move(spec)), source_(std::move(weights)) {
  if (!source_) throw std::invalid_argument("Encoder: no weights");
  const EncoderSpec& s = spec_;
  const EncoderWeightNames& n = s.names;
  bool found = false;
  for (const char* p : kPrefixes)
    if (source_->contains(p + n.word_embeddings)) {
      prefix_ = p;
      found = true;
      break;
    }
  if (!found)
    throw std::runtime_error(source_->path() + ": no '" + n.word_embeddings +
                             "' (with or without a bert./model./roberta./esm. prefix): not a " +
                             s.family + " checkpoint?");
  const Loader L(*source_, prefix_);
  const int64_t H = s.hidden;

  w_.word = L.get(n.word_embeddings, {source_->info(prefix_ + n.word_embeddings).shape.at(0), H});
  if (!n.position_embeddings.empty())
    w_.position = L.get(n.position_embeddings, {s.max_positions + s.position_offset, H});
  if (!n.token_type_embeddings.empty())
    w_.token_type = L.get(n.token_type_embeddings, {s.type_vocab_size, H});
  L.norm(n.embed_norm, H, s.norm_bias, false, w_.embed_norm, w_.embed_norm_b);

  for (int64_t i = 0; i < s.layers; ++i)
    w_.layers.push_back(load_encoder_layer(s, *source_, prefix_, i));
  L.norm(n.final_norm, H, s.norm_bias, false, w_.final_norm, w_.final_norm_b);
}

ValueId lower_encoder_layers(GraphBuilder& bld, const EncoderSpec& s,
                             const std::vector<EncoderLayerWeights>& layers, ValueId x,
                             const std::vector<int64_t>& offsets) {
  if (static_cast<int64_t>(layers.size()) != s.layers)
    throw std::invalid_argument("lower_encoder_layers: " + std::to_string(layers.size()) +
                                " layers of weights for a spec of " + std::to_string(s.layers));
  Graph& g = bld.g;
  const int64_t B = static_cast<int64_t>(offsets.size()) - 1, H = s.hidden, I = s.intermediate,
                D = s.head_dim;

  for (int64_t i = 0; i < s.layers; ++i) {
    const EncoderLayerWeights& lw = layers[i];
    const std::string L = "L" + std::to_string(i) + ".";
    const bool global = s.layer_is_global(i);

    ValueId h = x;
    if (s.pre_norm && lw.attn_norm.defined())
      h = add_layer_norm(bld, x, lw.attn_norm, lw.attn_norm_b, s.norm_eps, L + "attn_norm");
    ValueId q = -1, k = -1, v = -1, qkv = -1;
    if (lw.qkv.defined()) {
      qkv = bld.matmul(h, lw.qkv, lw.bqkv, L + "qkv");
    } else {
      q = bld.matmul(h, lw.q, lw.bq, L + "q");
      k = bld.matmul(h, lw.k, lw.bk, L + "k");
      v = bld.matmul(h, lw.v, lw.bv, L + "v");
    }
    // Attention per sequence on row slices of the packed q/k/v.
    std::vector<ValueId> heads_out;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t r0 = offsets[b], r1 = offsets[b + 1], T = r1 - r0;
      const std::string S = L + "s" + std::to_string(b) + ".";
      const auto rows = [&](ValueId src, int64_t c0, const char* what) {
        ValueId r = B > 1 ? bld.slice(src, 0, r0, r1, S + what + ".rows") : src;
        if (c0 >= 0) r = bld.slice(r, 1, c0, c0 + H, S + what + ".cols");
        return bld.reshape(r, {T, s.heads, D}, S + what + ".heads");
      };
      ValueId qs = qkv >= 0 ? rows(qkv, 0, "q") : rows(q, -1, "q");
      ValueId ks = qkv >= 0 ? rows(qkv, H, "k") : rows(k, -1, "k");
      ValueId vs = qkv >= 0 ? rows(qkv, 2 * H, "v") : rows(v, -1, "v");
      if (s.positions == PositionKind::Rotary) {
        OpAttrs a;
        a.rope_layout = RopeLayout::HalfSplit;
        a.rope_theta = global ? s.rope_theta : s.rope_theta_local;
        a.position = 0;
        qs = g.add(OpKind::Rope, {qs}, a, S + "q.rope");
        ks = g.add(OpKind::Rope, {ks}, a, S + "k.rope");
      }
      // Local layers: a band |i - j| <= local_window, so the host computes only the scores inside
      // it (not all T x T, then masked).
      OpAttrs attn;
      if (!global) attn.window = s.local_window + 1;
      ValueId o = g.add(OpKind::Attention, {qs, ks, vs}, attn, S + "attention");
      heads_out.push_back(bld.reshape(o, {T, H}, S + "merge_heads"));
    }
    ValueId a = heads_out.front();
    if (B > 1) {
      OpAttrs cat;
      cat.axis = 0;
      a = g.add(OpKind::Concat, heads_out, cat, L + "concat");
    }
    a = bld.matmul(a, lw.attn_out, lw.attn_out_b, L + "attn_out");
    if (lw.layer_scale_attn.defined())
      a = g.add(OpKind::Mul, {a, bld.constant(L + "layer_scale_attn", lw.layer_scale_attn)}, {},
                L + "attn_layer_scale");
    x = g.add(OpKind::Add, {x, a}, {}, L + "attn_residual");
    if (!s.pre_norm)
      x = add_layer_norm(bld, x, lw.attn_norm, lw.attn_norm_b, s.norm_eps, L + "attn_norm");

    h = s.pre_norm ? add_layer_norm(bld, x, lw.mlp_norm, lw.mlp_norm_b, s.norm_eps, L + "mlp_norm")
                   : x;
    ValueId u = bld.matmul(h, lw.mlp_in, lw.mlp_in_b, L + "mlp_in");
    if (s.gated_mlp) {  // GeGLU: act(first half) * second half
      ValueId in_half = bld.slice(u, 1, 0, I, L + "mlp_in.act_half");
      ValueId gate = bld.slice(u, 1, I, 2 * I, L + "mlp_in.gate_half");
      ValueId act = g.add(activation_op(s.act), {in_half}, {}, L + "mlp_act");
      u = g.add(OpKind::Mul, {act, gate}, {}, L + "mlp_gate");
    } else {
      u = g.add(activation_op(s.act), {u}, {}, L + "mlp_act");
    }
    ValueId y = bld.matmul(u, lw.mlp_out, lw.mlp_out_b, L + "mlp_out");
    if (lw.layer_scale_mlp.defined())
      y = g.add(OpKind::Mul, {y, bld.constant(L + "layer_scale_mlp", lw.layer_scale_mlp)}, {},
                L + "mlp_layer_scale");
    x = g.add(OpKind::Add, {x, y}, {}, L + "mlp_residual");
    if (!s.pre_norm)
      x = add_layer_norm(bld, x, lw.mlp_norm, lw.mlp_norm_b, s.norm_eps, L + "mlp_norm");
  }
  return x;
}

EncoderGraph Encoder::lower(const std::vector<std::vector<int32_t>>& ids,
                            const std::vector<std::vector<int32_t>>& type_ids) const {
  const EncoderSpec& s = spec_;
  const int64_t B = static_cast<int64_t>(ids.size());
  if (B == 0) throw std::invalid_argument("encoder: no sequences");
  if (!type_ids.empty() && type_ids.size() != ids.size())
    throw std::invalid_argument("encoder: type_ids must have one entry per sequence");

  EncoderGraph out;
  out.offsets.assign(1, 0);
  std::vector<int32_t> flat_ids, flat_pos, flat_types;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t T = static_cast<int64_t>(ids[b].size());
    if (T == 0) throw std::invalid_argument("encoder: sequence " + std::to_string(b) + " is empty");
    if (T > s.max_positions)
      throw std::invalid_argument("encoder: sequence " + std::to_string(b) + " has " +
                                  std::to_string(T) + " tokens, more than the model's " +
                                  std::to_string(s.max_positions) + " positions (truncate it)");
    if (!type_ids.empty() && type_ids[b].size() != ids[b].size())
      throw std::invalid_argument("encoder: type_ids of sequence " + std::to_string(b) +
                                  " do not match its length");
    flat_ids.insert(flat_ids.end(), ids[b].begin(), ids[b].end());
    for (int64_t t = 0; t < T; ++t) {
      flat_pos.push_back(static_cast<int32_t>(t + s.position_offset));
      const int32_t type = type_ids.empty() ? 0 : type_ids[b][t];
      if (w_.token_type.defined() && (type < 0 || type >= s.type_vocab_size))
        throw std::invalid_argument("encoder: token type id " + std::to_string(type) +
                                    " outside [0, " + std::to_string(s.type_vocab_size) + ")");
      flat_types.push_back(type);
    }
    out.offsets.push_back(out.offsets.back() + T);
  }
  const int64_t N = out.offsets.back(), H = s.hidden;

  Builder bld;
  Graph& g = bld.g;
  // Embeddings.
  ValueId x = g.add(OpKind::Embedding, {bld.constant("word_embeddings", w_.word),
                                        g.input("input_ids", i32_tensor(flat_ids))},
                    {}, "embed.word");
  if (s.token_dropout) {
    // ESM: mask tokens are zeroed and the rest scaled by (1 - 0.15 * 0.8) / (1 - masked fraction).
    bool any_mask = false;
    for (int32_t id : flat_ids) any_mask |= id == s.mask_token_id;
    const float train_keep = 1.0f - 0.15f * 0.8f;
    if (!any_mask) {
      OpAttrs a;
      a.scale = train_keep;
      x = g.add(OpKind::Scale, {x}, a, "embed.token_dropout");
    } else {
      Tensor m = Tensor::empty({N, H});
      for (int64_t b = 0; b < B; ++b) {
        const int64_t T = out.offsets[b + 1] - out.offsets[b];
        int64_t masked = 0;
        for (int32_t id : ids[b]) masked += id == s.mask_token_id;
        const float f = train_keep / (1.0f - static_cast<float>(masked) / static_cast<float>(T));
        for (int64_t t = 0; t < T; ++t) {
          const float v = ids[b][t] == s.mask_token_id ? 0.0f : f;
          float* row = m.data<float>() + (out.offsets[b] + t) * H;
          std::fill(row, row + H, v);
        }
      }
      x = g.add(OpKind::Mul, {x, g.input("token_dropout_scale", m)}, {}, "embed.token_dropout");
    }
  }
  if (w_.position.defined()) {
    ValueId p = g.add(OpKind::Embedding, {bld.constant("position_embeddings", w_.position),
                                          g.input("position_ids", i32_tensor(flat_pos))},
                      {}, "embed.position");
    x = g.add(OpKind::Add, {x, p}, {}, "embed.add_position");
  }
  if (w_.token_type.defined()) {
    ValueId t = g.add(OpKind::Embedding, {bld.constant("token_type_embeddings", w_.token_type),
                                          g.input("token_type_ids", i32_tensor(flat_types))},
                      {}, "embed.token_type");
    x = g.add(OpKind::Add, {x, t}, {}, "embed.add_token_type");
  }
  if (w_.embed_norm.defined())
    x = bld.layer_norm(x, w_.embed_norm, w_.embed_norm_b, s.norm_eps, "embed.norm");

  x = lower_encoder_layers(bld, s, w_.layers, x, out.offsets);
  if (w_.final_norm.defined())
    x = bld.layer_norm(x, w_.final_norm, w_.final_norm_b, s.norm_eps, "final_norm");

  out.output = x;
  bld.g.mark_output(x);  // everything else is freed as soon as its last reader has run
  out.graph = std::move(bld.g);
  return out;
}

EncoderOutput Encoder::forward(const std::vector<std::vector<int32_t>>& ids,
                               const std::vector<std::vector<int32_t>>& type_ids,
                               std::vector<Backend*> backends) const {
  EncoderGraph eg = lower(ids, type_ids);
  EncoderOutput out;
  out.offsets = std::move(eg.offsets);
  HostBackend host;
  if (backends.empty()) backends.push_back(&host);
  Executor exec(backends);
  out.report = exec.run(eg.graph);
  out.hidden = host::to_f32(eg.graph.get(eg.output));
  if (out.hidden.shape() != Shape{out.offsets.back(), spec_.hidden})
    throw std::logic_error("encoder: output has shape " + shape_str(out.hidden.shape()));
  return out;
}

}  // namespace xdna

// Whisper encoder and decoder, lowered into the op set (see whisper.h and docs/models-whisper.md).
#include "models/whisper.h"
#include "models/config_reader.h"
#include "models/graph_builder.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "host/host_backend.h"
#include "host/ops.h"

namespace xdna {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

// transformers' WhisperForConditionalGeneration saves "model.encoder...", WhisperModel "encoder...".
const char* const kPrefixes[] = {"model.", ""};

std::string find_prefix(const WeightSource& w) {
  for (const char* p : kPrefixes)
    if (w.contains(std::string(p) + "encoder.conv1.weight")) return p;
  throw std::runtime_error(w.path() + ": missing tensor 'model.encoder.conv1.weight': not a Whisper checkpoint?");
}

class Loader {
 public:
  Loader(const WeightSource& src, std::string prefix) : src_(src), prefix_(std::move(prefix)) {}
  bool has(const std::string& name) const { return src_.contains(prefix_ + name); }
  Tensor get(const std::string& name, const Shape& expect) const {
    const std::string full = prefix_ + name;
    if (!src_.contains(full)) throw std::runtime_error(src_.path() + ": missing tensor '" + full + "'");
    Tensor t = src_.get(full);
    if (t.shape() != expect)
      throw std::runtime_error(src_.path() + ": tensor '" + full + "' has shape " + shape_str(t.shape()) +
                               ", expected " + shape_str(expect));
    return t;
  }
  // Norm weights, biases and position tables: small, used as f32 every step, converted once.
  Tensor f32(const std::string& name, const Shape& expect) const { return host::to_f32(get(name, expect)); }

 private:
  const WeightSource& src_;
  std::string prefix_;
};

struct Linear {
  Tensor w, b;  // b undefined: no bias (k_proj)
};

struct Norm {
  Tensor w, b;
};

struct AttentionWeights {
  Linear q, k, v, o;
  Norm norm;
};

struct EncoderLayer {
  AttentionWeights attn;
  Norm ffn_norm;
  Linear fc1, fc2;
};

struct DecoderLayer {
  AttentionWeights self, cross;
  Norm ffn_norm;
  Linear fc1, fc2;
};

Linear linear(const Loader& L, const std::string& name, int64_t out, int64_t in, bool bias = true) {
  Linear l;
  l.w = L.get(name + ".weight", {out, in});
  if (bias) l.b = L.f32(name + ".bias", {out});
  return l;
}

Norm norm(const Loader& L, const std::string& name, int64_t d) {
  return {L.f32(name + ".weight", {d}), L.f32(name + ".bias", {d})};
}

AttentionWeights attention(const Loader& L, const std::string& name, const std::string& norm_name, int64_t d) {
  AttentionWeights a;
  a.q = linear(L, name + ".q_proj", d, d);
  a.k = linear(L, name + ".k_proj", d, d, false);  // Whisper's k_proj has no bias
  a.v = linear(L, name + ".v_proj", d, d);
  a.o = linear(L, name + ".out_proj", d, d);
  a.norm = norm(L, norm_name, d);
  return a;
}

struct Builder : GraphBuilder {
  ValueId linear(ValueId x, const Linear& l, const std::string& name) { return matmul(x, l.w, l.b, name); }
  ValueId layer_norm(ValueId x, const Norm& n, const std::string& name) {
    OpAttrs a;
    a.eps = 1e-5f;
    return g.add(OpKind::LayerNorm, {x, constant(name + ".w", n.w), constant(name + ".b", n.b)}, a, name);
  }
  ValueId conv1d(ValueId x, const Linear& l, int64_t stride, const std::string& name) {
    OpAttrs a;
    a.kernel[0] = l.w.dim(2);
    a.stride[0] = stride;
    a.padding[0] = 1;
    return g.add(OpKind::Conv1d, {x, constant(name + ".w", l.w), constant(name + ".b", l.b)}, a, name);
  }
  ValueId residual_mlp(ValueId x, const Norm& n, const Linear& fc1, const Linear& fc2, const std::string& L) {
    ValueId h = layer_norm(x, n, L + "final_layer_norm");
    h = linear(h, fc1, L + "fc1");
    h = g.add(OpKind::Gelu, {h}, {}, L + "gelu");
    h = linear(h, fc2, L + "fc2");
    return g.add(OpKind::Add, {x, h}, {}, L + "ffn_residual");
  }
};

RunReport run_graph(Graph& g, std::vector<Backend*> backends) {
  HostBackend host;
  if (backends.empty()) backends.push_back(&host);
  Executor exec(backends);
  return exec.run(g);
}

// "alignment_heads": [[layer, head], ...] within the decoder; throws naming what is wrong.
std::vector<std::pair<int64_t, int64_t>> read_alignment_heads(const nlohmann::json& v, const WhisperSpec& s,
                                                              const std::string& origin) {
  const std::string what = origin + ": \"alignment_heads\" ";
  if (!v.is_array()) throw std::runtime_error(what + "must be a list of [layer, head] pairs");
  std::vector<std::pair<int64_t, int64_t>> heads;
  for (const auto& pair : v) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer())
      throw std::runtime_error(what + "must be a list of [layer, head] pairs, found " + pair.dump());
    const int64_t layer = pair[0].get<int64_t>(), head = pair[1].get<int64_t>();
    if (layer < 0 || layer >= s.decoder_layers || head < 0 || head >= s.decoder_heads)
      throw std::runtime_error(what + "names " + pair.dump() + ", outside the decoder's " + num(s.decoder_layers) +
                               " layers x " + num(s.decoder_heads) + " heads");
    heads.emplace_back(layer, head);
  }
  return heads;
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
}

}  // namespace

WhisperSpec WhisperSpec::from_hf_config(const nlohmann::json& config) {
  const std::string origin = "whisper config";
  const ConfigReader r{config, origin};
  WhisperSpec s;
  try {
    s.d_model = r.integer("d_model");
    s.encoder_layers = r.integer("encoder_layers");
    s.encoder_heads = r.integer("encoder_attention_heads");
    s.decoder_layers = r.integer("decoder_layers");
    s.decoder_heads = r.integer("decoder_attention_heads");
    s.n_mels = r.integer("num_mel_bins", 80);
    s.n_audio_ctx = r.integer("max_source_positions", 1500);
    s.n_text_ctx = r.integer("max_target_positions", 448);
    s.vocab = r.integer("vocab_size");
    s.ffn_dim = r.integer("encoder_ffn_dim", 4 * s.d_model);
    if (r.integer("decoder_ffn_dim", s.ffn_dim) != s.ffn_dim)
      r.fail("decoder_ffn_dim differs from encoder_ffn_dim (not a Whisper layout)");
    for (const char* key : {"activation_function"})
      if (r.string(key, "gelu") != "gelu") r.fail(std::string("\"") + key + "\" must be \"gelu\"");
    if (r.boolean("scale_embedding", false)) r.fail("\"scale_embedding\": true is not supported");
    if (s.d_model <= 0 || s.encoder_layers <= 0 || s.decoder_layers <= 0 || s.encoder_heads <= 0 ||
        s.decoder_heads <= 0 || s.n_mels <= 0 || s.n_audio_ctx <= 0 || s.n_text_ctx <= 0 || s.vocab <= 0 ||
        s.ffn_dim <= 0)
      r.fail("sizes must be positive");
    if (s.d_model % s.encoder_heads != 0 || s.d_model % s.decoder_heads != 0)
      r.fail("d_model " + num(s.d_model) + " is not a multiple of the attention heads");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  if (config.is_object() && config.contains("alignment_heads"))
    s.alignment_heads = read_alignment_heads(config["alignment_heads"], s, origin);
  return s;
}

WhisperSpec WhisperSpec::from_weights(const WeightSource& w, int64_t heads) {
  const std::string p = find_prefix(w);
  const auto shape = [&](const std::string& name) -> const Shape& {
    const TensorInfo* info = w.find(p + name);
    if (!info) throw std::runtime_error(w.path() + ": missing tensor '" + p + name + "'");
    if (info->shape.size() < 2)
      throw std::runtime_error(w.path() + ": tensor '" + p + name + "' is not a matrix");
    return info->shape;
  };
  const auto count_layers = [&](const std::string& part) {
    int64_t n = 0;
    while (w.contains(p + part + ".layers." + num(n) + ".fc1.weight")) ++n;
    if (n == 0) throw std::runtime_error(w.path() + ": no '" + p + part + ".layers.0.fc1.weight'");
    return n;
  };
  WhisperSpec s;
  const Shape& conv1 = shape("encoder.conv1.weight");  // [d, n_mels, 3]
  s.d_model = conv1[0];
  s.n_mels = conv1[1];
  s.n_audio_ctx = shape("encoder.embed_positions.weight")[0];
  s.n_text_ctx = shape("decoder.embed_positions.weight")[0];
  s.vocab = shape("decoder.embed_tokens.weight")[0];
  s.ffn_dim = shape("encoder.layers.0.fc1.weight")[0];
  s.encoder_layers = count_layers("encoder");
  s.decoder_layers = count_layers("decoder");
  if (heads <= 0 || s.d_model % heads != 0)
    throw std::runtime_error(w.path() + ": " + num(heads) + " heads do not divide d_model " + num(s.d_model));
  s.encoder_heads = s.decoder_heads = heads;
  return s;
}

struct WhisperModel::Impl {
  Linear conv1, conv2;
  Tensor encoder_positions;  // [n_audio_ctx, d] f32
  std::vector<EncoderLayer> encoder;
  Norm encoder_norm;
  Tensor embed_tokens, decoder_positions, output;  // output: proj_out or the tied embed_tokens
  std::vector<DecoderLayer> decoder;
  Norm decoder_norm;
};

WhisperModel::WhisperModel(WhisperSpec spec, std::shared_ptr<const WeightSource> weights)
    : spec_(std::move(spec)), source_(std::move(weights)) {
  if (!source_) throw std::invalid_argument("WhisperModel: no weights");
  const WhisperSpec& s = spec_;
  if (s.d_model <= 0 || s.encoder_heads <= 0 || s.decoder_heads <= 0 || s.d_model % s.encoder_heads != 0 ||
      s.d_model % s.decoder_heads != 0)
    throw std::runtime_error("WhisperModel: invalid spec (d_model " + num(s.d_model) + ", heads " +
                             num(s.encoder_heads) + "/" + num(s.decoder_heads) + ")");
  const Loader L(*source_, find_prefix(*source_));
  const int64_t d = s.d_model, F = s.ffn_dim;
  auto impl = std::make_shared<Impl>();
  impl->conv1.w = L.get("encoder.conv1.weight", {d, s.n_mels, 3});
  impl->conv1.b = L.f32("encoder.conv1.bias", {d});
  impl->conv2.w = L.get("encoder.conv2.weight", {d, d, 3});
  impl->conv2.b = L.f32("encoder.conv2.bias", {d});
  impl->encoder_positions = L.f32("encoder.embed_positions.weight", {s.n_audio_ctx, d});
  for (int64_t i = 0; i < s.encoder_layers; ++i) {
    const std::string P = "encoder.layers." + num(i) + ".";
    EncoderLayer l;
    l.attn = attention(L, P + "self_attn", P + "self_attn_layer_norm", d);
    l.ffn_norm = norm(L, P + "final_layer_norm", d);
    l.fc1 = linear(L, P + "fc1", F, d);
    l.fc2 = linear(L, P + "fc2", d, F);
    impl->encoder.push_back(std::move(l));
  }
  impl->encoder_norm = norm(L, "encoder.layer_norm", d);

  impl->embed_tokens = L.get("decoder.embed_tokens.weight", {s.vocab, d});
  impl->decoder_positions = L.get("decoder.embed_positions.weight", {s.n_text_ctx, d});
  for (int64_t i = 0; i < s.decoder_layers; ++i) {
    const std::string P = "decoder.layers." + num(i) + ".";
    DecoderLayer l;
    l.self = attention(L, P + "self_attn", P + "self_attn_layer_norm", d);
    l.cross = attention(L, P + "encoder_attn", P + "encoder_attn_layer_norm", d);
    l.ffn_norm = norm(L, P + "final_layer_norm", d);
    l.fc1 = linear(L, P + "fc1", F, d);
    l.fc2 = linear(L, P + "fc2", d, F);
    impl->decoder.push_back(std::move(l));
  }
  impl->decoder_norm = norm(L, "decoder.layer_norm", d);
  // proj_out sits outside the "model." prefix; transformers ties it to embed_tokens.
  impl->output = source_->contains("proj_out.weight") ? Loader(*source_, "").get("proj_out.weight", {s.vocab, d})
                                                      : impl->embed_tokens;
  impl_ = std::move(impl);
}

std::shared_ptr<WhisperModel> WhisperModel::load(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) throw std::runtime_error(path + ": not a directory (want a Whisper model directory)");
  const std::string config_path = path + "/config.json";
  const bool has_config = fs::exists(config_path);
  std::shared_ptr<const WeightSource> weights;
  if (fs::exists(path + "/model.baked")) {
    weights = open_weights(path + "/model.baked");
  } else if (fs::exists(path + "/model.safetensors") || fs::exists(path + "/model.safetensors.index.json")) {
    weights = open_weights(path);
  } else {
    throw std::runtime_error(path + ": no model.baked or model.safetensors");
  }
  // Without a config, the shapes give everything but the heads, which are d_model / 64 in every
  // released Whisper size (tiny 6, base 8, small 12, medium 16, large 20).
  WhisperSpec spec = has_config ? WhisperSpec::from_hf_config(read_json_file(config_path))
                                : WhisperSpec::from_weights(*weights, WhisperSpec::from_weights(*weights, 1).d_model / 64);
  // Hugging Face checkpoints keep the alignment heads in generation_config.json.
  const std::string generation_path = path + "/generation_config.json";
  if (spec.alignment_heads.empty() && fs::exists(generation_path)) {
    const nlohmann::json gen = read_json_file(generation_path);
    if (gen.is_object() && gen.contains("alignment_heads"))
      spec.alignment_heads = read_alignment_heads(gen["alignment_heads"], spec, generation_path);
  }
  return std::make_shared<WhisperModel>(spec, std::move(weights));
}

Tensor WhisperModel::encode(const Tensor& mel, std::vector<Backend*> backends, RunReport* report) const {
  const WhisperSpec& s = spec_;
  const Impl& w = *impl_;
  const Shape want{s.n_mels, 2 * s.n_audio_ctx};
  if (!mel.defined() || mel.shape() != want)
    throw std::invalid_argument("whisper encode: mel has shape " + (mel.defined() ? shape_str(mel.shape()) : "(none)") +
                                ", expected " + shape_str(want) + " (n_mels, 2 * n_audio_ctx frames)");
  const int64_t T = s.n_audio_ctx, d = s.d_model, H = s.encoder_heads, D = d / H;

  Builder b;
  Graph& g = b.g;
  ValueId x = g.input("mel", host::to_f32(mel));
  x = g.add(OpKind::Gelu, {b.conv1d(x, w.conv1, 1, "conv1")}, {}, "conv1.gelu");
  x = g.add(OpKind::Gelu, {b.conv1d(x, w.conv2, 2, "conv2")}, {}, "conv2.gelu");  // [d, T]
  OpAttrs tr;
  tr.dim0 = 0;
  tr.dim1 = 1;
  x = g.add(OpKind::Transpose, {x}, tr, "to_rows");  // [T, d]
  x = g.add(OpKind::Add, {x, b.constant("embed_positions", w.encoder_positions)}, {}, "add_positions");

  for (int64_t i = 0; i < s.encoder_layers; ++i) {
    const EncoderLayer& lw = w.encoder[i];
    const std::string L = "enc" + num(i) + ".";
    const ValueId h = b.layer_norm(x, lw.attn.norm, L + "self_attn_layer_norm");
    const ValueId q = b.reshape(b.linear(h, lw.attn.q, L + "q"), {T, H, D}, L + "q.heads");
    const ValueId k = b.reshape(b.linear(h, lw.attn.k, L + "k"), {T, H, D}, L + "k.heads");
    const ValueId v = b.reshape(b.linear(h, lw.attn.v, L + "v"), {T, H, D}, L + "v.heads");
    ValueId o = g.add(OpKind::Attention, {q, k, v}, {}, L + "attention");
    o = b.linear(b.reshape(o, {T, d}, L + "merge_heads"), lw.attn.o, L + "out_proj");
    x = g.add(OpKind::Add, {x, o}, {}, L + "attn_residual");
    x = b.residual_mlp(x, lw.ffn_norm, lw.fc1, lw.fc2, L);
  }
  x = b.layer_norm(x, w.encoder_norm, "layer_norm");
  g.mark_output(x);
  RunReport r = run_graph(g, std::move(backends));
  if (report) *report = std::move(r);
  return host::to_f32(g.get(x));
}

WhisperDecodeState WhisperModel::start(const Tensor& audio_features, int64_t beams,
                                       std::vector<Backend*> backends, RunReport* report) const {
  const WhisperSpec& s = spec_;
  const Impl& w = *impl_;
  const int64_t S = s.n_audio_ctx, d = s.d_model, H = s.decoder_heads, D = d / H;
  if (beams < 1) throw std::invalid_argument("whisper start: beams must be >= 1, got " + num(beams));
  if (!audio_features.defined() || audio_features.shape() != Shape{S, d})
    throw std::invalid_argument("whisper start: audio features have shape " +
                                (audio_features.defined() ? shape_str(audio_features.shape()) : "(none)") +
                                ", expected " + shape_str({S, d}));
  // Cross-attention K/V of every layer, once per window (a GEMM each).
  Builder b;
  Graph& g = b.g;
  const ValueId x = g.input("audio_features", host::to_f32(audio_features));
  std::vector<ValueId> ks, vs;
  for (int64_t i = 0; i < s.decoder_layers; ++i) {
    const std::string L = "dec" + num(i) + ".encoder_attn.";
    ks.push_back(b.reshape(b.linear(x, w.decoder[i].cross.k, L + "k"), {S, H, D}, L + "k.heads"));
    vs.push_back(b.reshape(b.linear(x, w.decoder[i].cross.v, L + "v"), {S, H, D}, L + "v.heads"));
    g.mark_output(ks.back());
    g.mark_output(vs.back());
  }
  RunReport r = run_graph(g, std::move(backends));
  if (report) *report = std::move(r);
  WhisperDecodeState st;
  for (int64_t i = 0; i < s.decoder_layers; ++i) {
    st.cross_k.push_back(host::to_f32(g.get(ks[i])));
    st.cross_v.push_back(host::to_f32(g.get(vs[i])));
  }
  for (int64_t bm = 0; bm < beams; ++bm) st.self.emplace_back(s.decoder_layers, s.n_text_ctx, H, D);
  return st;
}

Tensor WhisperModel::decode(const std::vector<std::vector<int32_t>>& tokens, WhisperDecodeState& state,
                            std::vector<Backend*> backends, RunReport* report) const {
  const WhisperSpec& s = spec_;
  const Impl& w = *impl_;
  const int64_t B = state.beams(), pos = state.position, d = s.d_model, H = s.decoder_heads, D = d / H;
  if (B == 0) throw std::invalid_argument("whisper decode: the state has no beams (use start())");
  if (static_cast<int64_t>(tokens.size()) != B)
    throw std::invalid_argument("whisper decode: " + num(static_cast<int64_t>(tokens.size())) +
                                " token lists for " + num(B) + " beams");
  const int64_t T = static_cast<int64_t>(tokens[0].size());
  if (T == 0) throw std::invalid_argument("whisper decode: no tokens to run");
  std::vector<int32_t> ids, positions;
  for (int64_t bm = 0; bm < B; ++bm) {
    if (static_cast<int64_t>(tokens[bm].size()) != T)
      throw std::invalid_argument("whisper decode: beam " + num(bm) + " has " +
                                  num(static_cast<int64_t>(tokens[bm].size())) + " tokens, beam 0 has " + num(T) +
                                  " (beams advance together)");
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = tokens[bm][t];
      if (id < 0 || id >= s.vocab)
        throw std::invalid_argument("whisper decode: token id " + num(id) + " outside the vocabulary [0, " +
                                    num(s.vocab) + ")");
      ids.push_back(id);
      positions.push_back(static_cast<int32_t>(pos + t));
    }
  }
  if (pos + T > s.n_text_ctx)
    throw std::invalid_argument("whisper decode: " + num(pos) + " decoded + " + num(T) + " new tokens = " +
                                num(pos + T) + " exceeds the text context of " + num(s.n_text_ctx));
  if (static_cast<int64_t>(state.cross_k.size()) != s.decoder_layers ||
      static_cast<int64_t>(state.cross_v.size()) != s.decoder_layers)
    throw std::invalid_argument("whisper decode: the state's cross-attention K/V were not made for this model");
  for (const auto& c : state.self)
    if (c.layers() != s.decoder_layers || c.max_len() != s.n_text_ctx || c.length(0) != pos)
      throw std::invalid_argument("whisper decode: a beam's cache does not match the model or the state position " +
                                  num(pos));

  const int64_t N = B * T;  // rows: beams packed, T tokens each
  Builder b;
  Graph& g = b.g;
  ValueId x = g.add(OpKind::Embedding, {b.constant("embed_tokens", w.embed_tokens), g.input("ids", i32_tensor(ids))},
                    {}, "embed_tokens");
  const ValueId p = g.add(OpKind::Embedding, {b.constant("embed_positions", w.decoder_positions),
                                              g.input("positions", i32_tensor(positions))},
                          {}, "embed_positions");
  x = g.add(OpKind::Add, {x, p}, {}, "add_positions");
  OpAttrs rows_cat;
  rows_cat.axis = 0;

  for (int64_t i = 0; i < s.decoder_layers; ++i) {
    const DecoderLayer& lw = w.decoder[i];
    const std::string L = "dec" + num(i) + ".";
    // Self-attention: projections batched over beams (rows = beams x T), attention per beam on
    // its own cache.
    ValueId h = b.layer_norm(x, lw.self.norm, L + "self_attn_layer_norm");
    const ValueId q = b.linear(h, lw.self.q, L + "q");
    const ValueId k = b.linear(h, lw.self.k, L + "k");
    const ValueId v = b.linear(h, lw.self.v, L + "v");
    std::vector<ValueId> outs;
    for (int64_t bm = 0; bm < B; ++bm) {
      const std::string S = L + "b" + num(bm) + ".";
      const auto beam_rows = [&](ValueId src, const char* what) {
        const ValueId r = B > 1 ? b.slice(src, 0, bm * T, (bm + 1) * T, S + what + ".rows") : src;
        return b.reshape(r, {T, H, D}, S + what + ".heads");
      };
      OpAttrs kw;
      kw.start = pos;
      host::KvCache& cache = state.self[bm];
      const ValueId keys = g.add(OpKind::KvWrite, {b.constant(S + "cache.k", cache.key_storage(i)), beam_rows(k, "k")},
                                 kw, S + "cache.k.write");
      const ValueId values = g.add(
          OpKind::KvWrite, {b.constant(S + "cache.v", cache.value_storage(i)), beam_rows(v, "v")}, kw, S + "cache.v.write");
      OpAttrs at;
      at.causal = true;
      at.q_offset = pos;
      const ValueId o = g.add(OpKind::Attention, {beam_rows(q, "q"), keys, values}, at, S + "self_attention");
      outs.push_back(b.reshape(o, {T, d}, S + "merge_heads"));
    }
    ValueId o = B > 1 ? g.add(OpKind::Concat, outs, rows_cat, L + "beams") : outs[0];
    o = b.linear(o, lw.self.o, L + "out_proj");
    x = g.add(OpKind::Add, {x, o}, {}, L + "self_attn_residual");

    // Cross-attention: every beam reads the same audio K/V, and nothing is causal, so all N rows
    // are one query block.
    h = b.layer_norm(x, lw.cross.norm, L + "encoder_attn_layer_norm");
    const ValueId cq = b.reshape(b.linear(h, lw.cross.q, L + "encoder_attn.q"), {N, H, D}, L + "encoder_attn.q.heads");
    ValueId c = g.add(OpKind::Attention,
                      {cq, b.constant(L + "cross.k", state.cross_k[i]), b.constant(L + "cross.v", state.cross_v[i])},
                      {}, L + "encoder_attention");
    c = b.linear(b.reshape(c, {N, d}, L + "encoder_attn.merge_heads"), lw.cross.o, L + "encoder_attn.out_proj");
    x = g.add(OpKind::Add, {x, c}, {}, L + "encoder_attn_residual");

    x = b.residual_mlp(x, lw.ffn_norm, lw.fc1, lw.fc2, L);
  }
  if (T > 1) {  // only each beam's last token's logits are wanted
    std::vector<ValueId> last;
    for (int64_t bm = 0; bm < B; ++bm) last.push_back(b.slice(x, 0, bm * T + T - 1, bm * T + T, "last.b" + num(bm)));
    x = B > 1 ? g.add(OpKind::Concat, last, rows_cat, "last_rows") : last[0];
  }
  x = b.layer_norm(x, w.decoder_norm, "layer_norm");
  const ValueId logits = b.matmul(x, w.output, {}, "proj_out");
  g.mark_output(logits);
  RunReport r = run_graph(g, std::move(backends));
  if (report) *report = std::move(r);
  for (auto& c : state.self) c.set_length(pos + T);
  state.position = pos + T;
  return host::to_f32(g.get(logits));
}

void WhisperModel::reorder(WhisperDecodeState& state, const std::vector<int64_t>& source) const {
  const int64_t B = state.beams();
  if (source.empty()) throw std::invalid_argument("whisper reorder: no beams");
  for (int64_t s : source)
    if (s < 0 || s >= B)
      throw std::invalid_argument("whisper reorder: source beam " + num(s) + " outside [0, " + num(B) + ")");
  // The first beam that continues a source takes its cache over; the others get copies of the
  // filled prefix. Copies are made before any cache moves.
  std::vector<host::KvCache> old = std::move(state.self);
  std::vector<int64_t> owner(B, -1);
  for (size_t i = 0; i < source.size(); ++i)
    if (owner[source[i]] < 0) owner[source[i]] = static_cast<int64_t>(i);
  std::vector<std::optional<host::KvCache>> next(source.size());
  const int64_t filled = state.position;
  for (size_t i = 0; i < source.size(); ++i) {
    if (owner[source[i]] == static_cast<int64_t>(i)) continue;
    const host::KvCache& from = old[source[i]];
    next[i].emplace(from.layers(), from.max_len(), spec_.decoder_heads, spec_.d_model / spec_.decoder_heads,
                    from.dtype())
        .copy_prefix(from, filled);
  }
  for (size_t i = 0; i < source.size(); ++i)
    if (!next[i]) next[i].emplace(std::move(old[source[i]]));
  state.self.clear();
  for (auto& c : next) state.self.push_back(std::move(*c));
}

Tensor WhisperModel::cross_attention_scores(const Tensor& audio_features, const std::vector<int32_t>& tokens,
                                            const std::vector<std::pair<int64_t, int64_t>>& heads, Tensor* logits,
                                            std::vector<Backend*> backends) const {
  const WhisperSpec& s = spec_;
  const Impl& w = *impl_;
  const int64_t T = static_cast<int64_t>(tokens.size()), S = s.n_audio_ctx, d = s.d_model, H = s.decoder_heads,
                D = d / H;
  if (T == 0) throw std::invalid_argument("whisper cross_attention_scores: no tokens");
  if (T > s.n_text_ctx)
    throw std::invalid_argument("whisper cross_attention_scores: " + num(T) + " tokens exceed the text context of " +
                                num(s.n_text_ctx));
  for (const auto& [layer, head] : heads)
    if (layer < 0 || layer >= s.decoder_layers || head < 0 || head >= H)
      throw std::invalid_argument("whisper cross_attention_scores: head (" + num(layer) + ", " + num(head) +
                                  ") outside the decoder's " + num(s.decoder_layers) + " layers x " + num(H) + " heads");
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= s.vocab)
      throw std::invalid_argument("whisper cross_attention_scores: token id " + num(tokens[t]) +
                                  " outside the vocabulary [0, " + num(s.vocab) + ")");
    positions[t] = static_cast<int32_t>(t);
  }
  const WhisperDecodeState st = start(audio_features, 1, backends);

  // The decoder of decode() for one sequence with no cache (causal self-attention over the
  // sequence itself), keeping each layer's cross-attention queries and every row's logits.
  Builder b;
  Graph& g = b.g;
  ValueId x = g.add(OpKind::Embedding, {b.constant("embed_tokens", w.embed_tokens), g.input("ids", i32_tensor(tokens))},
                    {}, "embed_tokens");
  x = g.add(OpKind::Add,
            {x, g.add(OpKind::Embedding,
                      {b.constant("embed_positions", w.decoder_positions), g.input("positions", i32_tensor(positions))},
                      {}, "embed_positions")},
            {}, "add_positions");
  std::vector<ValueId> queries;
  for (int64_t i = 0; i < s.decoder_layers; ++i) {
    const DecoderLayer& lw = w.decoder[i];
    const std::string L = "dec" + num(i) + ".";
    ValueId h = b.layer_norm(x, lw.self.norm, L + "self_attn_layer_norm");
    const ValueId q = b.reshape(b.linear(h, lw.self.q, L + "q"), {T, H, D}, L + "q.heads");
    const ValueId k = b.reshape(b.linear(h, lw.self.k, L + "k"), {T, H, D}, L + "k.heads");
    const ValueId v = b.reshape(b.linear(h, lw.self.v, L + "v"), {T, H, D}, L + "v.heads");
    OpAttrs at;
    at.causal = true;
    ValueId o = g.add(OpKind::Attention, {q, k, v}, at, L + "self_attention");
    o = b.linear(b.reshape(o, {T, d}, L + "merge_heads"), lw.self.o, L + "out_proj");
    x = g.add(OpKind::Add, {x, o}, {}, L + "self_attn_residual");

    h = b.layer_norm(x, lw.cross.norm, L + "encoder_attn_layer_norm");
    const ValueId cq = b.reshape(b.linear(h, lw.cross.q, L + "encoder_attn.q"), {T, H, D}, L + "encoder_attn.q.heads");
    g.mark_output(cq);
    queries.push_back(cq);
    ValueId c = g.add(OpKind::Attention, {cq, b.constant(L + "cross.k", st.cross_k[i]), b.constant(L + "cross.v", st.cross_v[i])},
                      {}, L + "encoder_attention");
    c = b.linear(b.reshape(c, {T, d}, L + "encoder_attn.merge_heads"), lw.cross.o, L + "encoder_attn.out_proj");
    x = g.add(OpKind::Add, {x, c}, {}, L + "encoder_attn_residual");
    x = b.residual_mlp(x, lw.ffn_norm, lw.fc1, lw.fc2, L);
  }
  x = b.layer_norm(x, w.decoder_norm, "layer_norm");
  const ValueId out = b.matmul(x, w.output, {}, "proj_out");
  g.mark_output(out);
  run_graph(g, std::move(backends));
  if (logits) *logits = host::to_f32(g.get(out));

  // The scores of the wanted heads: [T, D] queries against [S, D] keys, a small product per head.
  const int64_t n_heads = static_cast<int64_t>(heads.size());
  Tensor scores = Tensor::zeros({n_heads, T, S});
  float* dst = scores.data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t i = 0; i < n_heads; ++i) {
    const auto [layer, head] = heads[i];
    const Tensor qt = host::to_f32(g.get(queries[layer]));
    const float* qd = qt.data<float>();                  // [T, H, D]
    const float* kd = st.cross_k[layer].data<float>();  // [S, H, D]
    for (int64_t t = 0; t < T; ++t) {
      const float* qrow = qd + (t * H + head) * D;
      float* row = dst + (i * T + t) * S;
      for (int64_t j = 0; j < S; ++j) {
        const float* krow = kd + (j * H + head) * D;
        float dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += qrow[e] * krow[e];
        row[j] = dot * scale;
      }
    }
  }
  return scores;
}

}  // namespace xdna

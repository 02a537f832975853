// Loading conformer ASR checkpoints in their published formats:
// - NeMo .nemo: a tar of model_config.yaml, model_weights.ckpt (a torch state dict, read as views
//   into the archive) and the tokenizer (<hash>_tokenizer.model, or vocab.txt; character models
//   list their labels in the YAML);
// - GigaAM .ckpt: torch.save({"cfg": OmegaConf config, "state_dict": ...}), the SentencePiece
//   model as <name>_tokenizer.model beside it, or characters in cfg.decoding.vocabulary;
// - transformers' Parakeet directory: config.json, model.safetensors, tokenizer.json.
// Other layouts are renamed to NeMo's tensor names (RenamedWeights).
#include <sentencepiece_processor.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "models/conformer.h"
#include "weights/nemo_archive.h"
#include "weights/renamed_source.h"
#include "weights/torch_checkpoint.h"

namespace xdna {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": " + what);
}

// ---- YAML with typed, named errors ----------------------------------------------------------

struct Yaml {
  YAML::Node node;
  std::string where;  // "model_config.yaml: encoder"

  Yaml at(const std::string& key) const {
    if (!node.IsMap()) fail(where, "is not a mapping");
    const YAML::Node child = node[key];
    return {child, where + "." + key};
  }
  bool has(const std::string& key) const { return node.IsMap() && node[key] && !node[key].IsNull(); }
  // Written out as null (NeMo: preemph / mel_norm / window null mean "none").
  bool is_null(const std::string& key) const { return node.IsMap() && node[key] && node[key].IsNull(); }
  Yaml section(const std::string& key) const {
    Yaml s = at(key);
    if (!s.node || !s.node.IsMap()) fail(s.where, s.node ? "is not a mapping" : "is missing");
    return s;
  }
  template <typename T>
  T get(const std::string& key, const char* type) const {
    const Yaml v = at(key);
    if (!v.node || v.node.IsNull()) fail(v.where, "is missing");
    if (!v.node.IsScalar()) fail(v.where, std::string("is not ") + type);
    try {
      return v.node.as<T>();
    } catch (const YAML::Exception&) {
      fail(v.where, "is '" + v.node.Scalar() + "', not " + type);
    }
  }
  int64_t integer(const std::string& key) const { return get<int64_t>(key, "an integer"); }
  int64_t integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const std::string& key, double fallback) const {
    return has(key) ? get<double>(key, "a number") : fallback;
  }
  bool boolean(const std::string& key, bool fallback) const { return has(key) ? get<bool>(key, "true or false") : fallback; }
  std::string str(const std::string& key, const std::string& fallback) const {
    return has(key) ? get<std::string>(key, "a string") : fallback;
  }
  std::vector<int64_t> ints(const std::string& key) const {
    const Yaml v = at(key);
    if (!v.node.IsSequence()) fail(v.where, "is not a list");
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.node.size(); ++i) out.push_back(Yaml{v.node, v.where}.get_index(i));
    return out;
  }
  std::vector<std::string> strings(const std::string& key) const {
    const Yaml v = at(key);
    if (!v.node.IsSequence()) fail(v.where, "is not a list");
    std::vector<std::string> out;
    for (const YAML::Node& e : v.node) {
      if (!e.IsScalar()) fail(v.where, "has an entry that is not a string");
      out.push_back(e.Scalar());
    }
    return out;
  }

 private:
  int64_t get_index(size_t i) const {
    try {
      return node[i].as<int64_t>();
    } catch (const YAML::Exception&) {
      fail(where + "[" + std::to_string(i) + "]", "is not an integer");
    }
  }
};

void check_positive(const std::string& where, const char* name, int64_t v) {
  if (v <= 0) fail(where, std::string(name) + " is " + std::to_string(v) + ", not positive");
}

// NeMo's AudioToMelSpectrogramPreprocessor section -> the frontend config.
ConformerMelConfig nemo_mel(const Yaml& p) {
  const std::string target = p.str("_target_", "");
  if (!target.empty() && !target.ends_with("AudioToMelSpectrogramPreprocessor"))
    fail(p.where + "._target_", "'" + target + "' is not AudioToMelSpectrogramPreprocessor");
  ConformerMelConfig m;
  m.sample_rate = static_cast<int>(p.integer("sample_rate", 16000));
  check_positive(p.where, "sample_rate", m.sample_rate);
  // Sizes in seconds, truncated to samples as NeMo does (int(window_size * sample_rate)).
  m.win_length = p.has("n_window_size") ? static_cast<int>(p.integer("n_window_size"))
                                        : static_cast<int>(p.number("window_size", 0.02) * m.sample_rate);
  m.hop_length = p.has("n_window_stride") ? static_cast<int>(p.integer("n_window_stride"))
                                          : static_cast<int>(p.number("window_stride", 0.01) * m.sample_rate);
  check_positive(p.where, "window size", m.win_length);
  check_positive(p.where, "window stride", m.hop_length);
  if (p.has("n_fft")) {
    m.n_fft = static_cast<int>(p.integer("n_fft"));
  } else {  // NeMo: the next power of two
    m.n_fft = 1;
    while (m.n_fft < m.win_length) m.n_fft *= 2;
  }
  if (m.n_fft < m.win_length || m.n_fft > 65536)
    fail(p.where + ".n_fft", std::to_string(m.n_fft) + " is smaller than the window or too large");
  m.n_mels = static_cast<int>(p.integer("features", 64));
  check_positive(p.where, "features", m.n_mels);
  m.preemphasis = p.is_null("preemph") ? 0.0f : static_cast<float>(p.number("preemph", 0.97));
  m.window = p.is_null("window") ? "ones" : p.str("window", "hann");
  if (m.window != "hann" && m.window != "hamming" && m.window != "ones")
    fail(p.where + ".window", "'" + m.window + "' is not supported (hann, hamming, ones)");
  m.normalize = p.str("normalize", "per_feature");
  if (m.normalize != "per_feature" && m.normalize != "none")
    fail(p.where + ".normalize", "'" + m.normalize + "' is not supported (per_feature, none)");
  if (!p.boolean("log", true)) fail(p.where + ".log", "false (linear mel features) is not supported");
  m.log = p.str("log_zero_guard_type", "add");
  if (m.log != "add" && m.log != "clamp") fail(p.where + ".log_zero_guard_type", "'" + m.log + "' is not add or clamp");
  if (p.has("log_zero_guard_value")) {
    const Yaml g = p.at("log_zero_guard_value");
    if (g.node.IsScalar() && g.node.Scalar() == "tiny") m.log_guard = 1.1754943508222875e-38f;
    else if (g.node.IsScalar() && g.node.Scalar() == "eps") m.log_guard = 1.1920928955078125e-07f;
    else m.log_guard = static_cast<float>(p.number("log_zero_guard_value", m.log_guard));
  }
  m.mag_power = static_cast<float>(p.number("mag_power", 2.0));
  m.mel_norm = p.is_null("mel_norm") ? "none" : p.str("mel_norm", "slaney");
  if (m.mel_norm != "slaney" && m.mel_norm != "none")
    fail(p.where + ".mel_norm", "'" + m.mel_norm + "' is not supported (slaney, null)");
  if (p.integer("frame_splicing", 1) != 1) fail(p.where + ".frame_splicing", "only 1 is supported");
  if (p.boolean("exact_pad", false)) fail(p.where + ".exact_pad", "true is not supported");
  if (p.number("lowfreq", 0.0) != 0.0 || (p.has("highfreq") && p.number("highfreq", 0) != m.sample_rate / 2.0))
    fail(p.where, "lowfreq/highfreq other than 0 Hz .. Nyquist are not supported");
  if (p.number("pad_value", 0.0) != 0.0) fail(p.where + ".pad_value", "only 0 is supported");
  return m;
}

// The vocabulary size (blank excluded) of NeMo's decoder / joint sections.
void nemo_head(const Yaml& root, ConformerConfig& c) {
  const Yaml dec = root.section("decoder");
  const std::string target = dec.str("_target_", "");
  if (target.ends_with("ConvASRDecoder")) {
    c.head = "ctc";
    c.vocab_size = dec.integer("num_classes");
    check_positive(dec.where, "num_classes", c.vocab_size);
    return;
  }
  if (!target.ends_with("RNNTDecoder"))
    fail(dec.where + "._target_", "'" + target + "' is not a known head (ConvASRDecoder, RNNTDecoder)");
  const Yaml pred = dec.section("prednet");
  c.pred_hidden = pred.integer("pred_hidden");
  c.pred_layers = pred.integer("pred_rnn_layers", 1);
  c.vocab_size = dec.integer("vocab_size");
  check_positive(pred.where, "pred_hidden", c.pred_hidden);
  check_positive(pred.where, "pred_rnn_layers", c.pred_layers);
  check_positive(dec.where, "vocab_size", c.vocab_size);
  const Yaml joint = root.section("joint");
  c.joint_hidden = joint.section("jointnet").integer("joint_hidden");
  check_positive(joint.where, "joint_hidden", c.joint_hidden);
  if (joint.has("num_classes") && joint.integer("num_classes") != c.vocab_size)
    fail(joint.where + ".num_classes", "differs from decoder.vocab_size " + std::to_string(c.vocab_size));
  const std::string act = joint.section("jointnet").str("activation", "relu");
  if (act != "relu") fail(joint.where + ".jointnet.activation", "'" + act + "' is not supported (relu)");
  const int64_t extra = joint.integer("num_extra_outputs", 0);
  c.head = extra > 0 ? "tdt" : "rnnt";
  if (root.has("decoding")) {
    const Yaml decoding = root.section("decoding");
    if (decoding.has("greedy") && decoding.section("greedy").has("max_symbols"))
      c.max_symbols_per_step = decoding.section("greedy").integer("max_symbols");
    if (decoding.has("durations")) c.durations = decoding.ints("durations");
  }
  if (c.head == "tdt") {
    if (c.durations.empty() && root.has("model_defaults") && root.section("model_defaults").has("tdt_durations"))
      c.durations = root.section("model_defaults").ints("tdt_durations");
    if (static_cast<int64_t>(c.durations.size()) != extra)
      fail(joint.where + ".num_extra_outputs", std::to_string(extra) + " extra outputs but " +
                                                    std::to_string(c.durations.size()) + " TDT durations");
  }
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> vocab_lines(const std::string& text) {  // vocab.txt: one piece a line
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  return out;
}

void check_vocabulary(const std::vector<std::string>& v, int64_t vocab_size, const std::string& where) {
  if (static_cast<int64_t>(v.size()) != vocab_size)
    fail(where, "the tokenizer has " + std::to_string(v.size()) + " pieces, the model " + std::to_string(vocab_size) +
                    " classes (blank excluded)");
}

// ---- The preprocessor's stored window and filterbank --------------------------------------------

// The window and mel filterbank buffers the checkpoint's preprocessor carries, in their stored
// dtype widened to f32, so that the features use the values the model computes with (the
// published GigaAM v3 checkpoints hold both in bfloat16). NeMo's fb is [1, n_mels, bins],
// torchaudio's (GigaAM) [bins, n_mels]. Absent buffers leave the computed ones.
void take_mel_buffers(const WeightSource& w, const std::string& window_name, const std::string& fb_name,
                      bool fb_mels_first, ConformerMelConfig& mel, const std::string& where) {
  if (w.contains(window_name)) {
    const Tensor t = w.get(window_name);
    if (t.shape() != Shape{mel.win_length})
      fail(where + ": " + window_name, "is " + shape_str(t.shape()) + ", not [win_length = " +
                                           std::to_string(mel.win_length) + "]");
    mel.window_values = t.to_vector();
  }
  if (w.contains(fb_name)) {
    const int64_t bins = mel.n_fft / 2 + 1, mels = mel.n_mels;
    const Tensor t = w.get(fb_name);
    const Shape want = fb_mels_first ? Shape{1, mels, bins} : Shape{bins, mels};
    if (t.shape() != want)
      fail(where + ": " + fb_name, "is " + shape_str(t.shape()) + ", not " + shape_str(want) +
                                       " for n_mels " + std::to_string(mels) + ", n_fft " + std::to_string(mel.n_fft));
    const std::vector<float> v = t.to_vector();
    if (fb_mels_first) {
      mel.filterbank = v;
    } else {
      mel.filterbank.resize(v.size());
      for (int64_t k = 0; k < bins; ++k)
        for (int64_t m = 0; m < mels; ++m) mel.filterbank[m * bins + k] = v[k * mels + m];
    }
  }
}

// ---- NeMo --------------------------------------------------------------------------------------

ConformerCheckpoint read_nemo(const std::string& path) {
  auto tar = std::make_shared<TarArchive>(path);
  const TarMember* yaml = tar->find("model_config.yaml");
  if (!yaml) fail(path, "no model_config.yaml in the archive: not a .nemo model");
  const TarMember* ckpt = tar->find("model_weights.ckpt");
  if (!ckpt) fail(path, "no model_weights.ckpt in the archive");
  ConformerCheckpoint out;
  out.format = "nemo";
  const std::string text = tar->read(*yaml);
  out.config = conformer_config_from_nemo_yaml(text, path + ": model_config.yaml");
  auto weights = std::make_shared<TorchCheckpoint>(tar->slice(*ckpt), path + ": model_weights.ckpt");
  take_mel_buffers(*weights, "preprocessor.featurizer.window", "preprocessor.featurizer.fb", true, out.config.mel,
                   path + ": model_weights.ckpt");
  // NeMo's joint_net is [activation, Dropout if dropout > 0, Linear]: the Linear is index 1 in
  // models trained without joint dropout. Expose it as joint_net.2 either way.
  if (weights->contains("joint.joint_net.1.weight") && !weights->contains("joint.joint_net.2.weight"))
    out.weights = std::make_shared<RenamedWeights>(weights, [](const std::string& n) {
      return n.starts_with("joint.joint_net.1.") ? "joint.joint_net.2." + n.substr(18) : n;
    });
  else
    out.weights = weights;

  // Tokenizer: SentencePiece (BPE / unigram), a WordPiece vocab.txt, or the YAML's labels.
  const YAML::Node root = YAML::Load(text);
  const Yaml cfg{root, path + ": model_config.yaml"};
  auto member_named = [&](const std::string& ref) -> const TarMember* {  // "nemo:<member>"
    return ref.starts_with("nemo:") ? tar->find(ref.substr(5)) : nullptr;
  };
  if (cfg.has("tokenizer")) {
    const Yaml tok = cfg.section("tokenizer");
    const std::string type = tok.str("type", "bpe");
    if (type == "bpe" || type == "spe") {
      const TarMember* m = member_named(tok.str("model_path", ""));
      if (!m) m = tar->find_suffix("tokenizer.model");
      if (!m) fail(path, "tokenizer type " + type + " but no tokenizer.model in the archive");
      out.vocabulary = sentencepiece_pieces(tar->read(*m), path + ": " + m->name);
    } else if (type == "wpe") {
      const TarMember* m = member_named(tok.str("vocab_path", ""));
      if (!m) m = tar->find_suffix("vocab.txt");
      if (!m) fail(path, "tokenizer type wpe but no vocab.txt in the archive");
      out.vocabulary = vocab_lines(tar->read(*m));
    } else {
      fail(cfg.where + ".tokenizer.type", "'" + type + "' is not supported (bpe, wpe)");
    }
  } else {  // character models: decoder.vocabulary, or the top-level labels
    const Yaml dec = cfg.section("decoder");
    if (dec.has("vocabulary") && dec.at("vocabulary").node.size() > 0) out.vocabulary = dec.strings("vocabulary");
    else if (cfg.has("labels")) out.vocabulary = cfg.strings("labels");
    else fail(path, "missing tokenizer: no tokenizer section and no decoder.vocabulary / labels");
  }
  check_vocabulary(out.vocabulary, out.config.vocab_size, path);
  return out;
}

// ---- GigaAM ------------------------------------------------------------------------------------

const nlohmann::json& json_at(const nlohmann::json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) fail(where, "missing " + key);
  return j.at(key);
}
int64_t json_int(const nlohmann::json& j, const std::string& key, const std::string& where,
                 std::optional<int64_t> fallback = std::nullopt) {
  if (fallback && (!j.is_object() || !j.contains(key) || j.at(key).is_null())) return *fallback;
  const nlohmann::json& v = json_at(j, key, where);
  if (!v.is_number_integer()) fail(where + "." + key, "is " + v.dump() + ", not an integer");
  return v.get<int64_t>();
}
std::string json_str(const nlohmann::json& j, const std::string& key, const std::string& where,
                     const std::string& fallback) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_string()) fail(where + "." + key, "is " + j.at(key).dump() + ", not a string");
  return j.at(key).get<std::string>();
}

ConformerCheckpoint read_gigaam(const std::string& path) {
  auto ckpt = std::make_shared<TorchCheckpoint>(path);
  const nlohmann::json meta = ckpt->metadata();
  if (!meta.contains("objects") || !meta["objects"].contains("cfg") || !meta["objects"]["cfg"].is_object())
    fail(path, "no \"cfg\" beside the state dict: not a GigaAM checkpoint");
  const nlohmann::json& cfg = meta["objects"]["cfg"];
  ConformerCheckpoint out;
  out.format = "gigaam";
  out.config = conformer_config_from_gigaam(cfg, path + ": cfg");
  take_mel_buffers(*ckpt, "preprocessor.featurizer.0.spectrogram.window", "preprocessor.featurizer.0.mel_scale.fb",
                   false, out.config.mel, path);
  out.weights = std::make_shared<RenamedWeights>(ckpt, gigaam_to_nemo_name);

  // Vocabulary: characters in the config, or a SentencePiece model beside the checkpoint
  // (gigaam downloads <model>_tokenizer.model next to <model>.ckpt).
  const nlohmann::json decoding = cfg.value("decoding", nlohmann::json::object());
  const fs::path p(path);
  std::vector<fs::path> candidates = {p.parent_path() / (p.stem().string() + "_tokenizer.model")};
  if (decoding.contains("model_path") && decoding["model_path"].is_string())
    candidates.push_back(p.parent_path() / fs::path(decoding["model_path"].get<std::string>()).filename());
  const bool charwise = decoding.contains("vocabulary") && decoding["vocabulary"].is_array() &&
                        !decoding["vocabulary"].empty() && !decoding.contains("model_path");
  if (charwise) {
    for (const auto& v : decoding["vocabulary"]) {
      if (!v.is_string()) fail(path, "cfg.decoding.vocabulary has an entry that is not a string");
      out.vocabulary.push_back(v.get<std::string>());
    }
  } else {
    for (const fs::path& c : candidates)
      if (fs::is_regular_file(c)) {
        out.vocabulary = sentencepiece_pieces(read_file(c), c.string());
        break;
      }
    if (out.vocabulary.empty())
      fail(path, "missing tokenizer: no character vocabulary in cfg.decoding and no " +
                     candidates.front().filename().string() + " beside the checkpoint");
  }
  check_vocabulary(out.vocabulary, out.config.vocab_size, path);
  return out;
}

// ---- transformers ------------------------------------------------------------------------------

nlohmann::json read_json(const fs::path& p) {
  try {
    return nlohmann::json::parse(read_file(p));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(p.string() + ": not valid JSON (" + e.what() + ")");
  }
}

ConformerCheckpoint read_hf_parakeet(const fs::path& dir) {
  const nlohmann::json config = read_json(dir / "config.json");
  const nlohmann::json pre = fs::exists(dir / "preprocessor_config.json") ? read_json(dir / "preprocessor_config.json")
                                                                          : nlohmann::json();
  ConformerCheckpoint out;
  out.format = "transformers";
  out.config = conformer_config_from_hf_parakeet(config, pre, (dir / "config.json").string());
  std::shared_ptr<const WeightSource> raw = open_weights(dir.string());
  out.weights = std::make_shared<RenamedWeights>(raw, parakeet_hf_to_nemo_name);
  // tokenizer.json: the model's vocab, a list of [piece, score] (Unigram) or piece -> id.
  if (!fs::exists(dir / "tokenizer.json")) fail(dir.string(), "missing tokenizer: no tokenizer.json");
  const nlohmann::json tok = read_json(dir / "tokenizer.json");
  const std::string where = (dir / "tokenizer.json").string();
  if (!tok.contains("model") || !tok["model"].contains("vocab")) fail(where, "no model.vocab");
  const nlohmann::json& vocab = tok["model"]["vocab"];
  std::vector<std::string> pieces;
  if (vocab.is_array()) {
    for (const auto& e : vocab) {
      if (!e.is_array() || e.empty() || !e[0].is_string()) fail(where, "model.vocab entries are not [piece, score]");
      pieces.push_back(e[0].get<std::string>());
    }
  } else if (vocab.is_object()) {
    pieces.resize(vocab.size());
    for (const auto& [piece, id] : vocab.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<uint64_t>() >= pieces.size())
        fail(where, "model.vocab id of '" + piece + "' is out of range");
      pieces[id.get<size_t>()] = piece;
    }
  } else {
    fail(where, "model.vocab is neither a list nor a mapping");
  }
  // The blank may be listed as the last piece (transformers adds it as <pad>/<blank>).
  if (static_cast<int64_t>(pieces.size()) == out.config.vocab_size + 1) pieces.pop_back();
  out.vocabulary = std::move(pieces);
  check_vocabulary(out.vocabulary, out.config.vocab_size, dir.string());
  return out;
}

}  // namespace

// ---- public ------------------------------------------------------------------------------------

std::vector<std::string> sentencepiece_pieces(const std::string& model_bytes, const std::string& where) {
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.LoadFromSerializedProto(model_bytes);
  if (!status.ok()) fail(where, "not a SentencePiece model (" + status.ToString() + ")");
  std::vector<std::string> out;
  for (int i = 0; i < sp.GetPieceSize(); ++i) out.push_back(sp.IdToPiece(i));
  return out;
}

ConformerConfig conformer_config_from_nemo_yaml(const std::string& yaml_text, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(where, std::string("not valid YAML (") + e.what() + ")");
  }
  if (!root.IsMap()) fail(where, "is not a YAML mapping");
  const Yaml cfg{root, where};
  const Yaml enc = cfg.section("encoder");
  ConformerConfig c;
  c.family = "parakeet";
  const std::string target = enc.str("_target_", "");
  if (!target.empty() && !target.ends_with("ConformerEncoder"))
    fail(enc.where + "._target_", "'" + target + "' is not a ConformerEncoder");
  c.n_mels = enc.integer("feat_in");
  c.d_model = enc.integer("d_model");
  c.n_layers = enc.integer("n_layers");
  c.n_heads = enc.integer("n_heads", 4);
  for (auto [name, v] : {std::pair{"feat_in", c.n_mels}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                         {"n_heads", c.n_heads}})
    check_positive(enc.where, name, v);
  c.ff_dim = c.d_model * enc.integer("ff_expansion_factor", 4);
  c.conv_kernel = enc.integer("conv_kernel_size", 31);
  c.subsampling = enc.str("subsampling", "striding");
  if (c.subsampling != "dw_striding" && c.subsampling != "striding")
    fail(enc.where + ".subsampling", "'" + c.subsampling + "' is not supported (dw_striding, striding)");
  c.subsampling_factor = enc.integer("subsampling_factor", 4);
  if (c.subsampling_factor < 2 || (c.subsampling_factor & (c.subsampling_factor - 1)))
    fail(enc.where + ".subsampling_factor", std::to_string(c.subsampling_factor) + " is not a power of two >= 2");
  c.subsampling_channels = enc.integer("subsampling_conv_channels", -1);
  if (c.subsampling_channels == -1) c.subsampling_channels = c.d_model;  // NeMo's default
  check_positive(enc.where, "subsampling_conv_channels", c.subsampling_channels);
  if (enc.boolean("causal_downsampling", false)) fail(enc.where + ".causal_downsampling", "true is not supported");
  c.self_attention = enc.str("self_attention_model", "rel_pos");
  if (c.self_attention != "rel_pos")
    fail(enc.where + ".self_attention_model", "'" + c.self_attention + "' is not supported (rel_pos)");
  if (!enc.boolean("untie_biases", true)) fail(enc.where + ".untie_biases", "false (shared pos biases) is not supported");
  if (enc.has("att_context_size")) {
    const std::vector<int64_t> ctx = enc.ints("att_context_size");
    for (int64_t v : ctx)
      if (v != -1) fail(enc.where + ".att_context_size", "limited attention context is not supported (need [-1, -1])");
  }
  c.xscaling = enc.boolean("xscaling", true);
  c.pos_emb_max_len = enc.integer("pos_emb_max_len", 5000);
  check_positive(enc.where, "pos_emb_max_len", c.pos_emb_max_len);
  const bool bias = enc.boolean("use_bias", true);
  c.attention_bias = c.conv_bias = c.ff_bias = bias;
  c.conv_norm = enc.str("conv_norm_type", "batch_norm");
  if (c.conv_norm != "batch_norm") fail(enc.where + ".conv_norm_type", "'" + c.conv_norm + "' is not supported (batch_norm)");
  if (enc.integer("feat_out", -1) != -1) fail(enc.where + ".feat_out", "an output projection is not supported");

  nemo_head(cfg, c);
  c.mel = nemo_mel(cfg.section("preprocessor"));
  if (c.mel.n_mels != c.n_mels)
    fail(where, "preprocessor.features " + std::to_string(c.mel.n_mels) + " != encoder.feat_in " + std::to_string(c.n_mels));
  return c;
}

ConformerConfig conformer_config_from_gigaam(const nlohmann::json& cfg, const std::string& where) {
  const nlohmann::json& enc = json_at(cfg, "encoder", where);
  const std::string ew = where + ".encoder";
  ConformerConfig c;
  c.family = "gigaam";
  // gigaam's StridingSubsampling: "conv2d" (v1/v2: conv2d + ReLU pairs, then a linear) or
  // "conv1d" (v3: conv1d + ReLU pairs over time, features as channels); conv_channels = d_model.
  const std::string subsampling = json_str(enc, "subsampling", ew, "conv2d");
  if (subsampling != "conv2d" && subsampling != "conv1d")
    fail(ew + ".subsampling", "'" + subsampling + "' is not supported (conv2d, conv1d)");
  c.subsampling = subsampling == "conv1d" ? "conv1d" : "striding";
  c.subsampling_kernel = json_int(enc, "subs_kernel_size", ew, 3);
  if (c.subsampling_kernel < 1 || c.subsampling_kernel % 2 == 0)
    fail(ew + ".subs_kernel_size", std::to_string(c.subsampling_kernel) + " is not a positive odd number");
  // v3's convolution module may normalise with LayerNorm (kept under the batch norm's name).
  c.conv_norm = json_str(enc, "conv_norm_type", ew, "batch_norm");
  if (c.conv_norm != "batch_norm" && c.conv_norm != "layer_norm")
    fail(ew + ".conv_norm_type", "'" + c.conv_norm + "' is not supported (batch_norm, layer_norm)");
  c.n_mels = json_int(enc, "feat_in", ew, 64);
  c.d_model = json_int(enc, "d_model", ew, 768);
  c.n_layers = json_int(enc, "n_layers", ew, 16);
  c.n_heads = json_int(enc, "n_heads", ew, 16);
  c.subsampling_factor = json_int(enc, "subsampling_factor", ew, 4);
  c.ff_dim = c.d_model * json_int(enc, "ff_expansion_factor", ew, 4);
  c.conv_kernel = json_int(enc, "conv_kernel_size", ew, 31);
  c.pos_emb_max_len = json_int(enc, "pos_emb_max_len", ew, 5000);
  for (auto [name, v] : {std::pair{"feat_in", c.n_mels}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                         {"n_heads", c.n_heads}, {"conv_kernel_size", c.conv_kernel}})
    check_positive(ew, name, v);
  if (c.subsampling_factor < 2 || (c.subsampling_factor & (c.subsampling_factor - 1)))
    fail(ew + ".subsampling_factor", std::to_string(c.subsampling_factor) + " is not a power of two >= 2");
  c.subsampling_channels = c.d_model;
  c.self_attention = json_str(enc, "self_attention_model", ew, "rotary");
  if (c.self_attention != "rotary" && c.self_attention != "rel_pos")
    fail(ew + ".self_attention_model", "'" + c.self_attention + "' is not supported (rotary, rel_pos)");
  c.xscaling = false;
  // gigaam's RotaryPositionalEmbedding(d_model / n_heads, pos_emb_max_len): the max length is its base.
  c.rotary_base = static_cast<float>(c.pos_emb_max_len);

  const nlohmann::json pre = cfg.value("preprocessor", nlohmann::json::object());
  c.mel.sample_rate = static_cast<int>(json_int(pre, "sample_rate", where + ".preprocessor", 16000));
  c.mel.n_mels = static_cast<int>(json_int(pre, "features", where + ".preprocessor", c.n_mels));
  if (c.mel.sample_rate <= 0 || c.mel.sample_rate % 100 != 0)
    fail(where + ".preprocessor.sample_rate", std::to_string(c.mel.sample_rate) + " is not a positive multiple of 100");
  if (c.mel.n_mels != c.n_mels) fail(where, "preprocessor.features differs from encoder.feat_in");
  // gigaam.preprocess.FeatureExtractor: torchaudio MelSpectrogram, n_fft = win = sr / 40, hop = sr / 100,
  // centred; v3 configs set n_fft, win_length, hop_length and center (320, 320, 160, false). Their
  // mel_scale / mel_norm keys are not read by gigaam (torchaudio's defaults, htk / none, apply).
  const std::string pw = where + ".preprocessor";
  c.mel.win_length = static_cast<int>(json_int(pre, "win_length", pw, c.mel.sample_rate / 40));
  c.mel.n_fft = static_cast<int>(json_int(pre, "n_fft", pw, c.mel.sample_rate / 40));
  c.mel.hop_length = static_cast<int>(json_int(pre, "hop_length", pw, c.mel.sample_rate / 100));
  if (c.mel.win_length <= 0 || c.mel.hop_length <= 0 || c.mel.n_fft < c.mel.win_length || c.mel.n_fft > 65536)
    fail(pw, "n_fft " + std::to_string(c.mel.n_fft) + ", win_length " + std::to_string(c.mel.win_length) +
                 ", hop_length " + std::to_string(c.mel.hop_length) + " are not positive with win_length <= n_fft");
  if (pre.contains("center") && !pre["center"].is_null()) {
    if (!pre["center"].is_boolean()) fail(pw + ".center", "is " + pre["center"].dump() + ", not a boolean");
    c.mel.center = pre["center"].get<bool>();
  }
  c.mel.preemphasis = 0.0f;
  c.mel.window = "hann_periodic";
  c.mel.pad_mode = "reflect";
  c.mel.mel_norm = "none";
  c.mel.mel_scale = "htk";
  c.mel.log = "clamp";
  c.mel.log_guard = 1e-9f;
  c.mel.normalize = "none";
  c.mel.drop_last_frame = false;

  const nlohmann::json& head = json_at(cfg, "head", where);
  const std::string hw = where + ".head";
  const std::string target = json_str(head, "_target_", hw, "");
  if (head.contains("decoder") || target.ends_with("RNNTHead")) {
    const nlohmann::json& dec = json_at(head, "decoder", hw);
    const nlohmann::json& joint = json_at(head, "joint", hw);
    c.head = "rnnt";
    c.pred_hidden = json_int(dec, "pred_hidden", hw + ".decoder");
    c.pred_layers = json_int(dec, "pred_rnn_layers", hw + ".decoder", 1);
    c.vocab_size = json_int(dec, "num_classes", hw + ".decoder") - 1;  // gigaam counts the blank
    c.joint_hidden = json_int(joint, "joint_hidden", hw + ".joint");
    check_positive(hw, "pred_hidden", c.pred_hidden);
    check_positive(hw, "joint_hidden", c.joint_hidden);
  } else if (head.contains("num_classes") || target.ends_with("CTCHead")) {
    c.head = "ctc";
    c.vocab_size = json_int(head, "num_classes", hw) - 1;
  } else {
    fail(hw, "is neither a CTCHead nor an RNNTHead");
  }
  check_positive(hw, "number of classes without the blank", c.vocab_size);
  const nlohmann::json decoding = cfg.value("decoding", nlohmann::json::object());
  c.max_symbols_per_step = json_int(decoding, "max_symbols_per_step", where + ".decoding", 10);
  return c;
}

ConformerConfig conformer_config_from_hf_parakeet(const nlohmann::json& config, const nlohmann::json& pre,
                                                  const std::string& where) {
  const std::string type = json_str(config, "model_type", where, "");
  if (type != "parakeet_ctc" && type != "parakeet_rnnt" && type != "parakeet_tdt")
    fail(where, "model_type '" + type + "' is not parakeet_ctc, parakeet_rnnt or parakeet_tdt");
  const nlohmann::json& enc = json_at(config, "encoder_config", where);
  const std::string ew = where + ".encoder_config";
  ConformerConfig c;
  c.family = "parakeet";
  c.subsampling = "dw_striding";
  c.d_model = json_int(enc, "hidden_size", ew, 1024);
  c.n_layers = json_int(enc, "num_hidden_layers", ew, 24);
  c.n_heads = json_int(enc, "num_attention_heads", ew, 8);
  c.ff_dim = json_int(enc, "intermediate_size", ew, 4096);
  c.conv_kernel = json_int(enc, "conv_kernel_size", ew, 9);
  c.subsampling_factor = json_int(enc, "subsampling_factor", ew, 8);
  c.subsampling_channels = json_int(enc, "subsampling_conv_channels", ew, 256);
  c.subsampling_kernel = json_int(enc, "subsampling_conv_kernel_size", ew, 3);
  c.n_mels = json_int(enc, "num_mel_bins", ew, 80);
  c.pos_emb_max_len = json_int(enc, "max_position_embeddings", ew, 5000);
  for (auto [name, v] : {std::pair{"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers},
                         {"num_attention_heads", c.n_heads}, {"num_mel_bins", c.n_mels}})
    check_positive(ew, name, v);
  if (c.subsampling_factor < 2 || (c.subsampling_factor & (c.subsampling_factor - 1)))
    fail(ew + ".subsampling_factor", std::to_string(c.subsampling_factor) + " is not a power of two >= 2");
  auto flag = [&](const char* key, bool fallback) {
    if (!enc.contains(key)) return fallback;
    if (!enc[key].is_boolean()) fail(ew + "." + key, "is not true or false");
    return enc[key].get<bool>();
  };
  c.xscaling = flag("scale_input", true);
  c.attention_bias = c.ff_bias = flag("attention_bias", true);
  c.conv_bias = flag("convolution_bias", true);
  c.vocab_size = json_int(config, "vocab_size", where) - 1;  // the blank is the last class
  check_positive(where, "vocab_size without the blank", c.vocab_size);
  if (type == "parakeet_ctc") {
    c.head = "ctc";
  } else {
    c.head = type == "parakeet_tdt" ? "tdt" : "rnnt";
    c.pred_hidden = c.joint_hidden = json_int(config, "decoder_hidden_size", where, 640);
    c.pred_layers = json_int(config, "num_decoder_layers", where, 2);
    c.max_symbols_per_step = json_int(config, "max_symbols_per_step", where, 10);
    if (c.head == "tdt") {
      c.durations = {0, 1, 2, 3, 4};
      if (config.contains("durations")) {
        c.durations.clear();
        for (const auto& d : config["durations"]) {
          if (!d.is_number_integer()) fail(where + ".durations", "has an entry that is not an integer");
          c.durations.push_back(d.get<int64_t>());
        }
      }
    }
  }
  // ParakeetFeatureExtractor: NeMo's frontend; preprocessor_config.json may change the sizes.
  if (pre.is_object()) {
    const std::string pw = where + " (preprocessor_config.json)";
    c.mel.n_mels = static_cast<int>(json_int(pre, "feature_size", pw, c.n_mels));
    c.mel.sample_rate = static_cast<int>(json_int(pre, "sampling_rate", pw, 16000));
    c.mel.hop_length = static_cast<int>(json_int(pre, "hop_length", pw, 160));
    c.mel.n_fft = static_cast<int>(json_int(pre, "n_fft", pw, 512));
    c.mel.win_length = static_cast<int>(json_int(pre, "win_length", pw, 400));
    if (pre.contains("preemphasis") && pre["preemphasis"].is_number()) c.mel.preemphasis = pre["preemphasis"].get<float>();
  }
  c.mel.n_mels = static_cast<int>(c.n_mels);
  return c;
}

std::string parakeet_hf_to_nemo_name(const std::string& n) {
  // transformers' module names (modeling_parakeet.py) -> NeMo's, piece by piece.
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^encoder\.subsampling\.layers\.)"), "encoder.pre_encode.conv."},
      {std::regex(R"(^encoder\.subsampling\.linear\.)"), "encoder.pre_encode.out."},
      {std::regex(R"(\.self_attn\.q_proj\.)"), ".self_attn.linear_q."},
      {std::regex(R"(\.self_attn\.k_proj\.)"), ".self_attn.linear_k."},
      {std::regex(R"(\.self_attn\.v_proj\.)"), ".self_attn.linear_v."},
      {std::regex(R"(\.self_attn\.o_proj\.)"), ".self_attn.linear_out."},
      {std::regex(R"(\.self_attn\.relative_k_proj\.)"), ".self_attn.linear_pos."},
      {std::regex(R"(\.self_attn\.bias_u$)"), ".self_attn.pos_bias_u"},
      {std::regex(R"(\.self_attn\.bias_v$)"), ".self_attn.pos_bias_v"},
      {std::regex(R"(\.conv\.norm\.)"), ".conv.batch_norm."},
      {std::regex(R"(^ctc_head\.)"), "decoder.decoder_layers.0."},
      {std::regex(R"(^decoder\.embedding\.)"), "decoder.prediction.embed."},
      {std::regex(R"(^decoder\.lstm\.)"), "decoder.prediction.dec_rnn.lstm."},
      {std::regex(R"(^decoder\.decoder_projector\.)"), "joint.pred."},
      {std::regex(R"(^encoder_projector\.)"), "joint.enc."},
      {std::regex(R"(^joint\.head\.)"), "joint.joint_net.2."},
  };
  if (n.ends_with("num_batches_tracked")) return "";
  std::string out = n;
  for (const auto& [re, to] : rules) out = std::regex_replace(out, re, to);
  return out;
}

std::string gigaam_to_nemo_name(const std::string& n) {
  if (n.starts_with("preprocessor.") || n.ends_with("num_batches_tracked")) return "";  // mel bank, counters
  if (n.starts_with("head.decoder_layers.")) return "decoder." + n.substr(5);            // CTC
  if (n.starts_with("head.decoder.embed.")) return "decoder.prediction.embed." + n.substr(19);
  if (n.starts_with("head.decoder.lstm.")) return "decoder.prediction.dec_rnn.lstm." + n.substr(18);
  if (n.starts_with("head.joint.joint_net.1.")) return "joint.joint_net.2." + n.substr(23);  // no dropout slot
  if (n.starts_with("head.joint.")) return "joint." + n.substr(11);
  return n;
}

ConformerCheckpoint read_conformer_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::is_directory(p)) {
    if (fs::exists(p / "config.json")) return read_hf_parakeet(p);
    std::vector<fs::path> found;  // a store directory holding one checkpoint
    for (const auto& e : fs::directory_iterator(p)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".nemo" || (ext == ".ckpt" && looks_like_torch_checkpoint(e.path().string()))))
        found.push_back(e.path());
    }
    if (found.size() != 1)
      fail(path, found.empty() ? "no .nemo, GigaAM .ckpt or config.json here"
                               : "holds " + std::to_string(found.size()) + " checkpoints; name one");
    return read_conformer_checkpoint(found[0].string());
  }
  if (!fs::exists(p)) fail(path, "no such file or directory");
  if (looks_like_tar(path)) return read_nemo(path);
  if (looks_like_torch_checkpoint(path)) return read_gigaam(path);
  fail(path, "neither a .nemo archive (tar), a GigaAM checkpoint (torch) nor a transformers directory");
}

std::shared_ptr<ConformerModel> load_conformer(const std::string& path) {
  ConformerCheckpoint c = read_conformer_checkpoint(path);
  return std::make_shared<ConformerModel>(std::move(c.config), std::move(c.weights), std::move(c.vocabulary));
}

}  // namespace xdna

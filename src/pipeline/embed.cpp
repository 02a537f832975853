#include "pipeline/embed.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "models/catalog.h"
#include "models/model_store.h"
#include "weights/baked.h"
#include "weights/source.h"
#include "weights/text_file.h"

namespace xdna {

namespace fs = std::filesystem;

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Cls: return "cls";
    case Pooling::Mean: return "mean";
    case Pooling::Max: return "max";
    case Pooling::MeanSqrtLen: return "mean_sqrt_len";
    case Pooling::LastToken: return "last_token";
  }
  return "?";
}

namespace {

// sentence-transformers' Pooling config: exactly one mode must be on.
Pooling pooling_from_st_config(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw std::runtime_error(origin + ": not a JSON object");
  if (j.contains("pooling_mode") && j["pooling_mode"].is_string()) {  // newer single-key form
    const std::string m = j["pooling_mode"];
    if (m == "cls") return Pooling::Cls;
    if (m == "mean") return Pooling::Mean;
    if (m == "max") return Pooling::Max;
    if (m == "mean_sqrt_len_tokens") return Pooling::MeanSqrtLen;
    if (m == "lasttoken") return Pooling::LastToken;
    throw std::runtime_error(origin + ": unsupported pooling_mode \"" + m + "\"");
  }
  const std::pair<const char*, Pooling> modes[] = {
      {"pooling_mode_cls_token", Pooling::Cls},
      {"pooling_mode_mean_tokens", Pooling::Mean},
      {"pooling_mode_max_tokens", Pooling::Max},
      {"pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen},
      {"pooling_mode_lasttoken", Pooling::LastToken},
  };
  std::optional<Pooling> chosen;
  for (const auto& [key, p] : modes)
    if (j.value(key, false)) {
      if (chosen) throw std::runtime_error(origin + ": several pooling modes at once are not supported");
      chosen = p;
    }
  if (j.value("pooling_mode_weightedmean_tokens", false))
    throw std::runtime_error(origin + ": weighted-mean pooling is not supported");
  if (!chosen) throw std::runtime_error(origin + ": no pooling mode is enabled");
  return *chosen;
}

}  // namespace

HeadConfig head_for_model(const ModelFileReader& files, const EncoderSpec& spec,
                          const nlohmann::json& config) {
  HeadConfig h;
  h.source = "default";
  if (spec.family == "modernbert" && config.value("classifier_pooling", std::string()) == "cls")
    h.pooling = Pooling::Cls;
  if (auto modules_text = files("modules.json")) {
    const nlohmann::json modules = parse_json(*modules_text, "modules.json");
    if (!modules.is_array()) throw std::runtime_error("modules.json: not a JSON array");
    h.source = "sentence-transformers";
    for (const auto& m : modules) {
      const std::string type = m.value("type", std::string());
      const std::string path = m.value("path", std::string());
      if (type.ends_with(".Pooling")) {
        const std::string name = (path.empty() ? std::string() : path + "/") + "config.json";
        if (auto cfg = files(name)) h.pooling = pooling_from_st_config(parse_json(*cfg, name), name);
      } else if (type.ends_with(".Normalize")) {
        h.normalize = true;
      } else if (!type.ends_with(".Transformer") && !type.ends_with(".models.Transformer")) {
        throw std::runtime_error("modules.json: module \"" + type + "\" is not supported");
      }
    }
  }
  if (auto st = files("sentence_bert_config.json")) {
    const nlohmann::json j = parse_json(*st, "sentence_bert_config.json");
    if (j.contains("max_seq_length") && j["max_seq_length"].is_number_unsigned())
      h.max_length = j["max_seq_length"].get<size_t>();
  }
  return h;
}

std::vector<float> pool_rows(const Tensor& hidden, int64_t r0, int64_t r1, Pooling pooling,
                             bool normalize) {
  if (hidden.dtype() != DType::F32 || hidden.ndim() != 2 || !hidden.is_contiguous())
    throw std::invalid_argument("pool_rows: hidden must be packed f32 [N, D], got " +
                                shape_str(hidden.shape()));
  if (r0 < 0 || r1 <= r0 || r1 > hidden.dim(0))
    throw std::invalid_argument("pool_rows: rows [" + std::to_string(r0) + ", " +
                                std::to_string(r1) + ") outside " + shape_str(hidden.shape()));
  const int64_t D = hidden.dim(1), T = r1 - r0;
  const float* x = hidden.data<float>();
  std::vector<float> out(D, 0.0f);
  const auto row = [&](int64_t r) { return x + r * D; };
  switch (pooling) {
    case Pooling::Cls: std::copy(row(r0), row(r0) + D, out.begin()); break;
    case Pooling::LastToken: std::copy(row(r1 - 1), row(r1 - 1) + D, out.begin()); break;
    case Pooling::Max:
      std::fill(out.begin(), out.end(), -std::numeric_limits<float>::infinity());
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t d = 0; d < D; ++d) out[d] = std::max(out[d], row(r)[d]);
      break;
    case Pooling::Mean:
    case Pooling::MeanSqrtLen: {
      std::vector<double> acc(D, 0.0);  // double: long inputs sum thousands of rows
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t d = 0; d < D; ++d) acc[d] += row(r)[d];
      const double div = pooling == Pooling::Mean ? double(T) : std::sqrt(double(T));
      for (int64_t d = 0; d < D; ++d) out[d] = static_cast<float>(acc[d] / div);
      break;
    }
  }
  if (normalize) {
    double ss = 0.0;
    for (float v : out) ss += double(v) * v;
    // sentence-transformers' Normalize: x / max(||x||, 1e-12).
    const double n = std::max(std::sqrt(ss), 1e-12);
    for (float& v : out) v = static_cast<float>(v / n);
  }
  return out;
}

nlohmann::json run_summary_json(const RunReport& report) {
  std::map<std::string, std::pair<int64_t, double>> by_backend;
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, double>> by_op;
  for (const OpRecord& r : report.ops) {
    auto& b = by_backend[r.backend];
    b.first += 1;
    b.second += r.ms;
    auto& o = by_op[{std::string(op_name(r.op)), r.backend}];
    o.first += 1;
    o.second += r.ms;
  }
  nlohmann::json backends = nlohmann::json::object(), ops = nlohmann::json::array();
  for (const auto& [name, v] : by_backend) backends[name] = {{"ops", v.first}, {"ms", v.second}};
  for (const auto& [k, v] : by_op)
    ops.push_back({{"op", k.first}, {"backend", k.second}, {"count", v.first}, {"ms", v.second}});
  return {{"backends", backends}, {"ops", ops}, {"fallbacks", report.fallbacks()}};
}

EmbeddingModel EmbeddingModel::load(const std::string& path_or_name, const std::string& store_dir) {
  std::string path = path_or_name;
  if (!fs::exists(path)) {
    if (!valid_model_name(path_or_name))
      throw std::runtime_error("model '" + path_or_name + "': no such file or directory");
    const ModelStore store(store_dir.empty() ? default_store_dir() : store_dir);
    if (!store.find(path_or_name)) {
      std::string msg = "model '" + path_or_name + "': not a path and not in the model store (" +
                        store.root() + ")";
      if (find_in_catalog(path_or_name)) msg += "; run `npu model pull " + path_or_name + "`";
      else msg += "; models that can be pulled: " + catalog_names();
      throw std::runtime_error(msg);
    }
    path = store.model_dir(path_or_name);
  }

  EmbeddingModel m;
  m.name_ = fs::path(path_or_name).filename().string();
  if (m.name_.empty()) m.name_ = path_or_name;
  m.path_ = path;
  std::shared_ptr<WeightSource> weights;
  nlohmann::json config;
  ModelFileReader files;
  if (fs::is_directory(path)) {
    weights = open_weights(path);
    const fs::path dir(path);
    auto cfg = read_text_file(dir / "config.json");
    if (!cfg) throw std::runtime_error(path + ": no config.json");
    config = parse_json(*cfg, (dir / "config.json").string());
    files = [dir](const std::string& name) { return read_text_file(dir / name); };
  } else {
    auto baked = std::make_shared<BakedModel>(path);
    if (baked->config().is_null())
      throw std::runtime_error(path + ": the baked file carries no config.json");
    config = baked->config();
    files = [baked](const std::string& name) -> std::optional<std::string> {
      if (!baked->has_file(name)) return std::nullopt;
      return std::string(baked->file(name));
    };
    weights = baked;
  }
  const std::string origin = fs::is_directory(path) ? (fs::path(path) / "config.json").string() : path;
  EncoderSpec spec = spec_from_config(config, origin);

  if (auto tj = files("tokenizer.json"); tj && spec.family != "esm")
    m.tokenizer_ = std::make_shared<Tokenizer>(Tokenizer::from_json(*tj));
  else if (auto vocab = files("vocab.txt"); vocab && spec.family == "esm")
    m.tokenizer_ = std::make_shared<Tokenizer>(Tokenizer::from_esm_vocab(*vocab));
  else
    throw std::runtime_error(path + ": no tokenizer (tokenizer.json, or vocab.txt for ESM)");

  m.head_ = head_for_model(files, spec, config);
  m.encoder_ = std::make_shared<Encoder>(std::move(spec), std::move(weights));
  if (m.head_.max_length == 0) m.head_.max_length = m.tokenizer_->file_max_length();
  const size_t model_max = static_cast<size_t>(m.encoder_->spec().max_positions);
  if (m.head_.max_length == 0 || m.head_.max_length > model_max) m.head_.max_length = model_max;
  return m;
}

size_t EmbeddingModel::max_length() const { return head_.max_length; }

size_t EmbeddingModel::effective_max_length(const EmbedOptions& options) const {
  const size_t model_max = static_cast<size_t>(spec().max_positions);
  if (options.max_length > model_max)
    throw std::invalid_argument("max length " + std::to_string(options.max_length) +
                                " exceeds the model's " + std::to_string(model_max) + " positions");
  return options.max_length ? options.max_length : head_.max_length;
}

EmbedResult EmbeddingModel::embed(const std::vector<std::string>& texts,
                                  const EmbedOptions& options) const {
  BatchOptions bo;
  bo.add_special_tokens = true;
  bo.max_length = effective_max_length(options);
  bo.pad_to_longest = false;
  std::vector<Encoding> enc = tokenizer_->encode_batch(texts, bo);
  std::vector<std::vector<int32_t>> ids, types;
  std::vector<size_t> original;
  for (Encoding& e : enc) {
    original.push_back(e.original_length);
    ids.push_back(std::move(e.ids));
    types.push_back(std::move(e.type_ids));
  }
  return run(std::move(ids), std::move(types), std::move(original), options);
}

EmbedResult EmbeddingModel::embed_ids(const std::vector<std::vector<int32_t>>& ids_in,
                                      const EmbedOptions& options) const {
  const size_t max_len = effective_max_length(options);
  std::vector<std::vector<int32_t>> ids, types;
  std::vector<size_t> original;
  for (const auto& seq : ids_in) {
    original.push_back(seq.size());
    for (int32_t id : seq)
      if (id < 0 || id >= spec().vocab_size)
        throw std::invalid_argument("token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                    std::to_string(spec().vocab_size) + ")");
    ids.emplace_back(seq.begin(), seq.begin() + std::min(seq.size(), max_len));
    types.emplace_back(ids.back().size(), 0);
  }
  return run(std::move(ids), std::move(types), std::move(original), options);
}

EmbedResult EmbeddingModel::run(std::vector<std::vector<int32_t>> ids,
                                std::vector<std::vector<int32_t>> types,
                                std::vector<size_t> original, const EmbedOptions& options) const {
  EmbedResult r;
  if (ids.empty()) return r;
  for (size_t b = 0; b < ids.size(); ++b)
    if (ids[b].empty())
      throw std::invalid_argument("input " + std::to_string(b) + " has no tokens");
  EncoderOutput out = encoder_->forward(ids, types, options.backends);
  for (size_t b = 0; b < ids.size(); ++b) {
    EmbeddingItem item;
    item.vector = pool_rows(out.hidden, out.offsets[b], out.offsets[b + 1], head_.pooling,
                            head_.normalize);
    item.tokens = ids[b].size();
    item.original_tokens = std::max(original[b], item.tokens);
    item.truncated = item.original_tokens > item.tokens;
    r.items.push_back(std::move(item));
  }
  r.report = std::move(out.report);
  return r;
}

}  // namespace xdna

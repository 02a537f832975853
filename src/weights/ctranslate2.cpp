#include "weights/ctranslate2.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/buffer.h"
#include "weights/baked.h"
#include "core/sha256.h"
#include "weights/text_file.h"

namespace xdna {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The versions this reader knows: 6 is what CTranslate2 writes today (its specs/model_spec.py,
// CURRENT_BINARY_VERSION); the layout in ctranslate2.h is version 6's.
constexpr uint32_t kCt2BinaryVersion = 6;

struct Ct2DType {
  const char* name;
  int size;
  std::optional<DType> engine;
};
// Indexed by the dtype byte of model.bin.
const Ct2DType kCt2DTypes[] = {
    {"float32", 4, DType::F32}, {"int8", 1, DType::I8},     {"int16", 2, std::nullopt},
    {"int32", 4, DType::I32},   {"float16", 2, DType::F16}, {"bfloat16", 2, DType::BF16},
};

// Sequential little-endian reads over the mapping; every read checks the bounds and reports the
// offset where the file ran out.
struct Reader {
  const std::byte* p;
  uint64_t size, pos = 0;
  const std::string& file;

  [[noreturn]] void fail(uint64_t at, const std::string& what) const {
    throw std::runtime_error(file + ": at byte offset " + std::to_string(at) + ": " + what);
  }
  void need(uint64_t n, const char* what) const {
    if (n > size - pos)
      fail(pos, std::string("file ends before ") + what + " (" + std::to_string(n) +
                    " bytes needed, " + std::to_string(size - pos) + " left; truncated?)");
  }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p + pos, sizeof(T));  // little-endian host (x86-64)
    pos += sizeof(T);
    return v;
  }
  // u16 length counting a terminating NUL, then the bytes and the NUL.
  std::string str(const char* what) {
    const uint64_t at = pos;
    const uint16_t n = get<uint16_t>(what);
    if (n == 0) fail(at, std::string(what) + " has length 0 (no terminating NUL)");
    need(n, what);
    const char* s = reinterpret_cast<const char*>(p + pos);
    if (s[n - 1] != '\0') fail(at, std::string(what) + " is not NUL-terminated");
    pos += n;
    return std::string(s, n - 1);
  }
};

class Ct2File final : public WeightSource {
 public:
  explicit Ct2File(const std::string& path) : path_(path) {
    buf_ = std::make_shared<MappedFile>(path);
    parse();
  }

  std::string format() const override { return "ctranslate2"; }
  std::string path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Tensor get(const std::string& name) const override {
    const TensorInfo& t = info(name);
    if (!t.dtype)
      throw std::runtime_error(path_ + ": variable '" + name + "': dtype " + t.file_dtype +
                               " is not supported by the engine");
    return Tensor::view(buf_, t.offset, t.shape, *t.dtype);
  }
  json metadata() const override { return meta_; }

  const std::string& spec() const { return spec_; }
  // The alias target of `name`, or "" if it is not an alias.
  std::string alias_of(const std::string& name) const {
    auto it = aliases_.find(name);
    return it == aliases_.end() ? "" : it->second;
  }
  // Rows [row0, row0 + rows) of a matrix or vector variable, as a view.
  Tensor rows(const std::string& name, int64_t row0, int64_t rows) const {
    Tensor t = get(name);
    const Shape& s = t.shape();
    if (s.empty() || row0 < 0 || row0 + rows > s[0])
      throw std::runtime_error(path_ + ": variable '" + name + "' " + shape_str(s) +
                               " has no rows [" + std::to_string(row0) + ", " +
                               std::to_string(row0 + rows) + ")");
    Shape out = s;
    out[0] = rows;
    const int64_t row_bytes = dtype_bytes(t.dtype(), shape_numel(s) / s[0]);
    return Tensor::view(buf_, info(name).offset + static_cast<uint64_t>(row0 * row_bytes), out,
                        t.dtype());
  }
  // A scalar integer attribute ("encoder/num_heads"), or nullopt if absent.
  std::optional<int64_t> scalar(const std::string& name) const {
    const TensorInfo* t = find(name);
    if (!t || !t->shape.empty()) return std::nullopt;
    const std::byte* b = buf_->data() + t->offset;
    if (t->file_dtype == "int8") return static_cast<int64_t>(static_cast<int8_t>(b[0]));
    if (t->file_dtype == "int16") {
      int16_t v;
      std::memcpy(&v, b, 2);
      return v;
    }
    if (t->file_dtype == "int32") {
      int32_t v;
      std::memcpy(&v, b, 4);
      return v;
    }
    return std::nullopt;
  }

 private:
  void parse() {
    Reader r{buf_->data(), buf_->size(), 0, path_};
    const uint32_t version = r.get<uint32_t>("the binary version");
    if (version != kCt2BinaryVersion)
      r.fail(0, "binary version " + std::to_string(version) + " is not supported (this reader "
                "handles CTranslate2 model.bin version " + std::to_string(kCt2BinaryVersion) +
                "; is this a CTranslate2 model?)");
    spec_ = r.str("the spec name");
    const uint32_t revision = r.get<uint32_t>("the spec revision");
    const uint64_t count_at = r.pos;
    const uint32_t count = r.get<uint32_t>("the variable count");
    // Each variable takes at least 9 bytes: a count beyond that is garbage, not a big model.
    if (count > (r.size - r.pos) / 9)
      r.fail(count_at, "variable count " + std::to_string(count) + " cannot fit in the file");
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t at = r.pos;
      TensorInfo t;
      t.name = r.str("a variable name");
      const uint8_t rank = r.get<uint8_t>("a variable rank");
      if (rank > 8) r.fail(at, "variable '" + t.name + "' has rank " + std::to_string(rank));
      uint64_t numel = 1;
      for (uint8_t d = 0; d < rank; ++d) {
        const uint32_t n = r.get<uint32_t>("a variable dimension");
        if (n && numel > (1ull << 40) / n)
          r.fail(at, "variable '" + t.name + "' is absurdly large");
        numel *= n;
        t.shape.push_back(n);
      }
      const uint64_t dtype_at = r.pos;
      const uint8_t dt = r.get<uint8_t>("a variable dtype");
      if (dt >= std::size(kCt2DTypes))
        r.fail(dtype_at, "variable '" + t.name + "' has unknown dtype id " + std::to_string(dt) +
                             " (known: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16)");
      const Ct2DType& d = kCt2DTypes[dt];
      const uint64_t bytes_at = r.pos;
      const uint32_t bytes = r.get<uint32_t>("a variable byte count");
      if (bytes != numel * static_cast<uint64_t>(d.size))
        r.fail(bytes_at, "variable '" + t.name + "' " + shape_str(t.shape) + " of " + d.name +
                             " needs " + std::to_string(numel * d.size) + " bytes but says " +
                             std::to_string(bytes));
      r.need(bytes, ("the data of variable '" + t.name + "'").c_str());
      t.file_dtype = d.name;
      t.dtype = d.engine;
      t.file = path_;
      t.offset = r.pos;
      t.bytes = bytes;
      r.pos += bytes;
      if (find(t.name)) r.fail(at, "variable '" + t.name + "' appears twice");
      infos_.push_back(std::move(t));
    }
    const uint32_t n_alias = r.get<uint32_t>("the alias count");
    json alias_json = json::object();
    std::vector<TensorInfo> alias_infos;
    for (uint32_t i = 0; i < n_alias; ++i) {
      const uint64_t at = r.pos;
      const std::string alias = r.str("an alias name");
      const std::string target = r.str("an alias target");
      const TensorInfo* t = find(target);
      if (!t) r.fail(at, "alias '" + alias + "' points at unknown variable '" + target + "'");
      TensorInfo a = *t;
      a.name = alias;
      alias_infos.push_back(std::move(a));
      aliases_[alias] = target;
      alias_json[alias] = target;
    }
    if (r.pos != r.size)
      r.fail(r.pos, std::to_string(r.size - r.pos) + " bytes follow the alias table");
    for (auto& a : alias_infos) infos_.push_back(std::move(a));
    meta_ = {{"binary_version", version}, {"spec", spec_}, {"revision", revision},
             {"aliases", alias_json}};
  }

  std::string path_, spec_;
  std::shared_ptr<Buffer> buf_;
  std::vector<TensorInfo> infos_;
  std::map<std::string, std::string> aliases_;
  json meta_;
};

// ---- Whisper import ----------------------------------------------------------------------------

// One tensor of the output: rows [row0, row0 + rows) of a CTranslate2 variable (rows < 0: all).
struct Piece {
  std::string hf, ct2;
  int64_t row0 = 0, rows = -1;
};

int64_t count_layers(const Ct2File& f, const std::string& prefix) {
  int64_t n = 0;
  while (f.contains(prefix + std::to_string(n) + "/ffn/linear_0/weight")) ++n;
  return n;
}

// The released Whisper sizes all use 64-wide heads; used only if model.bin lacks num_heads.
int64_t heads_for_width(int64_t d_model) {
  switch (d_model) {
    case 384: return 6;
    case 512: return 8;
    case 768: return 12;
    case 1024: return 16;
    case 1280: return 20;
  }
  return 0;
}

// The id of an added token of tokenizer.json, or -1.
int64_t token_id(const json& tok, const std::string& content) {
  if (!tok.is_object() || !tok.contains("added_tokens") || !tok["added_tokens"].is_array()) return -1;
  for (const json& t : tok["added_tokens"])
    if (t.is_object() && t.value("content", "") == content && t.contains("id") &&
        t["id"].is_number_integer())
      return t["id"].get<int64_t>();
  return -1;
}

}  // namespace

std::unique_ptr<WeightSource> open_ctranslate2(const std::string& model_bin) {
  return std::make_unique<Ct2File>(model_bin);
}

Ct2ImportSummary import_ctranslate2_whisper(const std::string& ct2_dir, const std::string& output,
                                            const std::string& config_out, Precision precision) {
  if (precision == Precision::Auto)
    throw std::invalid_argument("import: precision auto is not available for CTranslate2 models");
  const fs::path dir(ct2_dir);
  const fs::path bin = dir / "model.bin";
  if (!fs::is_regular_file(bin))
    throw std::runtime_error(ct2_dir + ": no model.bin (not a CTranslate2 model directory)");
  Ct2File f(bin.string());
  if (f.spec() != "WhisperSpec")
    throw std::runtime_error(bin.string() + ": spec is '" + f.spec() +
                             "', not WhisperSpec: only Whisper models can be imported");

  // A quantized model (--quantization int8*) stores int8 weights plus "weight_scale"s; reading
  // those as plain values would be silently wrong.
  for (const TensorInfo& t : f.tensors())
    if (t.name.ends_with("/weight_scale"))
      throw std::runtime_error(bin.string() + ": '" + t.name + "': quantized CTranslate2 models "
                               "are not supported; convert with --quantization float16 or float32");

  // Everything read before anything is written: config_out may be the CT2 config.json itself.
  json ct2_config = json::object();
  if (fs::exists(dir / "config.json")) {
    try {
      ct2_config = json::parse(read_required_text_file(dir / "config.json"));
    } catch (const json::parse_error& e) {
      throw std::runtime_error((dir / "config.json").string() + ": " + e.what());
    }
  }
  json tokenizer;
  std::vector<std::pair<std::string, std::string>> files;  // embedded in the baked file
  for (const char* name : {"tokenizer.json", "vocabulary.json", "vocabulary.txt",
                           "preprocessor_config.json"})
    if (fs::is_regular_file(dir / name)) files.emplace_back(name, read_required_text_file(dir / name));
  for (const auto& [name, text] : files)
    if (name == "tokenizer.json") tokenizer = json::parse(text, nullptr, false);

  // Shapes decide the sizes; model.bin stores the head counts as scalar attributes.
  const std::string p = bin.string() + ": ";
  auto need = [&](const std::string& n) -> const TensorInfo& {
    const TensorInfo* t = f.find(n);
    if (!t) throw std::runtime_error(p + "missing variable '" + n + "'");
    return *t;
  };
  const Shape conv1 = need("encoder/conv1/weight").shape;
  if (conv1.size() != 3) throw std::runtime_error(p + "encoder/conv1/weight is not 3-D");
  const int64_t d_model = conv1[0], n_mels = conv1[1];
  if (d_model <= 0 || n_mels <= 0) throw std::runtime_error(p + "encoder/conv1/weight is empty");
  const int64_t enc_layers = count_layers(f, "encoder/layer_");
  const int64_t dec_layers = count_layers(f, "decoder/layer_");
  if (enc_layers == 0 || dec_layers == 0) throw std::runtime_error(p + "no encoder or decoder layers");
  const int64_t vocab = need("decoder/embeddings/weight").shape.at(0);
  const int64_t n_audio = need("encoder/position_encodings/encodings").shape.at(0);
  const int64_t n_text = need("decoder/position_encodings/encodings").shape.at(0);
  const int64_t ffn = need("encoder/layer_0/ffn/linear_0/weight").shape.at(0);
  const int64_t dec_ffn = need("decoder/layer_0/ffn/linear_0/weight").shape.at(0);
  json heads_source = "model.bin";
  int64_t enc_heads = f.scalar("encoder/num_heads").value_or(0);
  int64_t dec_heads = f.scalar("decoder/num_heads").value_or(0);
  if (enc_heads <= 0 || dec_heads <= 0) {
    enc_heads = dec_heads = heads_for_width(d_model);
    heads_source = "inferred from d_model (released Whisper sizes)";
    if (!enc_heads)
      throw std::runtime_error(p + "model.bin stores no num_heads and d_model " +
                               std::to_string(d_model) + " is not a released Whisper size");
  }
  if (d_model % enc_heads || d_model % dec_heads)
    throw std::runtime_error(p + "d_model " + std::to_string(d_model) +
                             " is not a multiple of the head count");

  // The name map. Fused projections are split by rows: self-attention linear_0 is [q; k; v],
  // cross-attention linear_1 is [k; v]. The key bias CTranslate2 stores is the zeros its
  // converter filled in (transformers' k_proj has no bias; a key bias would cancel in the
  // softmax anyway), so it is dropped.
  std::vector<Piece> pieces;
  auto add = [&](const std::string& hf, const std::string& ct2, int64_t row0 = 0, int64_t rows = -1) {
    need(ct2);
    pieces.push_back({hf, ct2, row0, rows});
  };
  auto add_opt = [&](const std::string& hf, const std::string& ct2, int64_t row0 = 0,
                     int64_t rows = -1) {
    if (f.contains(ct2)) pieces.push_back({hf, ct2, row0, rows});
  };
  auto norm = [&](const std::string& hf, const std::string& ct2) {
    add(hf + ".weight", ct2 + "/gamma");
    add(hf + ".bias", ct2 + "/beta");
  };
  auto linear = [&](const std::string& hf, const std::string& ct2, int64_t row0 = 0,
                    int64_t rows = -1, bool bias = true) {
    add(hf + ".weight", ct2 + "/weight", row0, rows);
    if (bias) add_opt(hf + ".bias", ct2 + "/bias", row0, rows);
  };
  const int64_t d = d_model;
  // The fused projections must hold exactly the stacked matrices the split assumes.
  auto expect = [&](const std::string& n, const Shape& want) {
    if (need(n).shape != want)
      throw std::runtime_error(p + "variable '" + n + "' is " + shape_str(need(n).shape) +
                               ", expected " + shape_str(want) + " for d_model " +
                               std::to_string(d));
  };
  for (int64_t i = 0; i < enc_layers; ++i)
    expect("encoder/layer_" + std::to_string(i) + "/self_attention/linear_0/weight", {3 * d, d});
  for (int64_t i = 0; i < dec_layers; ++i) {
    expect("decoder/layer_" + std::to_string(i) + "/self_attention/linear_0/weight", {3 * d, d});
    expect("decoder/layer_" + std::to_string(i) + "/attention/linear_1/weight", {2 * d, d});
  }
  for (const char* c : {"conv1", "conv2"}) {
    add(std::string("model.encoder.") + c + ".weight", std::string("encoder/") + c + "/weight");
    add_opt(std::string("model.encoder.") + c + ".bias", std::string("encoder/") + c + "/bias");
  }
  add("model.encoder.embed_positions.weight", "encoder/position_encodings/encodings");
  // The blocks encoder and decoder layers share: self-attention (q, k, v are row ranges of the
  // fused linear_0) and the feed-forward, each with its layer norm.
  auto self_attention = [&](const std::string& hf, const std::string& ct) {
    linear(hf + "self_attn.q_proj", ct + "self_attention/linear_0", 0, d);
    linear(hf + "self_attn.k_proj", ct + "self_attention/linear_0", d, d, false);
    linear(hf + "self_attn.v_proj", ct + "self_attention/linear_0", 2 * d, d);
    linear(hf + "self_attn.out_proj", ct + "self_attention/linear_1");
    norm(hf + "self_attn_layer_norm", ct + "self_attention/layer_norm");
  };
  auto feed_forward = [&](const std::string& hf, const std::string& ct) {
    linear(hf + "fc1", ct + "ffn/linear_0");
    linear(hf + "fc2", ct + "ffn/linear_1");
    norm(hf + "final_layer_norm", ct + "ffn/layer_norm");
  };
  for (int64_t i = 0; i < enc_layers; ++i) {
    const std::string hf = "model.encoder.layers." + std::to_string(i) + ".";
    const std::string ct = "encoder/layer_" + std::to_string(i) + "/";
    self_attention(hf, ct);
    feed_forward(hf, ct);
  }
  norm("model.encoder.layer_norm", "encoder/layer_norm");
  add("model.decoder.embed_tokens.weight", "decoder/embeddings/weight");
  add("model.decoder.embed_positions.weight", "decoder/position_encodings/encodings");
  for (int64_t i = 0; i < dec_layers; ++i) {
    const std::string hf = "model.decoder.layers." + std::to_string(i) + ".";
    const std::string ct = "decoder/layer_" + std::to_string(i) + "/";
    self_attention(hf, ct);
    linear(hf + "encoder_attn.q_proj", ct + "attention/linear_0");
    linear(hf + "encoder_attn.k_proj", ct + "attention/linear_1", 0, d, false);
    linear(hf + "encoder_attn.v_proj", ct + "attention/linear_1", d, d);
    linear(hf + "encoder_attn.out_proj", ct + "attention/linear_2");
    norm(hf + "encoder_attn_layer_norm", ct + "attention/layer_norm");
    feed_forward(hf, ct);
  }
  norm("model.decoder.layer_norm", "decoder/layer_norm");
  // The output projection is tied to the token embeddings in every released model (an alias in
  // model.bin); an untied one becomes proj_out.weight.
  const bool tied = !f.contains("decoder/projection/weight") ||
                    f.alias_of("decoder/projection/weight") == "decoder/embeddings/weight";
  if (!tied) add("proj_out.weight", "decoder/projection/weight");

  // config.json in transformers' WhisperConfig terms, plus CTranslate2's decoding lists.
  json config = {{"architectures", {"WhisperForConditionalGeneration"}},
                 {"model_type", "whisper"},
                 {"d_model", d_model},
                 {"encoder_layers", enc_layers},
                 {"encoder_attention_heads", enc_heads},
                 {"decoder_layers", dec_layers},
                 {"decoder_attention_heads", dec_heads},
                 {"encoder_ffn_dim", ffn},
                 {"decoder_ffn_dim", dec_ffn},
                 {"num_mel_bins", n_mels},
                 {"vocab_size", vocab},
                 {"max_source_positions", n_audio},
                 {"max_target_positions", n_text},
                 {"activation_function", "gelu"},
                 {"scale_embedding", false},
                 {"tie_word_embeddings", tied},
                 {"num_heads_source", heads_source}};
  const int64_t eot = token_id(tokenizer, "<|endoftext|>");
  const int64_t sot = token_id(tokenizer, "<|startoftranscript|>");
  if (eot >= 0) config["eos_token_id"] = config["pad_token_id"] = eot;
  if (sot >= 0) config["bos_token_id"] = config["decoder_start_token_id"] = sot;
  for (const char* k : {"suppress_ids", "suppress_ids_begin", "lang_ids", "alignment_heads"})
    if (ct2_config.contains(k)) config[k] = ct2_config[k];
  if (ct2_config.contains("suppress_ids")) config["suppress_tokens"] = ct2_config["suppress_ids"];
  if (ct2_config.contains("suppress_ids_begin"))
    config["begin_suppress_tokens"] = ct2_config["suppress_ids_begin"];

  // The baked file.
  BakedWriter w(output);
  json src_files = json::array();
  for (const fs::path& sf : {bin, dir / "config.json"})
    if (fs::is_regular_file(sf))
      src_files.push_back({{"name", sf.filename().string()},
                           {"bytes", fs::file_size(sf)},
                           {"sha256", sha256_file(sf.string())}});
  json attributes = json::object();  // CTranslate2's scalar attributes (num_heads, pre_norm ...)
  for (const TensorInfo& t : f.tensors())
    if (t.shape.empty())
      if (auto v = f.scalar(t.name)) attributes[t.name] = *v;
  json meta = f.metadata();
  meta["attributes"] = attributes;
  w.set("source", {{"path", fs::absolute(dir).lexically_normal().string()},
                   {"format", "ctranslate2"},
                   {"files", src_files},
                   {"metadata", meta}});
  w.set("precision", precision_name(precision));
  w.set("group", 0);
  w.set("config", config);
  w.set("skipped", json::array());
  for (auto& [name, text] : files) w.add_file(name, std::move(text));

  struct Item {
    Tensor src;
    TensorPlan plan;
  };
  std::vector<Item> items;
  Ct2ImportSummary sum;
  sum.spec = f.spec();
  for (const Piece& pc : pieces) {
    const TensorInfo& ti = f.info(pc.ct2);
    Tensor src = pc.rows < 0 ? f.get(pc.ct2) : f.rows(pc.ct2, pc.row0, pc.rows);
    const TensorPlan plan = plan_tensor(pc.hf, src.shape(), src.dtype(), precision, 0);
    json entry = {{"name", pc.hf},       {"dtype", dtype_name(plan.dtype)},
                  {"shape", src.shape()}, {"precision", plan.precision},
                  {"layout", "row-major"}, {"source_dtype", ti.file_dtype},
                  {"source_name", pc.ct2}};
    if (pc.rows >= 0) entry["source_rows"] = {pc.row0, pc.row0 + pc.rows};
    if (plan.group) {
      entry["scales"] = pc.hf + ".scales";
      entry["group"] = plan.group;
    }
    w.add_tensor(entry);
    if (plan.group) {
      Shape ss = src.shape();
      ss.back() /= plan.group;
      w.add_tensor({{"name", pc.hf + ".scales"}, {"dtype", "f32"}, {"shape", ss},
                    {"precision", "f32"}, {"layout", "row-major"}, {"scales_of", pc.hf}});
    }
    items.push_back({std::move(src), plan});
  }
  w.begin();
  for (const Item& it : items) {
    const std::vector<float> scales = write_converted(it.src, it.plan, w);
    if (it.plan.group) w.write(scales.data(), scales.size() * sizeof(float));
    sum.bytes += static_cast<uint64_t>(it.src.nbytes());
    ++sum.tensors;
  }
  w.finish();

  const std::string tmp = config_out + ".tmp";
  {
    std::ofstream out(tmp);
    out << config.dump(2) << "\n";
    if (!out) throw std::runtime_error(tmp + ": cannot write");
  }
  fs::rename(tmp, config_out);
  return sum;
}

}  // namespace xdna

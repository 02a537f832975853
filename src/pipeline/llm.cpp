#include "pipeline/llm.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "models/catalog.h"
#include "models/model_store.h"
#include "weights/baked.h"
#include "weights/gguf.h"
#include "weights/source.h"
#include "weights/text_file.h"

namespace xdna {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Reads one of the model's files by name ("tokenizer.json"); nullopt when it has none.
using FileReader = std::function<std::optional<std::string>(const std::string&)>;

// tokenizer_config.json spells special tokens as a string or as an AddedToken object.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"];
  return "";
}

// eos_token_id in config.json / generation_config.json: an integer or a list of them.
void add_ids(const json& j, std::vector<int32_t>& out) {
  if (j.is_number_integer()) out.push_back(j.get<int32_t>());
  else if (j.is_array())
    for (const json& v : j)
      if (v.is_number_integer()) out.push_back(v.get<int32_t>());
}

void add_unique(std::vector<int32_t>& ids, int32_t id) {
  if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

// Tokens that end a chat turn in the covered families. Chat templates end the assistant's turn
// with one of these, but GGUF files (and some configs) name only the document-level EOS.
constexpr const char* kEndOfTurnTokens[] = {"<end_of_turn>", "<|im_end|>", "<|eot_id|>",
                                            "<|end|>", "<|endoftext|>"};

// Chat formats for GGUF files that carry no tokenizer.chat_template (the catalog's Gemma 3 270M
// has none), as llama.cpp falls back to built-in templates. Each renders what the family's own
// template renders for text conversations; used only when the vocabulary has the marker token.
struct FallbackTemplate {
  const char* family;
  const char* marker;
  const char* source;
};
constexpr FallbackTemplate kFallbackTemplates[] = {
    {"gemma3", "<start_of_turn>",
     // Gemma: a system message is folded into the first user turn; "assistant" is "model".
     "{{- bos_token -}}\n"
     "{%- if messages and messages[0]['role'] == 'system' -%}\n"
     "{%- set prefix = messages[0]['content'] + '\\n\\n' -%}{%- set turns = messages[1:] -%}\n"
     "{%- else -%}{%- set prefix = '' -%}{%- set turns = messages -%}{%- endif -%}\n"
     "{%- for m in turns -%}\n"
     "{{- '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + "
     "(prefix if loop.first else '') + (m['content'] | trim) + '<end_of_turn>\\n' -}}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"},
};

// A model directory without config.json: the store keeps a GGUF (or a baked file) in one.
std::optional<std::string> single_weight_file(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const std::string p = e.path().string();
    if (e.path().extension() == ".gguf") {
      found.push_back(p);
      continue;
    }
    std::ifstream in(p, std::ios::binary);
    char head[8] = {};
    if (in.read(head, 8) && std::equal(head, head + 8, kBakedMagic)) found.push_back(p);
  }
  if (found.size() == 1) return found[0];
  if (found.size() > 1)
    throw std::runtime_error(dir.string() + ": several weight files (" + found[0] + ", " + found[1] +
                             "); give the path of one");
  return std::nullopt;
}

// A baked model made from a GGUF carries the GGUF's metadata as JSON (manifest "source"), not a
// config.json. This rebuilds a tensor-less GGUF from it, so the spec and the tokenizer come from
// the same code as for the GGUF itself. Types: JSON strings, booleans, integers (i64), floats
// (f64) and arrays of one of them. `vocab_size` stands in for the token_embd.weight tensor.
std::shared_ptr<GgufFile> gguf_from_metadata(json meta, int64_t vocab_size, const std::string& name) {
  const std::string arch = meta.value("general.architecture", "");
  if (!meta.contains(arch + ".vocab_size") && vocab_size > 0) meta[arch + ".vocab_size"] = vocab_size;
  meta.erase("general.alignment");  // must be u32; a file without tensors needs none
  std::string out;
  const auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const auto u32 = [&](uint32_t v) { put(&v, 4); };
  const auto u64 = [&](uint64_t v) { put(&v, 8); };
  const auto str = [&](const std::string& v) { u64(v.size()); out += v; };
  const auto type_of = [](const json& v) -> uint32_t {  // GGUF value types
    if (v.is_string()) return 8;
    if (v.is_boolean()) return 7;
    if (v.is_number_float()) return 12;
    if (v.is_number()) return 11;
    if (v.is_array()) return 9;
    throw std::runtime_error("metadata value " + v.dump().substr(0, 40) + " has no GGUF type");
  };
  const auto scalar = [&](const json& v, uint32_t t) {
    if (t == 8) str(v.get<std::string>());
    else if (t == 7) out += char(v.get<bool>() ? 1 : 0);
    else if (t == 12) { const double d = v.get<double>(); put(&d, 8); }
    else if (t == 11) { const int64_t i = v.get<int64_t>(); put(&i, 8); }
    else throw std::runtime_error("nested metadata arrays are not supported");
  };
  out += "GGUF";
  u32(3);
  u64(0);  // tensors
  u64(meta.size());
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    str(it.key());
    const uint32_t t = type_of(it.value());
    u32(t);
    if (t != 9) {
      scalar(it.value(), t);
      continue;
    }
    uint32_t elem = it.value().empty() ? 11 : type_of(it.value()[0]);
    if (elem == 11)  // integers, unless some element is a float
      for (const json& x : it.value()) if (x.is_number_float()) elem = 12;
    u32(elem);
    u64(it.value().size());
    for (const json& x : it.value()) scalar(x, elem);
  }
  auto buf = std::make_shared<HeapBuffer>(out.size());
  std::copy(out.begin(), out.end(), reinterpret_cast<char*>(buf->data()));
  return std::make_shared<GgufFile>(buf, name);
}

}  // namespace

std::string resolve_model_path(const std::string& path_or_name, const std::string& store_dir) {
  if (fs::exists(path_or_name)) return path_or_name;
  if (!valid_model_name(path_or_name))
    throw std::runtime_error("model '" + path_or_name + "': no such file or directory");
  const ModelStore store(store_dir.empty() ? default_store_dir() : store_dir);
  const CatalogEntry* entry = find_in_catalog(path_or_name);
  for (const std::string& name : {path_or_name, entry ? entry->name : path_or_name})
    if (store.find(name)) return store.model_dir(name);
  std::string msg = "model '" + path_or_name + "': not a path and not in the model store (" +
                    store.root() + ")";
  if (entry) msg += "; run `npu model pull " + entry->name + "`";
  else msg += "; models that can be pulled: " + catalog_names();
  throw std::runtime_error(msg);
}

DType default_kv_dtype() { return DType::F16; }

std::unique_ptr<LanguageModel> LanguageModel::load(const std::string& path_in, const LoadOptions& opts) {
  if (!fs::exists(path_in)) throw std::runtime_error(path_in + ": no such file or directory");
  std::string path = path_in;
  std::unique_ptr<LanguageModel> m(new LanguageModel());
  m->name_ = fs::path(path_in).filename().string();
  if (m->name_.empty()) m->name_ = fs::path(path_in).parent_path().filename().string();

  if (fs::is_directory(path) && !fs::exists(fs::path(path) / "config.json")) {
    auto file = single_weight_file(path);
    if (!file)
      throw std::runtime_error(path + ": no config.json (Hugging Face checkpoint), .gguf file or baked file in it");
    path = *file;
  }

  std::shared_ptr<const WeightSource> weights;
  DecoderSpec spec;
  json tok_config = json::object(), gen_config = json::object();
  std::string template_source;
  bool hf_configs = true;  // HF directory or baked file: special tokens from the JSON configs

  const auto load_hf_files = [&](const FileReader& files, const std::string& where) {
    auto tj = files("tokenizer.json");
    if (!tj) throw std::runtime_error(where + ": no tokenizer.json");
    m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_json(*tj));
    if (auto tc = files("tokenizer_config.json")) tok_config = parse_json(*tc, where + "/tokenizer_config.json");
    if (auto gc = files("generation_config.json")) gen_config = parse_json(*gc, where + "/generation_config.json");
    // The template: tokenizer_config.json's chat_template (a string, or a list of named ones),
    // else the chat_template.jinja / chat_template.json files newer transformers write.
    if (tok_config.contains("chat_template")) {
      const json& t = tok_config["chat_template"];
      if (t.is_string()) template_source = t;
      else if (t.is_array())
        for (const json& named : t)
          if (named.value("name", std::string()) == "default") template_source = named.value("template", "");
    }
    if (template_source.empty())
      if (auto jinja = files("chat_template.jinja")) template_source = *jinja;
    if (template_source.empty())
      if (auto cj = files("chat_template.json"))
        template_source = parse_json(*cj, where + "/chat_template.json").value("chat_template", "");
    m->bos_token_ = token_text(tok_config.value("bos_token", json()));
    m->eos_token_ = token_text(tok_config.value("eos_token", json()));
  };

  // Spec, tokenizer, template and special tokens from GGUF metadata (a GGUF file, or a baked
  // model made from one).
  const auto load_gguf_meta = [&](const GgufFile& gguf) {
    spec = decoder_spec_from_gguf(gguf);
    m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(gguf));
    template_source = gguf.get_string("tokenizer.chat_template", "");
    const int64_t bos = gguf.get_int("tokenizer.ggml.bos_token_id", -1);
    const int64_t eos = gguf.get_int("tokenizer.ggml.eos_token_id", -1);
    if (bos >= 0) m->bos_token_ = m->tokenizer_->id_to_token(static_cast<int32_t>(bos));
    if (eos >= 0) m->eos_token_ = m->tokenizer_->id_to_token(static_cast<int32_t>(eos));
    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
      add_unique(m->stop_ids_, static_cast<int32_t>(gguf.get_int(key, -1)));
    // llama.cpp's default: SentencePiece vocabularies ("llama") add BOS, byte-level BPE ones not.
    bool add_bos = gguf.get_string("tokenizer.ggml.model", "") == "llama";
    if (gguf.has("tokenizer.ggml.add_bos_token")) add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token");
    m->add_bos_ = add_bos && bos >= 0;
    if (spec.bos_token_id < 0) spec.bos_token_id = static_cast<int32_t>(bos);
    hf_configs = false;
  };

  try {  // every failure below names the model's path
    if (fs::is_directory(path)) {  // Hugging Face checkpoint
      const fs::path dir(path);
      auto cfg = read_text_file(dir / "config.json");
      if (!cfg) throw std::runtime_error(path + ": cannot read config.json");
      spec = decoder_spec_from_config(parse_json(*cfg, (dir / "config.json").string()),
                                      (dir / "config.json").string());
      weights = open_weights(path);
      load_hf_files([dir](const std::string& n) { return read_text_file(dir / n); }, path);
    } else if (detect_weight_format(path) == WeightFormat::Gguf) {
      auto gguf = std::make_shared<GgufFile>(path);
      load_gguf_meta(*gguf);
      if (path == path_in) m->name_ = gguf->get_string("general.name", fs::path(path).stem().string());
      weights = gguf;
    } else if (detect_weight_format(path) == WeightFormat::Baked) {
      auto baked = std::make_shared<BakedModel>(path);
      const json& source = baked->manifest()["source"];
      if (baked->config().is_null() && source.value("format", "") == "gguf") {  // baked from a GGUF
        const TensorInfo* embd = baked->find("token_embd.weight");
        load_gguf_meta(*gguf_from_metadata(source.value("metadata", json::object()),
                                           embd ? embd->shape.at(0) : 0, path + " (source GGUF metadata)"));
        spec.tied_embeddings = !baked->contains("output.weight");
        weights = baked;
      } else {
        if (baked->config().is_null()) throw std::runtime_error(path + ": the baked file carries no config.json");
        spec = decoder_spec_from_config(baked->config(), path + " (config.json)");
        load_hf_files(
            [baked](const std::string& n) -> std::optional<std::string> {
              if (!baked->has_file(n)) return std::nullopt;
              return std::string(baked->file(n));
            },
            path);
        weights = baked;
      }
    } else {
      throw std::runtime_error(path + ": not a GGUF file, a baked file or a Hugging Face checkpoint directory");
    }
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(path) != std::string::npos) throw;
    throw std::runtime_error(path + ": " + e.what());
  }

  const Tokenizer& tok = *m->tokenizer_;
  if (hf_configs) {
    if (m->bos_token_.empty() && spec.bos_token_id >= 0) m->bos_token_ = tok.id_to_token(spec.bos_token_id);
    if (m->eos_token_.empty() && !spec.eos_token_ids.empty()) m->eos_token_ = tok.id_to_token(spec.eos_token_ids[0]);
    if (!m->bos_token_.empty() && tok.token_to_id(m->bos_token_) >= 0)
      spec.bos_token_id = tok.token_to_id(m->bos_token_);  // encode_prompt reads it from the spec
    std::vector<int32_t> gen_eos;
    add_ids(gen_config.value("eos_token_id", json()), gen_eos);
    for (int32_t id : gen_eos) add_unique(m->stop_ids_, id);
    const int32_t bos_id = spec.bos_token_id;
    if (tok_config.contains("add_bos_token") && tok_config["add_bos_token"].is_boolean()) {
      m->add_bos_ = tok_config["add_bos_token"].get<bool>() && bos_id >= 0;
    } else {  // no explicit flag: whatever the tokenizer's post-processor does
      const std::vector<int32_t> ids = tok.encode("a", true).ids;
      m->add_bos_ = bos_id >= 0 && !ids.empty() && ids[0] == bos_id;
    }
  }
  for (int32_t id : spec.eos_token_ids) add_unique(m->stop_ids_, id);
  if (!m->eos_token_.empty()) add_unique(m->stop_ids_, tok.token_to_id(m->eos_token_));
  for (const char* t : kEndOfTurnTokens) add_unique(m->stop_ids_, tok.token_to_id(t));

  if (template_source.empty() && !hf_configs)
    for (const FallbackTemplate& f : kFallbackTemplates)
      if (spec.family == f.family && tok.token_to_id(f.marker) >= 0) template_source = f.source;
  if (!template_source.empty()) {
    try {
      m->chat_template_ = std::make_unique<ChatTemplate>(ChatTemplate::parse(template_source));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": chat template: " + e.what());
    }
  }

  if (opts.context_length < 0)
    throw std::invalid_argument("context length " + std::to_string(opts.context_length) + " is negative");
  if (opts.context_length > spec.max_positions)
    throw std::invalid_argument("context length " + std::to_string(opts.context_length) +
                                " exceeds the model's maximum of " + std::to_string(spec.max_positions));
  m->decoder_ = std::make_unique<Decoder>(std::move(spec), std::move(weights));
  m->decoder_->set_kv_dtype(opts.kv_dtype.value_or(default_kv_dtype()));
  int64_t ctx = opts.context_length ? opts.context_length : m->decoder_->spec().max_positions;
  if (opts.memory_budget_bytes > 0) {
    const uint64_t per_token = std::max<uint64_t>(1, m->decoder_->kv_cache_bytes(1));
    ctx = std::min<int64_t>(ctx, static_cast<int64_t>(opts.memory_budget_bytes / per_token));
    if (ctx < 1)
      throw std::invalid_argument("a KV-cache budget of " + std::to_string(opts.memory_budget_bytes) +
                                  " bytes does not hold one token (" + std::to_string(per_token) + " bytes each)");
  }
  m->context_length_ = ctx;
  return m;
}

std::string LanguageModel::render_chat(const json& messages, bool add_generation_prompt) const {
  if (!chat_template_) throw std::runtime_error("model '" + name_ + "' has no chat template");
  return chat_template_->render_json(messages, add_generation_prompt,
                                     {{"bos_token", bos_token_}, {"eos_token", eos_token_}});
}

std::vector<int32_t> encode_prompt(const LanguageModel& model, const std::string& text) {
  std::vector<int32_t> ids = model.tokenizer().encode(text, /*add_special_tokens=*/false).ids;
  const int32_t bos = model.decoder().spec().bos_token_id;  // load() guarantees it with add_bos
  if (model.add_bos() && bos >= 0 && (ids.empty() || ids[0] != bos)) ids.insert(ids.begin(), bos);
  return ids;
}

}  // namespace xdna

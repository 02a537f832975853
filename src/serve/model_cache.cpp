#include "serve/model_cache.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "models/catalog.h"
#include "models/model_store.h"

namespace fs = std::filesystem;

namespace xdna::serve {

namespace {

// "matryoshka_dimensions": [768, 512, 256, ...] from the first of the model's config files that
// has it. A present but malformed key is an error, not a silent "unsupported".
std::vector<int64_t> read_matryoshka_dimensions(const std::string& dir, int64_t native) {
  for (const char* file : {"config_sentence_transformers.json", "config.json"}) {
    const fs::path path = fs::path(dir) / file;
    std::ifstream in(path);
    if (!in) continue;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("matryoshka_dimensions")) continue;
    std::vector<int64_t> dims;
    for (const auto& d : j["matryoshka_dimensions"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > native)
        throw std::runtime_error(path.string() + ": matryoshka_dimensions must be integers in [1, " +
                                 std::to_string(native) + "]");
      dims.push_back(d.get<int64_t>());
    }
    return dims;
  }
  return {};
}

// The families the encoder runs (models/spec.h); anything else in the store (LLMs, speech) is not
// an embedding model.
bool is_encoder_family(const std::string& family) {
  for (const char* f : {"bert", "roberta", "xlm-roberta", "modernbert", "esm"})
    if (family == f) return true;
  return false;
}

uint64_t files_size(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  return total;
}

uint64_t model_bytes(const Manifest& manifest, const std::string& dir) {
  return manifest.size_bytes ? manifest.size_bytes : files_size(dir);
}

}  // namespace

ModelCache::ModelCache(std::string store_root, uint64_t budget_bytes)
    : ModelCache(std::move(store_root), ModelCacheOptions{.budget_bytes = budget_bytes}) {}

ModelCache::ModelCache(std::string store_root, ModelCacheOptions opts)
    : root_(std::move(store_root)), opts_(opts) {}

// The resident model in `slot` of the entry named `name`, made the most recent; else, one load at
// a time, `load(manifest, dir)` makes the entry (or throws for the wrong family) and it joins the
// cache as the most recent. `accept_alias`: a catalog alias of a pulled model finds that model.
template <class T, class Load>
std::shared_ptr<T> ModelCache::get_or_load(const std::string& name, std::shared_ptr<T> Entry::*slot,
                                           bool accept_alias, Load load) {
  auto find_resident = [&]() -> std::shared_ptr<T> {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->name != name || !((*it).*slot)) continue;
      lru_.splice(lru_.begin(), lru_, it);  // now the most recent
      return (*it).*slot;
    }
    return nullptr;
  };
  if (auto m = find_resident()) return m;
  if (!valid_model_name(name)) return nullptr;  // never a path: requests name store models only

  std::lock_guard<std::mutex> load_lock(load_mu_);
  if (auto m = find_resident()) return m;  // another request loaded it while we waited
  const ModelStore store(root_);
  std::optional<Manifest> manifest = store.find(name);
  if (accept_alias && !manifest)  // an alias of a pulled model
    if (const CatalogEntry* e = find_in_catalog(name)) manifest = store.find(e->name);
  if (!manifest) return nullptr;
  Entry entry = load(*manifest, store.model_dir(accept_alias ? manifest->name : name));
  std::shared_ptr<T> model = entry.*slot;

  std::lock_guard<std::mutex> lock(mu_);
  lru_.push_front(std::move(entry));
  evict_over_budget();
  return model;
}

std::shared_ptr<CachedEmbeddingModel> ModelCache::get_embedding(const std::string& name) {
  const auto load = [&](const Manifest& manifest, const std::string& dir) {
    if (!is_encoder_family(manifest.family))
      throw std::invalid_argument("model '" + name + "' is a " + manifest.family +
                                  " model, not an embedding model");
    auto cached = std::make_shared<CachedEmbeddingModel>(EmbeddingModel::load(dir), model_bytes(manifest, dir),
                                                         opts_.max_queue);
    cached->matryoshka_dimensions = read_matryoshka_dimensions(dir, cached->model.dimensions());
    return Entry{name, cached, nullptr, nullptr, manifest.family};
  };
  return get_or_load(name, &Entry::model, /*accept_alias=*/false, load);
}

std::shared_ptr<CachedLanguageModel> ModelCache::get_llm(const std::string& name) {
  const auto load = [&](const Manifest& manifest, const std::string& dir) {
    if (is_encoder_family(manifest.family) || manifest.family == "whisper")
      throw std::invalid_argument("model '" + name + "' is a " + manifest.family +
                                  " model, not a text-generation model");
    LoadOptions opts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      opts = llm_options_;
    }
    auto cached = std::make_shared<CachedLanguageModel>(LanguageModel::load(dir, opts), model_bytes(manifest, dir),
                                                        opts_.max_batch, opts_.max_queue);
    cached->name = name;
    cached->metrics = opts_.metrics;
    return Entry{name, nullptr, cached, nullptr, manifest.family};
  };
  return get_or_load(name, &Entry::llm, /*accept_alias=*/true, load);
}

std::shared_ptr<CachedAsrModel> ModelCache::get_asr(const std::string& name) {
  const auto load = [&](const Manifest& manifest, const std::string& dir) {
    if (manifest.family != "whisper")
      throw std::invalid_argument("model '" + name + "' is a " + manifest.family +
                                  " model, not a speech-to-text (whisper) model");
    auto asr = std::make_shared<CachedAsrModel>(Transcriber::load(dir), model_bytes(manifest, dir), opts_.max_queue);
    return Entry{name, nullptr, nullptr, asr, manifest.family};
  };
  return get_or_load(name, &Entry::asr, /*accept_alias=*/true, load);
}

bool ModelCache::load(const std::string& name) {
  std::optional<Manifest> manifest = ModelStore(root_).find(name);
  if (!manifest)
    if (const CatalogEntry* e = find_in_catalog(name)) manifest = ModelStore(root_).find(e->name);
  if (!manifest) return false;
  if (is_encoder_family(manifest->family)) return get_embedding(manifest->name) != nullptr;
  if (manifest->family == "whisper") return get_asr(manifest->name) != nullptr;
  return get_llm(manifest->name) != nullptr;
}

std::vector<ResidentModel> ModelCache::resident_info() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ResidentModel> out;
  for (const Entry& e : lru_) {
    ResidentModel r;
    r.name = e.name;
    r.family = e.family;
    r.bytes = e.bytes();
    const RequestQueue& q = e.model ? e.model->queue : e.llm ? e.llm->queue : e.asr->queue;
    r.kind = e.model ? "embedding" : e.llm ? "llm" : "asr";
    r.running = q.running();
    r.waiting = q.waiting();
    r.loaded_unix_s = e.loaded_unix_s;
    r.last_used_unix_s = e.last_used_unix_s;
    out.push_back(std::move(r));
  }
  return out;
}

void ModelCache::set_llm_load_options(const LoadOptions& opts) {
  std::lock_guard<std::mutex> lock(mu_);
  llm_options_ = opts;
}

void ModelCache::evict_over_budget() {
  uint64_t total = 0;
  for (const Entry& e : lru_) total += e.bytes();
  while (total > opts_.budget_bytes && lru_.size() > 1) {
    total -= lru_.back().bytes();
    lru_.pop_back();
  }
}

std::vector<std::string> ModelCache::resident() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const Entry& e : lru_) names.push_back(e.name);
  return names;
}

uint64_t ModelCache::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = 0;
  for (const Entry& e : lru_) total += e.bytes();
  return total;
}

}  // namespace xdna::serve

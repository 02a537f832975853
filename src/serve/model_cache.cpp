#include "serve/model_cache.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "models/catalog.h"
#include "models/decoder_spec.h"
#include "models/model_store.h"
#include "weights/gguf.h"

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

// The model's files: what its weights take once mapped (every weight loader maps the file and
// views it in place; the few small tensors converted to f32 are norms and biases).
uint64_t model_bytes(const Manifest& manifest, const std::string& dir) {
  return manifest.size_bytes ? manifest.size_bytes : files_size(dir);
}

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string size_text(uint64_t bytes) { return format_size(bytes) + " (" + std::to_string(bytes) + " bytes)"; }

[[noreturn]] void throw_too_large(const std::string& name, uint64_t need, const std::string& parts, uint64_t budget,
                                  bool llm) {
  throw ModelTooLarge("model '" + name + "' needs " + size_text(need) + " for " + parts +
                      ", more than the server's memory budget of " + size_text(budget) +
                      "; raise it with `npu serve --max-memory`" + (llm ? " or lower --max-batch" : ""));
}

// An LLM's KV cache size per token and its maximum context, read from the checkpoint's
// config.json or GGUF metadata without touching its weights: what Decoder::kv_cache_bytes(1)
// will say (K and V, every layer, at kv_dtype or default_kv_dtype's size). {0, 0} when neither is
// there or it cannot be read (a baked file; LanguageModel::load reports a bad config itself).
struct KvShape {
  uint64_t per_token = 0;
  int64_t max_positions = 0;
};

KvShape peek_kv_shape(const std::string& dir, std::optional<DType> kv_dtype) {
  try {
    DecoderSpec spec;
    const fs::path config = fs::path(dir) / "config.json";
    if (fs::exists(config)) {
      std::ifstream in(config);
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) return {};
      spec = decoder_spec_from_config(j, config.string());
    } else {
      std::vector<fs::path> ggufs;
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".gguf") ggufs.push_back(e.path());
      if (ggufs.size() != 1) return {};
      spec = decoder_spec_from_gguf(GgufFile(ggufs[0].string()));  // maps the file, reads its header
    }
    const DType kv = kv_dtype.value_or(default_kv_dtype());
    return {static_cast<uint64_t>(spec.layers) * 2u * static_cast<uint64_t>(dtype_bytes(kv, spec.kv_heads * spec.head_dim)),
            spec.max_positions};
  } catch (const std::exception&) {
    return {};
  }
}

// Below this context (or the model's maximum, when smaller) an LLM is not worth loading: the
// budget is too small for it rather than its context.
constexpr int64_t kMinContext = 512;

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
      it->last_used_unix_s = unix_now_s();
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
  // `load` calls reserve() with its estimate before it allocates anything.
  Entry entry = load(*manifest, store.model_dir(accept_alias ? manifest->name : name));
  entry.loaded_unix_s = entry.last_used_unix_s = unix_now_s();
  std::shared_ptr<T> model = entry.*slot;

  std::lock_guard<std::mutex> lock(mu_);
  lru_.push_front(std::move(entry));
  return model;
}

std::shared_ptr<CachedEmbeddingModel> ModelCache::get_embedding(const std::string& name) {
  const auto load = [&](const Manifest& manifest, const std::string& dir) {
    if (!is_encoder_family(manifest.family))
      throw std::invalid_argument("model '" + name + "' is a " + manifest.family +
                                  " model, not an embedding model");
    const uint64_t bytes = model_bytes(manifest, dir);
    reserve(name, bytes, "its files", /*llm=*/false);
    auto cached = std::make_shared<CachedEmbeddingModel>(EmbeddingModel::load(dir), bytes, opts_.max_queue);
    cached->matryoshka_dimensions = read_matryoshka_dimensions(dir, cached->model.dimensions());
    return Entry{name, cached, nullptr, nullptr, manifest.family};
  };
  return get_or_load(name, &Entry::model, /*accept_alias=*/false, load);
}

std::shared_ptr<CachedLanguageModel> ModelCache::get_llm(const std::string& name) {
  const auto load = [&](const Manifest& manifest, const std::string& dir) {
    if (is_encoder_family(manifest.family) || is_speech_family(manifest.family) || is_vision_family(manifest.family))
      throw std::invalid_argument("model '" + name + "' is a " + manifest.family +
                                  " model, not a text-generation model");
    LoadOptions opts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      opts = llm_options_;
    }
    // Each of max_batch running generations preallocates a KV cache for the whole context, so the
    // context is capped where all of them fit beside the weights in the budget (and by the KV
    // budget of the load options).
    const uint64_t files = model_bytes(manifest, dir), budget = opts_.budget_bytes;
    const uint64_t batch = static_cast<uint64_t>(std::max(1, opts_.max_batch));
    if (files >= budget) throw_too_large(name, files, "its files alone", budget, false);
    const uint64_t room = (budget - files) / batch;  // KV bytes per sequence
    const uint64_t kv_budget = opts.memory_budget_bytes;
    if (opts.memory_budget_bytes == 0 || opts.memory_budget_bytes > room) opts.memory_budget_bytes = room;
    uint64_t need = files + batch * opts.memory_budget_bytes;  // when the shape is unknown
    std::string parts = "its files + KV caches of " + std::to_string(batch) + " sequences";
    if (const KvShape kv = peek_kv_shape(dir, opts.kv_dtype); kv.per_token > 0 && kv.max_positions > 0) {
      // The context the load options ask for, then cut to what the budget holds (not below
      // kMinContext: a budget that small is too small for the model).
      int64_t ctx = opts.context_length > 0 ? std::min(opts.context_length, kv.max_positions) : kv.max_positions;
      if (kv_budget > 0) ctx = std::min<int64_t>(ctx, static_cast<int64_t>(kv_budget / kv.per_token));
      const int64_t least = std::max<int64_t>(1, std::min(kMinContext, ctx));
      const int64_t fit = static_cast<int64_t>(room / kv.per_token);
      ctx = std::max<int64_t>(1, std::min(ctx, fit));
      opts.memory_budget_bytes = kv.per_token * static_cast<uint64_t>(ctx);  // the load gives exactly ctx
      if (fit < least)
        throw_too_large(name, files + batch * kv.per_token * static_cast<uint64_t>(least),
                        format_size(files) + " of files + " + format_size(batch * kv.per_token * least) +
                            " of KV caches (" + std::to_string(batch) + " sequences of " + std::to_string(least) +
                            " tokens)",
                        budget, true);
      need = files + batch * kv.per_token * static_cast<uint64_t>(ctx);
      parts = format_size(files) + " of files + KV caches of " + std::to_string(batch) + " sequences of " +
              std::to_string(ctx) + " tokens";
    }
    reserve(name, need, parts, /*llm=*/true);
    std::unique_ptr<LanguageModel> lm = LanguageModel::load(dir, opts);
    const uint64_t bytes = files + batch * lm->decoder().kv_cache_bytes(lm->context_length());
    auto cached = std::make_shared<CachedLanguageModel>(std::move(lm), bytes, opts_.max_batch, opts_.max_queue);
    cached->name = name;
    cached->metrics = opts_.metrics;
    return Entry{name, nullptr, cached, nullptr, manifest.family};
  };
  return get_or_load(name, &Entry::llm, /*accept_alias=*/true, load);
}

std::shared_ptr<CachedAsrModel> ModelCache::get_asr(const std::string& name) {
  const auto load = [&](const Manifest& manifest, const std::string& dir) {
    if (!is_speech_family(manifest.family))
      throw std::invalid_argument("model '" + name + "' is a " + manifest.family +
                                  " model, not a speech-to-text (whisper, parakeet, gigaam) model");
    const uint64_t bytes = model_bytes(manifest, dir);
    reserve(name, bytes, "its files", /*llm=*/false);
    auto asr = std::make_shared<CachedAsrModel>(SpeechModel::load(dir), bytes, opts_.max_queue);
    return Entry{name, nullptr, nullptr, asr, manifest.family};
  };
  return get_or_load(name, &Entry::asr, /*accept_alias=*/true, load);
}

std::shared_ptr<CachedVisionModel> ModelCache::get_vision(const std::string& name) {
  const auto load = [&](const Manifest& manifest, const std::string& dir) {
    if (!is_vision_family(manifest.family))
      throw std::invalid_argument("model '" + name + "' is a " + manifest.family + " model, not a vision model");
    const uint64_t bytes = model_bytes(manifest, dir);
    reserve(name, bytes, "its files", /*llm=*/false);
    Entry entry{name, nullptr, nullptr, nullptr, manifest.family};
    entry.vision = std::make_shared<CachedVisionModel>(ImageModel::load(dir), bytes, opts_.max_queue);
    return entry;
  };
  return get_or_load(name, &Entry::vision, /*accept_alias=*/false, load);
}

std::string ModelCache::family_of(const std::string& name) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : lru_)
      if (e.name == name) return e.family;
  }
  if (!valid_model_name(name)) return "";
  const std::optional<Manifest> manifest = ModelStore(root_).find(name);
  return manifest ? manifest->family : "";
}

bool ModelCache::load(const std::string& name) {
  if (!valid_model_name(name)) return false;
  std::optional<Manifest> manifest = ModelStore(root_).find(name);
  if (!manifest)
    if (const CatalogEntry* e = find_in_catalog(name)) manifest = ModelStore(root_).find(e->name);
  if (!manifest) return false;
  if (is_encoder_family(manifest->family)) return get_embedding(manifest->name) != nullptr;
  if (is_speech_family(manifest->family)) return get_asr(manifest->name) != nullptr;
  if (is_vision_family(manifest->family)) return get_vision(manifest->name) != nullptr;
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
    const RequestQueue& q = e.queue();
    r.device = "host";  // the server runs every model on the host backend for now
    r.kind = e.model ? "embedding" : e.llm ? "llm" : e.asr ? "asr" : "vision";
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

void ModelCache::set_llm_kv_dtype(std::optional<DType> kv_dtype) {
  std::lock_guard<std::mutex> lock(mu_);
  llm_options_.kv_dtype = kv_dtype;
}

void ModelCache::reserve(const std::string& name, uint64_t need, const std::string& parts, bool llm) {
  if (need > opts_.budget_bytes) throw_too_large(name, need, parts, opts_.budget_bytes, llm);
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(evicted_, [](const Evicted& e) { return e.queue.expired(); });
  uint64_t live = live_bytes_locked();
  for (auto it = lru_.end(); live + need > opts_.budget_bytes && it != lru_.begin();) {
    --it;
    if (it->busy()) continue;  // evicting it would free nothing until its requests finish
    live -= it->bytes();
    const std::shared_ptr<const RequestQueue> q =
        it->model ? std::shared_ptr<const RequestQueue>(it->model, &it->model->queue)
        : it->llm ? std::shared_ptr<const RequestQueue>(it->llm, &it->llm->queue)
        : it->asr ? std::shared_ptr<const RequestQueue>(it->asr, &it->asr->queue)
                  : std::shared_ptr<const RequestQueue>(it->vision, &it->vision->queue);
    evicted_.push_back({q, it->bytes()});
    it = lru_.erase(it);
  }
  if (live + need > opts_.budget_bytes)
    throw MemoryBusy("model '" + name + "' needs " + format_size(need) + ", but the models running requests now take " +
                         format_size(live) + " of the memory budget of " + format_size(opts_.budget_bytes) +
                         "; retry when they finish",
                     1);
}

uint64_t ModelCache::live_bytes_locked() const {
  uint64_t total = 0;
  for (const Entry& e : lru_) total += e.bytes();
  for (const Evicted& e : evicted_)
    if (const auto q = e.queue.lock(); q && q->running() + q->waiting() > 0) total += e.bytes;
  return total;
}

uint64_t ModelCache::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_locked();
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

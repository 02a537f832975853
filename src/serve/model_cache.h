// Models the server has loaded: each is loaded from the store on first use and then stays
// resident, up to a memory budget. Before a load the cache estimates what the model will take (an
// upper bound: its files, which are mapped, plus for an LLM the KV caches of max_batch sequences)
// and evicts least recently used idle models until that fits; a model too large for the whole
// budget is refused (ModelTooLarge) before anything of it is allocated. A request still running on
// an evicted model keeps it alive through its shared_ptr, and it is counted until it finishes.
// Thread-safe.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline/classify.h"
#include "pipeline/embed.h"
#include "pipeline/llm.h"
#include "pipeline/speech_model.h"
#include "pipeline/transcribe.h"
#include "serve/metrics.h"
#include "serve/request_queue.h"

namespace xdna::serve {

// How the cache sizes what it holds and queues (ServerOptions fills it).
struct ModelCacheOptions {
  uint64_t budget_bytes = 8ull << 30;  // resident models; least recently used evicted past it
  int max_queue = 16;                  // per model: requests that may wait (RequestQueue)
  int max_batch = 4;                   // per LLM: sequences decoded together
  Metrics* metrics = nullptr;          // where generations are counted (the server's); may be null
};

struct CachedEmbeddingModel {
  CachedEmbeddingModel(EmbeddingModel m, uint64_t bytes, int max_queue)
      : model(std::move(m)), bytes(bytes), queue(1, max_queue) {}
  EmbeddingModel model;
  uint64_t bytes = 0;  // what the model takes: its files in the store (weights dominate)
  // Output sizes the model was trained to be cut to (Matryoshka), from "matryoshka_dimensions" in
  // its config_sentence_transformers.json or config.json; empty: only the full size is valid.
  std::vector<int64_t> matryoshka_dimensions;
  // One forward pass at a time per model (each pass already uses every core), a bounded line.
  RequestQueue queue;
};

struct CachedLanguageModel {
  CachedLanguageModel(std::unique_ptr<LanguageModel> m, uint64_t bytes, int max_batch, int max_queue);
  ~CachedLanguageModel();
  std::string name;             // its store name (metrics label)
  Metrics* metrics = nullptr;   // generate() records each generation here when set
  std::unique_ptr<LanguageModel> model;
  // Its files in the store plus the KV caches of max_batch sequences at the context it was loaded
  // with (Decoder::kv_cache_bytes): each running generation preallocates one.
  uint64_t bytes = 0;
  // Up to max_batch generations run at once (their decode steps batched), a bounded line behind.
  RequestQueue queue;
  // Runs one generation, holding a Turn of `queue`, sharing decode steps with the model's other
  // running generations; the tokens are the same as xdna::generate's alone with the same seed.
  // on_piece returning false cancels it and frees its KV cache at once.
  GenerateResult generate(const GenerateRequest& request,
                          const std::function<bool(const GeneratedPiece&)>& on_piece = {});
  // What the scheduler has done (tests, /metrics): sequences holding a KV cache now, prompts
  // prefilled, batched decode steps and their rows (rows / steps = the mean batch size).
  struct SchedulerStats {
    int live_sequences = 0;
    int64_t prefills = 0, decode_steps = 0, decode_rows = 0;
  };
  SchedulerStats scheduler_stats() const;

 private:
  struct Scheduler;  // serve/llm_scheduler.cpp
  std::unique_ptr<Scheduler> scheduler_;
};

struct CachedAsrModel {
  CachedAsrModel(SpeechModel m, uint64_t bytes, int max_queue) : asr(std::move(m)), bytes(bytes), queue(1, max_queue) {}
  SpeechModel asr;  // Whisper or a conformer (Parakeet, GigaAM)
  uint64_t bytes = 0;
  RequestQueue queue;  // one transcription at a time (each uses every core)
};

// A vision model (ViT, DINOv2) for image embeddings: pipeline/classify.h.
struct CachedVisionModel {
  CachedVisionModel(ImageModel m, uint64_t bytes, int max_queue)
      : model(std::move(m)), bytes(bytes), queue(1, max_queue) {}
  ImageModel model;
  uint64_t bytes = 0;
  RequestQueue queue;  // one forward pass at a time (each uses every core)
};

// One resident model, for `npu model ls`, /api/ps and /metrics.
struct ResidentModel {
  std::string name;
  std::string kind;    // "embedding", "llm", "asr" or "vision"
  std::string family;  // the store manifest's ("bert", "qwen3", "whisper" ...)
  std::string device = "host";  // where its ops run: "host", "npu-sim", "npu"
  uint64_t bytes = 0;
  int running = 0, waiting = 0;  // its queue now
  double loaded_unix_s = 0, last_used_unix_s = 0;
};

// The model does not fit the memory budget even with every other model evicted; thrown before
// anything of it is allocated. The message states both sizes.
struct ModelTooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The model fits the budget, but not beside the models that are running requests now (those
// cannot be evicted): retry when they finish. A QueueFull, so fronts answer 429 with Retry-After.
struct MemoryBusy : QueueFull {
  using QueueFull::QueueFull;
};

class ModelCache {
 public:
  static constexpr uint64_t kDefaultBudgetBytes = 8ull << 30;

  explicit ModelCache(std::string store_root, uint64_t budget_bytes = kDefaultBudgetBytes);
  ModelCache(std::string store_root, ModelCacheOptions opts);

  // The model named `name` in the store, loading it when not resident. nullptr when the store has
  // no such model (or the name is not a valid store name); throws std::runtime_error when the
  // model is there but cannot be loaded, std::invalid_argument when it is not an embedding model.
  // Every get_* throws ModelTooLarge when the model cannot fit the budget at all, MemoryBusy when
  // it cannot fit beside the models running requests now.
  std::shared_ptr<CachedEmbeddingModel> get_embedding(const std::string& name);
  // The same for an LLM (the decoder families: llama, qwen3, gemma3 ...); std::invalid_argument
  // when the model is an embedding or speech model.
  std::shared_ptr<CachedLanguageModel> get_llm(const std::string& name);
  // KV cache budget of each LLM loaded from now on (LoadOptions::memory_budget_bytes).
  void set_llm_load_options(const LoadOptions& opts);
  // KV cache element type of each LLM loaded from now on (LoadOptions::kv_dtype; unset =
  // default_kv_dtype, f16).
  void set_llm_kv_dtype(std::optional<DType> kv_dtype);
  // The same for a speech-to-text model (is_speech_family: whisper, parakeet, gigaam); catalog
  // aliases of a pulled model are accepted. std::invalid_argument when the model is of another
  // family. SpeechModel::transcribe is const: callers serialise runs themselves (each already uses
  // every core).
  std::shared_ptr<CachedAsrModel> get_asr(const std::string& name);
  // The same for a vision model (is_vision_family: vit, dinov2 ...); std::invalid_argument otherwise.
  std::shared_ptr<CachedVisionModel> get_vision(const std::string& name);
  // The family in the store manifest of the model `name` ("" when the store has no such model):
  // lets a front pick get_embedding or get_vision without loading anything.
  std::string family_of(const std::string& name) const;
  // Any model in the store by its kind (the manifest's family): for --preload and `npu model
  // load`. Returns false when the store has no such model (or the name is not a store name);
  // throws ModelTooLarge, or std::runtime_error when its files cannot be loaded.
  bool load(const std::string& name);

  // Resident models, most recently used first, and their total size.
  std::vector<std::string> resident() const;
  uint64_t resident_bytes() const;
  // resident_bytes() plus evicted models still running or waiting on requests: what the budget is
  // checked against.
  uint64_t live_bytes() const;
  std::vector<ResidentModel> resident_info() const;
  const ModelCacheOptions& options() const { return opts_; }

 private:
  struct Entry {
    std::string name;
    std::shared_ptr<CachedEmbeddingModel> model;  // one of these three is set
    std::shared_ptr<CachedLanguageModel> llm;
    std::shared_ptr<CachedAsrModel> asr;
    std::string family;
    double loaded_unix_s = 0, last_used_unix_s = 0;
    std::shared_ptr<CachedVisionModel> vision = nullptr;  // or this one (last: the aggregate inits stay)
    uint64_t bytes() const { return model ? model->bytes : llm ? llm->bytes : asr ? asr->bytes : vision->bytes; }
    const RequestQueue& queue() const {
      return model ? model->queue : llm ? llm->queue : asr ? asr->queue : vision->queue;
    }
    bool busy() const { return queue().running() + queue().waiting() > 0; }
  };
  // An evicted model, counted while requests still hold it (weak: it frees when they finish).
  struct Evicted {
    std::weak_ptr<const RequestQueue> queue;  // aliases the model: expired once it is freed
    uint64_t bytes = 0;
  };
  // Before a load allocates anything: throws ModelTooLarge when `need` bytes (made of `parts`, for
  // the message) exceed the budget, else evicts idle models, least recently used first, until they
  // fit beside the live ones; throws MemoryBusy when models running requests leave too little.
  void reserve(const std::string& name, uint64_t need, const std::string& parts, bool llm);
  uint64_t live_bytes_locked() const;
  // What the get_* share: the resident lookup, the load under load_mu_, the LRU insert (model_cache.cpp).
  template <class T, class Load>
  std::shared_ptr<T> get_or_load(const std::string& name, std::shared_ptr<T> Entry::*slot, bool accept_alias,
                                 Load load);

  std::string root_;
  ModelCacheOptions opts_;
  mutable std::mutex mu_;  // guards lru_ and evicted_
  std::mutex load_mu_;     // one load at a time, so two first requests do not load twice
  std::list<Entry> lru_;   // most recent first
  std::vector<Evicted> evicted_;
  LoadOptions llm_options_{.context_length = 0, .memory_budget_bytes = 1ull << 30, .kv_dtype = std::nullopt};
};

}  // namespace xdna::serve

// Models the server has loaded: each is loaded from the store on first use and then stays
// resident, up to a memory budget; past it the least recently used models are dropped (a request
// still running on a dropped model keeps it alive through its shared_ptr). Thread-safe.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline/embed.h"
#include "pipeline/llm.h"
#include "pipeline/transcribe.h"

namespace xdna::serve {

struct CachedEmbeddingModel {
  EmbeddingModel model;
  uint64_t bytes = 0;  // what the model takes: its files in the store (weights dominate)
  // Output sizes the model was trained to be cut to (Matryoshka), from "matryoshka_dimensions" in
  // its config_sentence_transformers.json or config.json; empty: only the full size is valid.
  std::vector<int64_t> matryoshka_dimensions;
  // One forward pass at a time per model: each pass already uses every core.
  std::mutex run_mutex;
};

struct CachedLanguageModel {
  std::unique_ptr<LanguageModel> model;
  uint64_t bytes = 0;  // its files in the store
  // One generation at a time per model: each step already uses every core.
  std::mutex run_mutex;
};

class ModelCache {
 public:
  static constexpr uint64_t kDefaultBudgetBytes = 8ull << 30;

  explicit ModelCache(std::string store_root, uint64_t budget_bytes = kDefaultBudgetBytes);

  // The model named `name` in the store, loading it when not resident. nullptr when the store has
  // no such model (or the name is not a valid store name); throws std::runtime_error when the
  // model is there but cannot be loaded, std::invalid_argument when it is not an embedding model.
  std::shared_ptr<CachedEmbeddingModel> get_embedding(const std::string& name);
  // The same for an LLM (the decoder families: llama, qwen3, gemma3 ...); std::invalid_argument
  // when the model is an embedding or speech model.
  std::shared_ptr<CachedLanguageModel> get_llm(const std::string& name);
  // KV cache budget of each LLM loaded from now on (LoadOptions::memory_budget_bytes).
  void set_llm_load_options(const LoadOptions& opts);
  // The same for a speech-to-text model (family "whisper"); catalog aliases of a pulled model are
  // accepted. std::invalid_argument when the model is of another family. Transcriber::transcribe
  // is const: callers serialise runs themselves (each already uses every core).
  std::shared_ptr<const Transcriber> get_asr(const std::string& name);

  // Resident models, most recently used first, and their total size.
  std::vector<std::string> resident() const;
  uint64_t resident_bytes() const;

 private:
  struct Entry {
    std::string name;
    std::shared_ptr<CachedEmbeddingModel> model;  // one of these three is set
    std::shared_ptr<CachedLanguageModel> llm;
    std::shared_ptr<const Transcriber> asr;
    uint64_t asr_bytes = 0;  // the ASR model's files in the store
    uint64_t bytes() const { return model ? model->bytes : llm ? llm->bytes : asr_bytes; }
  };
  void evict_over_budget();  // with mu_ held; keeps the most recent entry whatever its size
  // What the get_* share: the resident lookup, the load under load_mu_, the LRU insert (model_cache.cpp).
  template <class T, class Load>
  std::shared_ptr<T> get_or_load(const std::string& name, std::shared_ptr<T> Entry::*slot, bool accept_alias,
                                 Load load);

  std::string root_;
  uint64_t budget_;
  mutable std::mutex mu_;  // guards lru_
  std::mutex load_mu_;     // one load at a time, so two first requests do not load twice
  std::list<Entry> lru_;   // most recent first
  LoadOptions llm_options_{.context_length = 0, .memory_budget_bytes = 1ull << 30};
};

}  // namespace xdna::serve

// CachedLanguageModel::generate. For now one generation at a time (a mutex); continuous batching
// of decode steps across sequences replaces this.
#include <mutex>

#include "serve/model_cache.h"

namespace xdna::serve {

struct CachedLanguageModel::Scheduler {
  std::mutex run_mutex;
};

CachedLanguageModel::CachedLanguageModel(std::unique_ptr<LanguageModel> m, uint64_t bytes, int max_batch, int max_queue)
    : model(std::move(m)), bytes(bytes), queue(max_batch, max_queue), scheduler_(std::make_unique<Scheduler>()) {}

CachedLanguageModel::~CachedLanguageModel() = default;

GenerateResult CachedLanguageModel::generate(const GenerateRequest& request,
                                             const std::function<bool(const GeneratedPiece&)>& on_piece) {
  std::lock_guard<std::mutex> lock(scheduler_->run_mutex);
  return xdna::generate(*model, request, on_piece);
}

}  // namespace xdna::serve

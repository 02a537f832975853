// What the server counts for GET /metrics (Prometheus text format, docs/api.md): requests by
// endpoint and status, latency histograms, generated tokens and their rate, queue depth and the
// loaded models with their device. One instance per Server; thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace xdna {
struct NpuInfo;
}

namespace xdna::serve {

class ModelCache;

class Metrics {
 public:
  // One finished HTTP request: `endpoint` is the route path ("/v1/embeddings"), not the raw
  // target, so label sets stay bounded; unknown paths count under "other".
  void record_request(const std::string& endpoint, int status, double seconds);
  // Tokens one generation read and wrote, and the seconds its decode took (tokens/s).
  void record_generation(const std::string& model, int64_t prompt_tokens, int64_t completion_tokens,
                         double decode_seconds);
  // The whole exposition: counters above, plus gauges read now from `models` (loaded models,
  // their bytes, device, queue depth) and `npu`.
  std::string render_prometheus(const ModelCache& models, const NpuInfo& npu) const;

 private:
  struct Histogram {
    std::vector<uint64_t> buckets;  // cumulative counts per upper bound (kLatencyBounds)
    uint64_t count = 0;
    double sum = 0;
  };
  struct TokenCounts {
    uint64_t prompt = 0, completion = 0;
    double decode_seconds = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  std::map<std::string, Histogram> latency_;                  // endpoint -> histogram
  std::map<std::string, TokenCounts> tokens_;                 // model -> counts
};

}  // namespace xdna::serve

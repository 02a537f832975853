// The HTTP server behind `npu serve`. A Server owns the httplib::Server, the model store and a
// snapshot of the machine (NPU probe); each API front registers its routes with one add_*_routes
// function, so a later front (chat completions, embeddings, audio) is one new function + file.
// Every response carries `X-Npu-Backend`, and every error is an OpenAI-style error object.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "models/model_store.h"
#include "serve/metrics.h"
#include "serve/model_cache.h"
#include "serve/system_info.h"

namespace xdna::serve {

inline constexpr const char* kEngineVersion = XDNA_VERSION;  // project(VERSION) in CMakeLists.txt

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless the user asks otherwise
  int port = 11435;                // 0: any free port (tests)
  std::string store_dir;           // empty: default_store_dir()
  uint64_t model_budget_bytes = ModelCache::kDefaultBudgetBytes;  // resident models, LRU past it
  uint64_t max_audio_bytes = 25ull << 20;  // an uploaded audio file (OpenAI's limit: 25 MB)
  uint64_t max_body_bytes = 16ull << 20;   // a JSON request body (413 past it)
  std::string api_key;                     // non-empty: every endpoint wants "Authorization: Bearer KEY"
  int max_queue = 16;                      // per model: requests that may wait beyond those running (429 past it)
  int max_batch = 4;                       // LLM sequences decoded together (continuous batching)
  double request_timeout_s = 600;          // a request's wait for its model plus its run
  std::vector<std::string> preload;        // store models loaded before the server listens
  bool log_requests = true;                // one JSON line per request on stderr, with its request id
  // Where those lines go (one call per line, no newline); empty: stderr. Tests capture them here.
  std::function<void(const std::string&)> log_sink;
};

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

class Server {
 public:
  explicit Server(ServerOptions opts);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (the chosen one when options().port is 0).
  // Throws when the address cannot be bound.
  int bind();
  // Serves until stop(); call bind() first.
  void run();
  // Thread-safe; makes run() return (also when called just before run() starts).
  void stop();
  bool is_running() const { return http_.is_running(); }
  int port() const { return port_; }

  // Route registration for the fronts. `pattern` is an httplib regex (e.g. "/v1/models/(.+)").
  void get(const std::string& pattern, Handler h);
  void post(const std::string& pattern, Handler h);

  const ServerOptions& options() const { return opts_; }
  ModelStore& store() { return store_; }
  ModelCache& models() { return models_; }  // loaded on first use, shared by the fronts
  const NpuInfo& npu() const { return npu_; }
  Metrics& metrics() { return metrics_; }
  // When a request that starts now must be done (options().request_timeout_s).
  std::chrono::steady_clock::time_point deadline() const;

 private:
  void on_error(const httplib::Request& req, httplib::Response& res);
  // After each response is sent (httplib's logger): metrics and the request log line.
  void on_response_sent(const httplib::Request& req, const httplib::Response& res);
  // The registered pattern `path` matches, first registered first; "other" when none does.
  const std::string& endpoint_of(const std::string& path) const;
  // True when no API key is set or the request carries "Authorization: Bearer <the key>".
  bool authorized(const httplib::Request& req) const;
  Handler guarded(Handler h);  // `h` behind the API key check

  ServerOptions opts_;
  ModelStore store_;
  Metrics metrics_;  // before models_, which points at it
  ModelCache models_;
  NpuInfo npu_;
  httplib::Server http_;
  int port_ = 0;
  std::atomic<bool> stop_requested_{false};
  std::map<std::string, std::set<std::string>> methods_;  // pattern -> methods, for 405 + Allow
  std::vector<std::pair<std::string, std::regex>> routes_;  // compiled patterns in registration order (405, metrics label)
};

// Response helpers shared by all fronts.
void send_json(httplib::Response& res, const nlohmann::json& body, int status = 200);
// OpenAI error object: {"error":{"message","type","param","code"}}.
void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type = "invalid_request_error", const std::string& code = "",
                const std::string& param = "");

// The backends a run's ops went to ("host", "npu-sim (modelled)" ...), comma-separated; "host"
// when the report is empty. set_backend_header puts it in X-Npu-Backend (replacing the default).
std::string backends_of(const RunReport& report);
void set_backend_header(httplib::Response& res, const std::string& backends);

// A full model queue: 429 with Retry-After; a request that waited past its deadline: 503.
void send_queue_full(httplib::Response& res, const QueueFull& e);
void send_queue_timeout(httplib::Response& res, const QueueTimeout& e);

// An OpenAI route's handler that answers every failure as an OpenAI error object: an ApiError as
// it says, a full queue 429, a timeout 503, a model over --max-memory 507, and an
// std::invalid_argument from the pipeline (input it refused) 400 "invalid_value" with `param`.
Handler openai_route(Handler handler, std::string invalid_value_param = "");

// Fronts.
void add_system_routes(Server& s);  // GET /health
void add_model_routes(Server& s);   // GET /v1/models, GET /v1/models/{id}
void add_embedding_routes(Server& s);  // POST /v1/embeddings
void add_completion_routes(Server& s);  // POST /v1/chat/completions, POST /v1/completions
void add_audio_routes(Server& s);  // POST /v1/audio/transcriptions, POST /v1/audio/translations
// Ollama's API: /api/tags, /api/show, /api/ps, /api/version, /api/generate, /api/chat, /api/embed
void add_ollama_routes(Server& s);
void add_metrics_routes(Server& s);  // GET /metrics

// Server with every front registered.
void add_all_routes(Server& s);

// Runs `s` (already bound) until SIGINT or SIGTERM, then shuts it down cleanly. Blocks the two
// signals in the calling thread first so the server's worker threads never see them.
void run_until_signal(Server& s);

}  // namespace xdna::serve

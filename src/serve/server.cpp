#include "serve/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <regex>
#include <set>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "serve/openai_requests.h"

namespace xdna::serve {

using nlohmann::json;

namespace {

// When the request this worker thread is answering started: set by the pre-routing handler (after
// the headers are read), used by the logger once its response is sent. httplib answers a whole
// request on one thread; a request refused before routing (bad request line) has no start.
thread_local std::chrono::steady_clock::time_point t_request_start;
thread_local bool t_request_started = false;

// A client's X-Request-Id is echoed when it is 1..64 characters of [A-Za-z0-9._-] (so it is safe
// in headers and logs), else replaced by one of ours.
bool is_sane_request_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

std::string new_request_id() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "req_%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() >> 32));
  return buf;
}

// Compares every byte whatever the first difference, so the time taken says nothing about the key.
bool equal_constant_time(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// "2026-11-30T12:34:56.789Z"
std::string iso8601_utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];  // room for any int the compiler imagines in each field
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

void send_unauthorized(httplib::Response& res, bool key_sent) {
  res.set_header("WWW-Authenticate", "Bearer");
  send_error(res, 401,
             key_sent ? "Incorrect API key provided. Send the key the server was started with (--api-key) as "
                        "'Authorization: Bearer KEY'."
                      : "You didn't provide an API key. This server requires 'Authorization: Bearer KEY' (--api-key).",
             "invalid_request_error", "invalid_api_key");
}

}  // namespace

void send_json(httplib::Response& res, const json& body, int status) {
  res.status = status;
  // Replace, not throw: an error message may quote client bytes (a model name, a file name, a
  // URL path) that are not UTF-8, and that must stay a 4xx, not become a 500.
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& code, const std::string& param) {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  const json error = {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}};
  send_json(res, {{"error", error}}, status);
}

std::string backends_of(const RunReport& report) {
  std::set<std::string> names;
  for (const OpRecord& op : report.ops) names.insert(op.backend);
  std::string out;
  for (const std::string& b : names) out += (out.empty() ? "" : ",") + b;
  return out.empty() ? "host" : out;
}

void set_backend_header(httplib::Response& res, const std::string& backends) {
  res.headers.erase("X-Npu-Backend");  // replaces the server's default, which says "host"
  res.set_header("X-Npu-Backend", backends);
}

void send_queue_full(httplib::Response& res, const QueueFull& e) {
  res.set_header("Retry-After", std::to_string(e.retry_after_s));
  send_error(res, 429, e.what(), "rate_limit_error", "queue_full");
}

void send_queue_timeout(httplib::Response& res, const QueueTimeout& e) {
  send_error(res, 503, e.what(), "server_error", "timeout");
}

Handler openai_route(Handler handler, std::string invalid_value_param) {
  return [handler = std::move(handler), param = std::move(invalid_value_param)](const httplib::Request& req,
                                                                                 httplib::Response& res) {
    try {
      handler(req, res);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), "invalid_request_error", e.code, e.param);
    } catch (const QueueFull& e) {
      send_queue_full(res, e);
    } catch (const QueueTimeout& e) {
      send_queue_timeout(res, e);
    } catch (const ModelTooLarge& e) {
      send_error(res, 507, e.what(), "server_error", "insufficient_memory", "model");
    } catch (const std::invalid_argument& e) {
      send_error(res, 400, e.what(), "invalid_request_error", "invalid_value", param);
    }
  };
}

std::chrono::steady_clock::time_point Server::deadline() const {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(opts_.request_timeout_s));
}

Server::Server(ServerOptions opts)
    : opts_(std::move(opts)),
      store_(opts_.store_dir.empty() ? default_store_dir() : opts_.store_dir),
      models_(store_.root(), ModelCacheOptions{.budget_bytes = opts_.model_budget_bytes,
                                               .max_queue = opts_.max_queue,
                                               .max_batch = opts_.max_batch,
                                               .metrics = &metrics_}),
      npu_(probe_npu()) {
  http_.set_default_headers({{"X-Npu-Backend", "host"}});
  // No request body is read past this (413 before it is read): the largest a front accepts, an
  // audio upload, plus room for the other multipart fields.
  // A JSON body may be allowed more (--max-body past --max-audio).
  http_.set_payload_max_length(std::max<uint64_t>(opts_.max_body_bytes, opts_.max_audio_bytes + (1u << 20)));
  // httplib's default also sets SO_REUSEPORT, which lets a second `npu serve` share the port and
  // take half the connections; SO_REUSEADDR alone still allows a quick restart.
  http_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Called for every status >= 400, including routing misses (404) and bad request lines (400).
  http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) { on_error(req, res); });
  // Request accounting: the clock starts once the headers are read; every response gets a request
  // id just before its headers go out; metrics and the log line follow once it is sent.
  http_.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_request_start = std::chrono::steady_clock::now();
    t_request_started = true;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_.set_post_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.has_header("X-Request-Id")) return;
    const std::string theirs = req.get_header_value("X-Request-Id");
    res.set_header("X-Request-Id", is_sane_request_id(theirs) ? theirs : new_request_id());
  });
  http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) { on_response_sent(req, res); });
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, what, "server_error");
  });
}

void Server::on_error(const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return;  // a handler already wrote its own error
  // Without the key, a routing miss is a 401 too, so the server's routes stay private.
  if ((res.status == 404 || res.status == 405) && !authorized(req)) {
    send_unauthorized(res, req.has_header("Authorization"));
    return;
  }
  if (res.status == 404) {
    // Known path, other method: 405 with the methods that exist, as HTTP asks.
    std::string allow;
    for (const auto& [pattern, re] : routes_) {  // compiled once, at registration
      if (!std::regex_match(req.path, re)) continue;
      for (const std::string& m : methods_.at(pattern)) allow += (allow.empty() ? "" : ", ") + m;
    }
    if (!allow.empty()) {
      res.set_header("Allow", allow);
      send_error(res, 405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")",
                 "invalid_request_error", "method_not_allowed");
      return;
    }
    send_error(res, 404, "no route for " + req.method + " " + req.path, "invalid_request_error", "not_found");
    return;
  }
  const int status = res.status;
  if (status == 413) {
    const uint64_t limit = std::max<uint64_t>(opts_.max_body_bytes, opts_.max_audio_bytes + (1u << 20));
    send_error(res, 413,
               "request body is over the server's limit of " + std::to_string(limit) + " bytes (JSON bodies: at most " +
                   std::to_string(opts_.max_body_bytes) + " bytes, --max-body; audio uploads: at most " +
                   std::to_string(opts_.max_audio_bytes) + " bytes, --max-audio)",
               "invalid_request_error", "request_too_large");
    return;
  }
  send_error(res, status, "request rejected with HTTP status " + std::to_string(status),
             status >= 500 ? "server_error" : "invalid_request_error");
}

bool Server::authorized(const httplib::Request& req) const {
  if (opts_.api_key.empty()) return true;
  // "Bearer" is case-insensitive (RFC 6750 / 9110); the key is not.
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view scheme = "bearer ";
  if (header.size() < scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != scheme[i]) return false;
  size_t start = scheme.size();
  while (start < header.size() && header[start] == ' ') ++start;
  size_t end = header.size();
  while (end > start && (header[end - 1] == ' ' || header[end - 1] == '\t')) --end;
  return equal_constant_time(header.substr(start, end - start), opts_.api_key);
}

Handler Server::guarded(Handler h) {
  return [this, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return send_unauthorized(res, req.has_header("Authorization"));
    h(req, res);
  };
}

const std::string& Server::endpoint_of(const std::string& path) const {
  static const std::string other = "other";
  for (const auto& [pattern, re] : routes_)
    if (std::regex_match(path, re)) return pattern;
  return other;
}

void Server::on_response_sent(const httplib::Request& req, const httplib::Response& res) {
  double seconds = 0;
  if (t_request_started)
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_request_start).count();
  t_request_started = false;
  metrics_.record_request(endpoint_of(req.path), res.status, seconds);
  if (!opts_.log_requests) return;

  // Sizes as declared (Content-Length) or read; a streamed response has none until it ends.
  int64_t bytes_in = static_cast<int64_t>(req.body.size());
  for (const auto& [name, file] : req.files) bytes_in += static_cast<int64_t>(file.content.size());
  if (req.has_header("Content-Length")) bytes_in = req.get_header_value<uint64_t>("Content-Length");
  nlohmann::ordered_json bytes_out = nullptr;
  if (!res.body.empty()) bytes_out = res.body.size();
  else if (res.content_length_ > 0 || !res.content_provider_) bytes_out = res.content_length_;
  // Never the body, the query or any header but the backend: they may hold the key or user data.
  const nlohmann::ordered_json line = {{"ts", iso8601_utc_now()},  // fields in this order
                     {"request_id", res.get_header_value("X-Request-Id")},
                     {"method", req.method},
                     {"path", req.path},
                     {"status", res.status},
                     {"ms", std::round(seconds * 1e6) / 1e3},
                     {"bytes_in", bytes_in},
                     {"bytes_out", bytes_out},
                     {"backend", res.get_header_value("X-Npu-Backend")}};
  const std::string text = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  if (opts_.log_sink) opts_.log_sink(text);
  else std::fprintf(stderr, "%s\n", text.c_str());  // one call: lines from worker threads never interleave
}

int Server::bind() {
  if (opts_.port == 0) {
    port_ = http_.bind_to_any_port(opts_.host);
    if (port_ < 0) throw std::runtime_error("cannot bind " + opts_.host + " on any port");
  } else {
    if (opts_.port < 0 || opts_.port > 65535)
      throw std::runtime_error("port " + std::to_string(opts_.port) + " is out of range (0..65535)");
    if (!http_.bind_to_port(opts_.host, opts_.port))
      throw std::runtime_error("cannot bind " + opts_.host + ":" + std::to_string(opts_.port) +
                               " (address in use, or not an address of this machine)");
    port_ = opts_.port;
  }
  return port_;
}

void Server::run() {
  if (stop_requested_) return;
  http_.listen_after_bind();
}

void Server::stop() {
  stop_requested_ = true;
  http_.stop();
}

void Server::get(const std::string& pattern, Handler h) {
  if (!methods_.count(pattern)) routes_.emplace_back(pattern, std::regex(pattern));
  methods_[pattern].insert("GET");
  http_.Get(pattern, guarded(std::move(h)));
}

void Server::post(const std::string& pattern, Handler h) {
  if (!methods_.count(pattern)) routes_.emplace_back(pattern, std::regex(pattern));
  methods_[pattern].insert("POST");
  http_.Post(pattern, guarded(std::move(h)));
}

void add_all_routes(Server& s) {
  add_system_routes(s);
  add_model_routes(s);
  add_embedding_routes(s);
  add_completion_routes(s);
  add_audio_routes(s);
  add_ollama_routes(s);
  add_metrics_routes(s);
}

void run_until_signal(Server& s) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by every thread started from here on

  std::atomic<bool> done{false}, signalled{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&set, &sig);
    signalled = true;
    if (done) return;  // woken by the shutdown below, not by the user
    std::fprintf(stderr, "npu serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    // stop() before listen has started is remembered by run(); the loop covers the instant
    // between that check and httplib marking itself running.
    while (!done) {
      s.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  s.run();
  done = true;
  if (!signalled) pthread_kill(watcher.native_handle(), SIGTERM);  // wake sigwait
  watcher.join();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

}  // namespace xdna::serve

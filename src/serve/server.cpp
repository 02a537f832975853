#include "serve/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <stdexcept>
#include <thread>

namespace xdna::serve {

using nlohmann::json;

void send_json(httplib::Response& res, const json& body, int status) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& code, const std::string& param) {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  const json error = {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}};
  send_json(res, {{"error", error}}, status);
}

void send_queue_full(httplib::Response& res, const QueueFull& e) {
  res.set_header("Retry-After", std::to_string(e.retry_after_s));
  send_error(res, 429, e.what(), "rate_limit_error", "queue_full");
}

void send_queue_timeout(httplib::Response& res, const QueueTimeout& e) {
  send_error(res, 503, e.what(), "server_error", "timeout");
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
  http_.set_payload_max_length(opts_.max_audio_bytes + (1u << 20));
  // httplib's default also sets SO_REUSEPORT, which lets a second `npu serve` share the port and
  // take half the connections; SO_REUSEADDR alone still allows a quick restart.
  http_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Called for every status >= 400, including routing misses (404) and bad request lines (400).
  http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) { on_error(req, res); });
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
  if (res.status == 404) {
    // Known path, other method: 405 with the methods that exist, as HTTP asks.
    std::string allow;
    for (const auto& [pattern, methods] : methods_) {
      if (!std::regex_match(req.path, std::regex(pattern))) continue;
      for (const std::string& m : methods) allow += (allow.empty() ? "" : ", ") + m;
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
    send_error(res, 413, "request body is over the server's limit of " + std::to_string(opts_.max_audio_bytes + (1u << 20)) +
               " bytes", "invalid_request_error", "request_too_large");
    return;
  }
  send_error(res, status, "request rejected with HTTP status " + std::to_string(status),
             status >= 500 ? "server_error" : "invalid_request_error");
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
  methods_[pattern].insert("GET");
  http_.Get(pattern, std::move(h));
}

void Server::post(const std::string& pattern, Handler h) {
  methods_[pattern].insert("POST");
  http_.Post(pattern, std::move(h));
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

// The CLI's model commands as clients of a running `npu serve`: the model stays loaded once, in
// the server, and the NPU has one user. Where the server is: --server URL, else the config's
// `host`/`port`, else http://127.0.0.1:11435. A quick GET /health says whether it is up;
// --no-server, or no server answering at the configured/default address, runs the command
// in-process instead; a --server URL that does not answer is an error.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

namespace xdna::cli {

struct ServerFlags {
  std::string url;         // --server; empty: config, then the default
  bool no_server = false;  // --no-server
};

void add_server_options(CLI::App* cmd, ServerFlags& f);

// An error the server answered with (OpenAI error object), or a broken connection (status 0).
struct ServerError : std::runtime_error {
  ServerError(int status, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), code(std::move(code)) {}
  int status;
  std::string code;
};

class ServerClient {
 public:
  // The server `flags` point at when it answers GET /health, else nullopt (and, when `why` is
  // given, what the probe got: no connection, an error status, not an `npu serve`). Never throws
  // for a server that is down; throws std::invalid_argument for a malformed --server URL.
  static std::optional<ServerClient> find(const ServerFlags& flags, std::string* why = nullptr);

  const std::string& url() const { return url_; }
  // POST a JSON body; the parsed JSON reply (and its headers when asked). Throws ServerError for
  // an error status.
  nlohmann::json post_json(const std::string& path, const nlohmann::json& body,
                           httplib::Headers* reply_headers = nullptr);
  // POST a JSON body with "stream": true; calls on_event with each server-sent event's JSON.
  void post_stream(const std::string& path, const nlohmann::json& body,
                   const std::function<void(const nlohmann::json&)>& on_event);
  // POST multipart/form-data; the reply body as text.
  std::string post_form(const std::string& path, const httplib::MultipartFormDataItems& items);
  // GET a JSON endpoint (e.g. /api/ps).
  nlohmann::json get_json(const std::string& path);

 private:
  explicit ServerClient(std::string url);
  std::string url_;
  std::shared_ptr<httplib::Client> http_;
};

// The server URL `flags` resolve to (flag > config host/port > default).
std::string server_url(const ServerFlags& flags);

// A local file or directory: the server only serves its own store, so such models run here.
bool is_local_model_path(const std::string& model);

// What a model command does with `flags`: the server when it is up and `in_process_reason` is empty;
// else nullopt, saying on stderr (as "npu CMD: ...") why a server that is up was not used. A server
// named by --server that does not answer is an error (std::runtime_error saying what the probe
// got), not a silent switch to running in this process.
std::optional<ServerClient> choose_server(const char* cmd, const ServerFlags& flags, const std::string& model,
                                          const std::string& in_process_reason);

}  // namespace xdna::cli

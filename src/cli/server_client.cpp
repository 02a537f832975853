#include "cli/server_client.h"

#include <cstdio>
#include <filesystem>

#include "cli/config.h"

namespace xdna::cli {

namespace {

constexpr int kDefaultPort = 11435;

// The server's error object {"error": {"message", "code"}} as a ServerError (any body: its text).
ServerError error_from(const std::string& url, int status, const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const nlohmann::json& e = j["error"];
    const std::string message = e.value("message", std::string(body));
    const std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "";
    return ServerError(status, code, "the server at " + url + ": " + message);
  }
  return ServerError(status, "", "the server at " + url + " answered " + std::to_string(status) + ": " + body);
}

ServerError connection_error(const std::string& url, httplib::Error e) {
  return ServerError(0, "", "lost the server at " + url + ": " + httplib::to_string(e));
}

}  // namespace

void add_server_options(CLI::App* cmd, ServerFlags& f) {
  cmd->add_option("--server", f.url,
                  "A running `npu serve` to use (default: config host/port, then http://127.0.0.1:11435)");
  cmd->add_flag("--no-server", f.no_server, "Run in this process even when a server is up");
}

std::string server_url(const ServerFlags& flags) {
  if (!flags.url.empty()) return flags.url.find("://") == std::string::npos ? "http://" + flags.url : flags.url;
  const Config& c = global_config();
  std::string host = c.host.value_or("127.0.0.1");
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";  // bound to every address: reach it on loopback
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(c.port.value_or(kDefaultPort));
}

bool is_local_model_path(const std::string& model) {
  std::error_code ec;
  return model.find('/') != std::string::npos || std::filesystem::exists(model, ec);
}

// The config's `api_key`, sent as the server's --api-key wants it.
static void authorize(httplib::Client& c) {
  if (const auto& key = global_config().api_key; key && !key->empty()) c.set_bearer_token_auth(key->c_str());
}

ServerClient::ServerClient(std::string url) : url_(std::move(url)), http_(std::make_shared<httplib::Client>(url_)) {
  authorize(*http_);
  http_->set_read_timeout(3600, 0);  // a long generation or transcription
  http_->set_write_timeout(60, 0);
}

std::optional<ServerClient> ServerClient::find(const ServerFlags& flags, std::string* why) {
  const std::string url = server_url(flags);
  if (url.rfind("http://", 0) != 0)
    throw std::invalid_argument("--server " + url + ": only http://HOST:PORT is supported");
  httplib::Client probe(url);
  if (!probe.is_valid()) throw std::invalid_argument("--server " + url + ": not a valid http://HOST:PORT");
  probe.set_connection_timeout(0, 300000);  // 0.3 s: nothing listening on loopback fails at once
  probe.set_read_timeout(2, 0);
  authorize(probe);
  const httplib::Result r = probe.Get("/health");
  auto fail = [&](const std::string& reason) -> std::optional<ServerClient> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (!r)
    return fail(r.error() == httplib::Error::Connection ? std::string("could not connect")
                                                        : "no reply: " + httplib::to_string(r.error()));
  if (r->status == 401) return fail("GET /health answered 401: the server wants an API key (config `api_key`)");
  if (r->status != 200) return fail("GET /health answered " + std::to_string(r->status));
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.is_object() || j.value("status", std::string()) != "ok") return fail("not an `npu serve` (/health)");
  return ServerClient(url);
}

nlohmann::json ServerClient::post_json(const std::string& path, const nlohmann::json& body,
                                       httplib::Headers* reply_headers) {
  const httplib::Result r = http_->Post(path.c_str(), body.dump(), "application/json");
  if (!r) throw connection_error(url_, r.error());
  if (r->status != 200) throw error_from(url_, r->status, r->body);
  if (reply_headers) *reply_headers = r->headers;
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) throw ServerError(r->status, "", "the server's reply to " + path + " is not JSON");
  return j;
}

void ServerClient::post_stream(const std::string& path, const nlohmann::json& body,
                               const std::function<void(const nlohmann::json&)>& on_event) {
  nlohmann::json b = body;
  b["stream"] = true;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = b.dump();
  req.set_header("Content-Type", "application/json");
  int status = 0;
  std::string pending, error_body;
  std::optional<ServerError> failed;  // thrown after send(): never through httplib's frames
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    pending.append(data, n);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {  // one event per blank line
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") continue;
      const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) failed = ServerError(status, "", "the server sent an event that is not JSON: " + payload);
      else if (j.contains("error")) failed = error_from(url_, 500, payload);
      if (failed) return false;
      on_event(j);
    }
    return true;
  };
  const httplib::Result r = http_->send(req);
  if (failed) throw *failed;
  if (!r) throw connection_error(url_, r.error());
  if (status != 200) throw error_from(url_, status, error_body.empty() ? r->body : error_body);
}

std::string ServerClient::post_form(const std::string& path, const httplib::MultipartFormDataItems& items) {
  const httplib::Result r = http_->Post(path.c_str(), items);
  if (!r) throw connection_error(url_, r.error());
  if (r->status != 200) throw error_from(url_, r->status, r->body);
  return r->body;
}

nlohmann::json ServerClient::get_json(const std::string& path) {
  const httplib::Result r = http_->Get(path.c_str());
  if (!r) throw connection_error(url_, r.error());
  if (r->status != 200) throw error_from(url_, r->status, r->body);
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) throw ServerError(r->status, "", "the server's reply to " + path + " is not JSON");
  return j;
}

std::optional<ServerClient> choose_server(const char* cmd, const ServerFlags& flags, const std::string& model,
                                          const std::string& in_process_reason) {
  if (flags.no_server) return std::nullopt;
  std::string why;
  std::optional<ServerClient> server = ServerClient::find(flags, &why);
  if (!server) {
    if (!flags.url.empty())  // asked for by name: running elsewhere would be a silent fallback
      throw std::runtime_error("--server " + server_url(flags) + ": no server answering (" + why +
                               "); start one with `npu serve`, or pass --no-server to run in this process");
    return std::nullopt;
  }
  std::string reason = in_process_reason;
  if (reason.empty() && is_local_model_path(model))
    reason = "the model '" + model + "' is a local path (the server serves its own store)";
  if (!reason.empty()) {
    std::fprintf(stderr, "npu %s: running in-process, not on the server at %s: %s\n", cmd, server->url().c_str(),
                 reason.c_str());
    return std::nullopt;
  }
  return server;
}

}  // namespace xdna::cli

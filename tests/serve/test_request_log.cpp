// Request ids and the structured request log: every response carries X-Request-Id (the client's
// when sane, else a fresh one), and each request yields one JSON line with its id, method, path,
// status, duration, sizes and backend, captured here through ServerOptions::log_sink.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

// The lines a server logged, safe to read while its worker threads append.
struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;

  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mu);
      lines.push_back(line);
    };
  }
  // The server logs after the response is sent, so wait (briefly) for the n-th line.
  std::vector<std::string> wait_for(size_t n) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard lock(mu);
        if (lines.size() >= n) return lines;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard lock(mu);
    return lines;
  }
};

// The log line whose request_id is `id`, parsed; fails the test when there is not exactly one.
json line_for(const std::vector<std::string>& lines, const std::string& id) {
  json found;
  int n = 0;
  for (const std::string& l : lines) {
    const json j = json::parse(l);  // throws (fails) when a line is not JSON
    if (j["request_id"] == id) found = j, ++n;
  }
  EXPECT_EQ(n, 1) << "log lines for request " << id;
  return found;
}

class RequestLogTest : public ::testing::Test {
 protected:
  void start(std::string api_key = "", bool log = true) {
    dir_ = test::make_temp_dir("xdna-reqlog");
    serve::ServerOptions opts;
    opts.store_dir = (dir_ / "models").string();
    opts.log_requests = log;
    opts.log_sink = log_.sink();
    opts.api_key = std::move(api_key);
    opts.max_body_bytes = 4 << 10;
    opts.max_audio_bytes = 8 << 10;
    server_ = std::make_unique<test::RunningServer>(opts);
    ASSERT_TRUE(server_->is_running());
    client_ = server_->client();
  }
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  LogCapture log_;
  fs::path dir_;
  std::unique_ptr<test::RunningServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(RequestLogTest, SaneClientIdsAreEchoedOthersReplaced) {
  start();
  auto echoed = client_->Get("/health", {{"X-Request-Id", "trace.ABC_123-x"}});
  ASSERT_TRUE(echoed);
  EXPECT_EQ(echoed->get_header_value("X-Request-Id"), "trace.ABC_123-x");
  EXPECT_EQ(client_->Get("/health", {{"X-Request-Id", std::string(64, 'a')}})->get_header_value("X-Request-Id"),
            std::string(64, 'a'));
  // Too long, a space, a quote, empty: replaced by a generated id.
  for (const std::string& bad : {std::string(65, 'a'), std::string("has space"), std::string("q\"uote"), std::string()}) {
    auto r = client_->Get("/health", {{"X-Request-Id", bad}});
    ASSERT_TRUE(r);
    const std::string id = r->get_header_value("X-Request-Id");
    EXPECT_NE(id, bad);
    EXPECT_TRUE(std::regex_match(id, std::regex("req_[0-9a-f]{24}"))) << id;
  }
}

TEST_F(RequestLogTest, GeneratedIdsAreUniqueOnEveryResponse) {
  start();
  std::set<std::string> ids;
  const int n = 40;
  for (int i = 0; i < n; ++i) {
    // Successes, a routing miss, a wrong method: all get an id.
    auto r = i % 3 == 0 ? client_->Get("/health") : i % 3 == 1 ? client_->Get("/nope") : client_->Post("/health", "", "text/plain");
    ASSERT_TRUE(r);
    const std::string id = r->get_header_value("X-Request-Id");
    EXPECT_TRUE(std::regex_match(id, std::regex("req_[0-9a-f]{24}"))) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), size_t(n));
}

TEST_F(RequestLogTest, OneJsonLinePerRequestWithItsFields) {
  start();
  auto ok = client_->Get("/health", {{"X-Request-Id", "ok-1"}});
  const std::string body = R"({"model": "no-such-model", "input": "hi"})";
  auto missing = client_->Post("/v1/embeddings", {{"X-Request-Id", "emb-1"}}, body, "application/json");
  auto miss = client_->Get("/no/route?secret=1", {{"X-Request-Id", "miss-1"}});
  ASSERT_TRUE(ok && missing && miss);
  const auto lines = log_.wait_for(3);
  ASSERT_EQ(lines.size(), 3u);

  const json a = line_for(lines, "ok-1");
  EXPECT_EQ(a["method"], "GET");
  EXPECT_EQ(a["path"], "/health");
  EXPECT_EQ(a["status"], 200);
  EXPECT_EQ(a["backend"], "host");
  EXPECT_EQ(a["bytes_in"], 0);
  EXPECT_EQ(a["bytes_out"], ok->body.size());
  EXPECT_TRUE(a["ms"].is_number());
  EXPECT_GE(a["ms"].get<double>(), 0.0);
  EXPECT_LT(a["ms"].get<double>(), 60000.0);
  EXPECT_TRUE(std::regex_match(a["ts"].get<std::string>(),
                               std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)")))
      << a["ts"];

  const json b = line_for(lines, "emb-1");
  EXPECT_EQ(b["method"], "POST");
  EXPECT_EQ(b["path"], "/v1/embeddings");
  EXPECT_EQ(b["status"], missing->status);
  EXPECT_EQ(b["status"], 404);
  EXPECT_EQ(b["bytes_in"], body.size());
  EXPECT_EQ(b["bytes_out"], missing->body.size());

  const json c = line_for(lines, "miss-1");
  EXPECT_EQ(c["status"], 404);
  EXPECT_EQ(c["path"], "/no/route");  // no query string: it may hold user data
  for (const std::string& l : lines) {
    EXPECT_EQ(l.find("no-such-model"), std::string::npos) << "a body was logged: " << l;
    EXPECT_EQ(l.find("secret"), std::string::npos) << "a query was logged: " << l;
    EXPECT_EQ(l.find('\n'), std::string::npos);
  }
}

TEST_F(RequestLogTest, OversizedBodiesGet413WithTheLimitsAndAreLogged) {
  start();
  const std::string big(2 << 20, 'a');  // over max(max_body, max_audio + 1 MiB)
  auto r = client_->Post("/v1/embeddings", {{"X-Request-Id", "big-1"}}, big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "request_too_large");
  const std::string msg = e["message"];
  EXPECT_NE(msg.find("over the server's limit of " + std::to_string((8 << 10) + (1 << 20)) + " bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 4096 bytes, --max-body"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 8192 bytes, --max-audio"), std::string::npos) << msg;
  EXPECT_EQ(r->get_header_value("X-Request-Id"), "big-1");
  const json l = line_for(log_.wait_for(1), "big-1");
  EXPECT_EQ(l["status"], 413);
  EXPECT_EQ(l["bytes_in"], big.size());
  // The server still answers afterwards.
  EXPECT_EQ(server_->client()->Get("/health")->status, 200);
}

TEST_F(RequestLogTest, TheApiKeyIsNeverLogged) {
  const std::string key = "sk-very-secret-0123";
  start(key);
  auto refused = client_->Get("/health", {{"Authorization", "Bearer " + key + "-wrong"}, {"X-Request-Id", "r-401"}});
  auto allowed = client_->Get("/health", {{"Authorization", "Bearer " + key}, {"X-Request-Id", "r-200"}});
  ASSERT_TRUE(refused && allowed);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(refused->get_header_value("X-Request-Id"), "r-401");  // refusals carry an id too
  EXPECT_EQ(allowed->status, 200);
  const auto lines = log_.wait_for(2);
  EXPECT_EQ(line_for(lines, "r-401")["status"], 401);
  EXPECT_EQ(line_for(lines, "r-200")["status"], 200);
  for (const std::string& l : lines) EXPECT_EQ(l.find("very-secret"), std::string::npos) << l;
}

TEST_F(RequestLogTest, QuietServerLogsNothing) {
  start("", /*log=*/false);
  ASSERT_EQ(client_->Get("/health")->status, 200);
  ASSERT_EQ(client_->Get("/nope")->status, 404);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::lock_guard lock(log_.mu);
  EXPECT_TRUE(log_.lines.empty());
}

}  // namespace

// --api-key: with a key set, every endpoint (OpenAI, Ollama, /health, /metrics, even unknown
// paths) answers 401 with an OpenAI error object and WWW-Authenticate unless the request carries
// "Authorization: Bearer KEY"; with it, the requests work as without a key.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>

#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

constexpr const char* kKey = "sk-test-Key_0123456789";

class ApiKeyTest : public test::ServerSuite<ApiKeyTest> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-apikey");
    serve::ServerOptions opts;
    opts.store_dir = (dir_ / "models").string();
    opts.api_key = kKey;
    opts.log_requests = false;
    server_ = std::make_unique<test::RunningServer>(opts);
  }
  httplib::Result get(const std::string& path, const std::string& authorization) {
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    return client_->Get(path.c_str(), h);
  }
  httplib::Result post(const std::string& path, const std::string& body, const std::string& authorization) {
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    return client_->Post(path.c_str(), h, body, "application/json");
  }
};

void expect_unauthorized(const httplib::Result& r, const std::string& what) {
  ASSERT_TRUE(r) << what;
  EXPECT_EQ(r->status, 401) << what << ": " << r->body;
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer") << what;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << what;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["code"], "invalid_api_key") << what;
  EXPECT_EQ(j["error"]["type"], "invalid_request_error") << what;
  EXPECT_NE(j["error"]["message"].get<std::string>().find("Authorization: Bearer"), std::string::npos) << what;
  // The error never echoes a key, right or wrong.
  EXPECT_EQ(r->body.find(kKey), std::string::npos) << what;
  EXPECT_EQ(r->body.find("wrong-key"), std::string::npos) << what;
}

TEST_F(ApiKeyTest, EveryEndpointWantsTheKey) {
  const std::string bearer = std::string("Bearer ") + kKey;
  for (const std::string path : {"/health", "/metrics", "/v1/models", "/api/tags", "/api/version"}) {
    expect_unauthorized(get(path, ""), "GET " + path + " without a key");
    expect_unauthorized(get(path, "Bearer wrong-key"), "GET " + path + " with a wrong key");
    auto ok = get(path, bearer);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << path << ": " << ok->body;
  }
  const std::string body = R"({"model": "nothing", "input": "hi"})";
  expect_unauthorized(post("/v1/embeddings", body, ""), "POST /v1/embeddings without a key");
  expect_unauthorized(post("/v1/chat/completions", R"({"model":"x","messages":[]})", "Bearer wrong-key"),
                      "POST /v1/chat/completions with a wrong key");
  expect_unauthorized(post("/api/embed", body, ""), "POST /api/embed without a key");
  // With the key the request reaches its route, which answers on its own terms.
  auto routed = post("/v1/embeddings", body, bearer);
  ASSERT_TRUE(routed);
  EXPECT_EQ(routed->status, 404) << routed->body;
  EXPECT_EQ(json::parse(routed->body)["error"]["code"], "model_not_found");
}

TEST_F(ApiKeyTest, NearMissesAreRefused) {
  const std::string key = kKey;
  for (const std::string& auth : std::vector<std::string>{key,                                  // no scheme
                                 "Basic " + key,                       // another scheme
                                 "Bearer " + key.substr(0, key.size() - 1),  // a prefix of the key
                                 "Bearer " + key + "x",                // the key and more
                                 "Bearer",                             // scheme alone
                                 "Bearer " + key.substr(0, 3) + "T" + key.substr(4)})  // case of one char
    expect_unauthorized(get("/health", auth), "Authorization: " + auth);
  // The scheme is case-insensitive (RFC 9110), the key is not.
  auto lower = get("/health", "bearer " + key);
  ASSERT_TRUE(lower);
  EXPECT_EQ(lower->status, 200);
}

TEST_F(ApiKeyTest, UnknownPathsAndWrongMethodsStayPrivate) {
  // Without the key a miss looks like any other refusal, so the routes cannot be probed.
  expect_unauthorized(get("/no/such/route", ""), "unknown path without a key");
  expect_unauthorized(post("/health", "{}", ""), "wrong method without a key");
  const std::string bearer = std::string("Bearer ") + kKey;
  auto missing = get("/no/such/route", bearer);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto wrong_method = post("/health", "{}", bearer);
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
}

TEST_F(ApiKeyTest, RefusalsAreCountedInMetrics) {
  client_->set_keep_alive(true);  // one connection: each request is counted before the next is read
  const std::string bearer = std::string("Bearer ") + kKey;
  auto count_401 = [&] {
    auto r = get("/metrics", bearer);
    EXPECT_TRUE(r && r->status == 200);
    const std::string needle = "xdna_http_requests_total{endpoint=\"/v1/models\",status=\"401\"} ";
    const size_t at = r ? r->body.find(needle) : std::string::npos;
    return at == std::string::npos ? 0 : std::stoi(r->body.substr(at + needle.size()));
  };
  const int before = count_401();
  for (int i = 0; i < 3; ++i) expect_unauthorized(get("/v1/models", ""), "GET /v1/models");
  EXPECT_EQ(count_401() - before, 3);
}

// Without a key configured nothing is asked for (the other server tests rely on it too).
TEST(ApiKeyOff, NoKeyNoCheck) {
  const fs::path dir = test::make_temp_dir("xdna-apikey-off");
  serve::ServerOptions opts;
  opts.store_dir = (dir / "models").string();
  opts.log_requests = false;
  {
    test::RunningServer server(opts);
    ASSERT_TRUE(server.is_running());
    auto r = server.client()->Get("/health", {{"Authorization", "Bearer anything"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(server.client()->Get("/metrics")->status, 200);
  }
  fs::remove_all(dir);
}

}  // namespace

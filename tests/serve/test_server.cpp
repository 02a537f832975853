// The HTTP server in-process on a free loopback port, queried with httplib's client.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

fs::path make_temp_dir() { return test::make_temp_dir("xdna-serve"); }

// Writes a model directory with a manifest, as `npu model pull` would.
void add_model(const fs::path& store, const std::string& name, int64_t created) {
  Manifest m;
  m.name = name;
  m.family = "bert";
  m.format = "safetensors";
  m.precision = "f32";
  m.packages = {{"some-package", "1.0.0"}};
  m.files = {{"model.safetensors", 3, "abc"}};
  m.size_bytes = 3;
  m.created = created;
  fs::create_directories(store / name);
  std::ofstream(store / name / "manifest.json") << manifest_to_json(m).dump();
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    serve::ServerOptions opts;
    opts.store_dir = (dir_ / "models").string();
    server_ = std::make_unique<test::RunningServer>(opts);
    ASSERT_TRUE(server_->is_running());
    client_ = server_->client();
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }
  fs::path store() const { return dir_ / "models"; }

  fs::path dir_;
  std::unique_ptr<test::RunningServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

void expect_openai_error(const httplib::Result& r, int status, const std::string& code) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(r->get_header_value("X-Npu-Backend"), "host");
  const json j = json::parse(r->body);
  ASSERT_TRUE(j.contains("error")) << r->body;
  const json& e = j["error"];
  ASSERT_TRUE(e["message"].is_string());
  EXPECT_FALSE(e["message"].get<std::string>().empty());
  ASSERT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param"));
  ASSERT_TRUE(e.contains("code"));
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code);
  }
}

}  // namespace

TEST(ServerOptions, BindsLoopbackOnTheDefaultPort) {
  serve::ServerOptions o;
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.port, 11435);
}

TEST_F(ServerTest, HealthReportsStatusVersionAndBackend) {
  auto r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("X-Npu-Backend"), "host");
  const json j = json::parse(r->body);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["version"], serve::kEngineVersion);
  EXPECT_EQ(j["backend"]["backend"], "host");
  EXPECT_TRUE(j["backend"]["isa"].is_string());
  EXPECT_GE(j["backend"]["threads"].get<int>(), 1);
  EXPECT_EQ(j["models"], 0);
}

TEST_F(ServerTest, ModelsOnAnEmptyStoreIsAnEmptyList) {
  auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_TRUE(j["data"].is_array());
  EXPECT_TRUE(j["data"].empty());
}

TEST_F(ServerTest, ModelsListsTheStoreInOpenAIShape) {
  add_model(store(), "zeta-model", 1700000001);
  add_model(store(), "alpha-model", 1700000000);
  fs::create_directories(store() / ".pull-half-done");  // staging dirs are not models
  auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json j = json::parse(r->body);
  ASSERT_EQ(j["data"].size(), 2u);
  const json& m = j["data"][0];
  EXPECT_EQ(m["id"], "alpha-model");  // sorted by name
  EXPECT_EQ(m["object"], "model");
  EXPECT_EQ(m["created"], 1700000000);
  EXPECT_TRUE(m["owned_by"].is_string());
  EXPECT_EQ(j["data"][1]["id"], "zeta-model");

  auto one = client_->Get("/v1/models/zeta-model");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["id"], "zeta-model");
  expect_openai_error(client_->Get("/v1/models/missing"), 404, "model_not_found");
  expect_openai_error(client_->Get("/v1/models/..%2F..%2Fetc"), 404, "model_not_found");

  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(json::parse(health->body)["models"], 2);
}

TEST_F(ServerTest, UnknownRouteIsOpenAIError404) {
  expect_openai_error(client_->Get("/v1/nothing-here"), 404, "not_found");
  expect_openai_error(client_->Post("/v1/nothing-here", "{}", "application/json"), 404, "not_found");
}

TEST_F(ServerTest, WrongMethodIs405WithAllow) {
  auto r = client_->Post("/health", "{}", "application/json");
  expect_openai_error(r, 405, "method_not_allowed");
  EXPECT_EQ(r->get_header_value("Allow"), "GET");
  expect_openai_error(client_->Delete("/v1/models"), 405, "method_not_allowed");
}

TEST_F(ServerTest, BrokenManifestIs500ServerError) {
  fs::create_directories(store() / "broken");
  std::ofstream(store() / "broken" / "manifest.json") << "{\"name\": 3}";
  auto r = client_->Get("/v1/models");
  expect_openai_error(r, 500, "");
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "server_error");
  EXPECT_NE(r->body.find("manifest.json"), std::string::npos) << r->body;
}

TEST(Server, StopBeforeRunReturnsImmediately) {
  const fs::path dir = make_temp_dir();
  serve::ServerOptions opts;
  opts.port = 0;
  opts.store_dir = dir.string();
  serve::Server s(opts);
  s.bind();
  s.stop();
  s.run();  // must not block
  EXPECT_FALSE(s.is_running());
  fs::remove_all(dir);
}

TEST(Server, BindingATakenPortThrows) {
  const fs::path dir = make_temp_dir();
  serve::ServerOptions opts;
  opts.port = 0;
  opts.store_dir = dir.string();
  serve::Server a(opts);
  opts.port = a.bind();
  serve::Server b(opts);
  EXPECT_THROW(b.bind(), std::runtime_error);
  fs::remove_all(dir);
}

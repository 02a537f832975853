// What the in-process server tests share: a temp directory for the store, and a Server with every
// route on a free loopback port, run on its own thread from construction until destruction.
#pragma once
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "models/model_store.h"
#include "serve/server.h"

namespace xdna::test {

// A new empty directory /tmp/<prefix>-XXXXXX; the caller removes it.
inline std::filesystem::path make_temp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

// A model directory store/name as `npu model pull` leaves it: `from` copied in when given (less its
// reference.json, which is test data), and a manifest; `list_files`: the manifest lists the copied
// files and their total size.
inline void add_store_model(const std::filesystem::path& store, const std::string& name, const std::string& family,
                            const std::string& format, const std::string& precision,
                            const std::filesystem::path& from = {}, bool list_files = false) {
  namespace fs = std::filesystem;
  const fs::path dir = store / name;
  fs::create_directories(dir);
  Manifest m;
  m.name = name;
  m.family = family;
  m.format = format;
  m.precision = precision;
  m.packages = {{"fixture", "0"}};
  m.created = 1700000000;
  if (!from.empty()) {
    fs::copy(from, dir, fs::copy_options::recursive);
    fs::remove(dir / "reference.json");
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (!list_files) break;
      if (!e.is_regular_file()) continue;
      m.files.push_back({fs::relative(e.path(), dir).string(), e.file_size(), ""});
      m.size_bytes += e.file_size();
    }
  }
  std::ofstream(dir / "manifest.json") << manifest_to_json(m).dump();
}

class RunningServer {
 public:
  // Serves `opts` (its port replaced by a free one); is_running() says whether it came up.
  explicit RunningServer(serve::ServerOptions opts) : server_(on_free_port(std::move(opts))) {
    serve::add_all_routes(server_);
    port_ = server_.bind();
    thread_ = std::thread([this] { server_.run(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~RunningServer() {
    server_.stop();
    thread_.join();
  }
  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;

  bool is_running() const { return server_.is_running(); }
  int port() const { return port_; }
  serve::Server& server() { return server_; }  // in-process: its models and queues
  // A client of it, patient enough for requests that load a model first.
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(120, 0);
    return c;
  }

 private:
  static serve::ServerOptions on_free_port(serve::ServerOptions opts) {
    opts.port = 0;
    return opts;
  }
  serve::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// A test suite sharing one server: the suite's SetUpTestSuite fills a store under dir_ (made with
// make_temp_dir) and starts server_; each test gets a client_. `Suite` keeps the statics per suite.
template <class Suite>
class ServerSuite : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    ASSERT_TRUE(server_->is_running());
    client_ = server_->client();
  }

  // POST a JSON body; ok(): a 200 JSON response's body, parsed (the test fails otherwise), which
  // says once where its work ran (these servers run every model on the host).
  httplib::Result post(const std::string& path, const nlohmann::json& body) {
    return client_->Post(path.c_str(), body.dump(), "application/json");
  }
  nlohmann::json ok(const httplib::Result& r) {
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(r->get_header_value_count("X-Npu-Backend"), 1u);
    EXPECT_EQ(r->get_header_value("X-Npu-Backend"), "host");
    return nlohmann::json::parse(r->body);
  }

  static inline std::filesystem::path dir_;
  static inline std::unique_ptr<RunningServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

// A valid 16-bit PCM mono WAV of `samples` samples of a tone at 16 kHz.
inline std::string tone_wav(uint32_t samples) {
  std::string w;
  const auto u32 = [&](uint32_t v) { w.append(reinterpret_cast<const char*>(&v), 4); };
  const auto u16 = [&](uint16_t v) { w.append(reinterpret_cast<const char*>(&v), 2); };
  w += "RIFF";
  u32(36 + 2 * samples);
  w += "WAVEfmt ";
  u32(16), u16(1), u16(1), u32(16000), u32(32000), u16(2), u16(16);
  w += "data";
  u32(2 * samples);
  for (uint32_t i = 0; i < samples; ++i)
    u16(static_cast<uint16_t>(static_cast<int16_t>(8000 * std::sin(i * 0.1728))));
  return w;
}

}  // namespace xdna::test

// ModelCache's memory budget: the estimate made before a load (an upper bound that equals what an
// LLM's KV caches really take), ModelTooLarge before anything is allocated, least-recently-used
// eviction of idle models only, evicted models still running counted, resident_info(), load(name),
// and the server's 507 for a model that cannot fit.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "pipeline/llm.h"
#include "serve/model_cache.h"
#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;
using Clock = serve::RequestQueue::Clock;

namespace {

const fs::path kBert = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";
const fs::path kLlm = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";
// tiny-llama-chat: 2 layers, 2 KV heads of 16 dims, K and V of the default KV type (f16): bytes
// per token of KV cache.
const uint64_t kLlmKvPerToken = 2 * 2 * 2 * 16 * static_cast<uint64_t>(dtype_bytes(default_kv_dtype(), 1));
constexpr int64_t kLlmContext = 128;

uint64_t dir_bytes(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(10); }

class ModelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("xdna-model-cache"); }
  void TearDown() override { fs::remove_all(dir_); }
  void add_bert(const std::string& name) {
    test::add_store_model(dir_, name, "bert", "safetensors", "f32", kBert, /*list_files=*/true);
  }
  void add_llm(const std::string& name) { test::add_store_model(dir_, name, "llama", "safetensors", "f32", kLlm); }
  // What the cache counts for a model's files: its manifest's total, else the directory's.
  uint64_t bytes_of(const std::string& name) {
    const uint64_t listed = ModelStore(dir_.string()).find(name)->size_bytes;
    return listed ? listed : dir_bytes(dir_ / name);
  }
  fs::path dir_;
};

TEST_F(ModelCacheTest, TooLargeIsRefusedBeforeAnythingIsLoaded) {
  add_bert("tiny-a");
  const uint64_t one = bytes_of("tiny-a");
  // Same size, unreadable weights: a load would fail on them, so the refusal must come first.
  const fs::path weights = dir_ / "tiny-a" / "model.safetensors";
  const auto size = fs::file_size(weights);
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << std::string(size, '\0');
  serve::ModelCache cache(dir_.string(), one - 1);
  try {
    cache.get_embedding("tiny-a");
    FAIL() << "expected ModelTooLarge";
  } catch (const serve::ModelTooLarge& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'tiny-a'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(one) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(one - 1) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--max-memory"), std::string::npos) << msg;
  }
  EXPECT_TRUE(cache.resident().empty());
  EXPECT_EQ(cache.live_bytes(), 0u);
  EXPECT_THROW(cache.load("tiny-a"), serve::ModelTooLarge);
}

TEST_F(ModelCacheTest, LlmBytesAreItsFilesAndTheKvCachesOfItsBatch) {
  add_llm("tiny-llm");
  const uint64_t files = bytes_of("tiny-llm");
  serve::ModelCache cache(dir_.string(), serve::ModelCacheOptions{.max_batch = 2});
  auto m = cache.get_llm("tiny-llm");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->model->context_length(), kLlmContext);
  EXPECT_EQ(m->model->decoder().kv_cache_bytes(1), kLlmKvPerToken);  // the test's own arithmetic holds
  EXPECT_EQ(m->bytes, files + 2 * m->model->decoder().kv_cache_bytes(kLlmContext));
  EXPECT_EQ(cache.resident_bytes(), m->bytes);
}

TEST_F(ModelCacheTest, LlmThatFitsExactlyLoadsOneByteLessIsTooLarge) {
  add_llm("tiny-llm");
  const uint64_t need = bytes_of("tiny-llm") + 2 * kLlmKvPerToken * kLlmContext;
  {
    serve::ModelCache cache(dir_.string(), serve::ModelCacheOptions{.budget_bytes = need - 1, .max_batch = 2});
    try {
      cache.get_llm("tiny-llm");
      FAIL() << "expected ModelTooLarge";
    } catch (const serve::ModelTooLarge& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(need) + " bytes"), std::string::npos) << msg;
      EXPECT_NE(msg.find("2 sequences of 128 tokens"), std::string::npos) << msg;
      EXPECT_NE(msg.find("--max-batch"), std::string::npos) << msg;
    }
    EXPECT_TRUE(cache.resident().empty());
  }
  serve::ModelCache cache(dir_.string(), serve::ModelCacheOptions{.budget_bytes = need, .max_batch = 2});
  auto m = cache.get_llm("tiny-llm");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->bytes, need);
}

TEST_F(ModelCacheTest, KvBudgetOfTheLoadOptionsCapsTheContextAndTheBytes) {
  add_llm("tiny-llm");
  serve::ModelCache cache(dir_.string(), serve::ModelCacheOptions{.max_batch = 3});
  cache.set_llm_load_options({.context_length = 0, .memory_budget_bytes = 64 * kLlmKvPerToken, .kv_dtype = {}});
  auto m = cache.get_llm("tiny-llm");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->model->context_length(), 64);
  EXPECT_EQ(m->bytes, bytes_of("tiny-llm") + 3 * 64 * kLlmKvPerToken);
}

TEST_F(ModelCacheTest, EvictsIdleModelsLeastRecentFirstButNeverBusyOnes) {
  for (const char* n : {"tiny-a", "tiny-b", "tiny-c"}) add_bert(n);
  const uint64_t one = bytes_of("tiny-a");
  serve::ModelCache cache(dir_.string(), one * 2 + one / 2);  // room for two
  auto a = cache.get_embedding("tiny-a");
  auto b = cache.get_embedding("tiny-b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-b", "tiny-a"}));
  {
    serve::RequestQueue::Turn running = a->queue.enter(soon());  // a, the oldest, is busy
    auto c = cache.get_embedding("tiny-c");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-c", "tiny-a"}));  // b went instead
    serve::RequestQueue::Turn also = c->queue.enter(soon());
    try {  // both residents busy: b fits the budget, not beside them
      cache.get_embedding("tiny-b");
      FAIL() << "expected MemoryBusy";
    } catch (const serve::MemoryBusy& e) {
      EXPECT_GE(e.retry_after_s, 1);
      EXPECT_NE(std::string(e.what()).find("retry"), std::string::npos) << e.what();
    }
    EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-c", "tiny-a"}));
  }
  EXPECT_NE(cache.get_embedding("tiny-b"), nullptr);  // idle again: a, the oldest, goes
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-b", "tiny-c"}));
}

TEST_F(ModelCacheTest, EvictedModelsStillRunningAreCounted) {
  for (const char* n : {"tiny-a", "tiny-b", "tiny-c"}) add_bert(n);
  const uint64_t one = bytes_of("tiny-a");
  serve::ModelCache cache(dir_.string(), one * 2 + one / 2);
  auto a = cache.get_embedding("tiny-a");  // held by a request that has not entered yet
  cache.get_embedding("tiny-b");
  cache.get_embedding("tiny-c");  // evicts a, idle
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-c", "tiny-b"}));
  EXPECT_EQ(cache.live_bytes(), 2 * one);
  {
    serve::RequestQueue::Turn running = a->queue.enter(soon());  // now it runs on the evicted copy
    EXPECT_EQ(cache.live_bytes(), 3 * one);
    EXPECT_EQ(cache.resident_bytes(), 2 * one);
    auto a2 = cache.get_embedding("tiny-a");  // loaded again: b and c go, the running copy stays
    EXPECT_NE(a2, a);
    EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-a"}));
    EXPECT_EQ(cache.live_bytes(), 2 * one);
  }
  EXPECT_EQ(cache.live_bytes(), one);
}

TEST_F(ModelCacheTest, ResidentInfoSaysWhenWhereAndHowMuch) {
  add_bert("tiny-a");
  add_llm("tiny-llm");
  const double t0 = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  serve::ModelCache cache(dir_.string());
  auto a = cache.get_embedding("tiny-a");
  auto l = cache.get_llm("tiny-llm");
  ASSERT_TRUE(a && l);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache.get_embedding("tiny-a");  // used again: most recent, a later last use than its load
  serve::RequestQueue::Turn running = l->queue.enter(soon());
  const std::vector<serve::ResidentModel> info = cache.resident_info();
  ASSERT_EQ(info.size(), 2u);
  EXPECT_EQ(info[0].name, "tiny-a");
  EXPECT_EQ(info[0].kind, "embedding");
  EXPECT_EQ(info[0].family, "bert");
  EXPECT_EQ(info[0].bytes, a->bytes);
  EXPECT_GT(info[0].last_used_unix_s, info[0].loaded_unix_s);
  EXPECT_EQ(info[1].name, "tiny-llm");
  EXPECT_EQ(info[1].kind, "llm");
  EXPECT_EQ(info[1].bytes, l->bytes);
  EXPECT_EQ(info[1].running, 1);
  EXPECT_EQ(info[1].waiting, 0);
  EXPECT_EQ(info[1].last_used_unix_s, info[1].loaded_unix_s);
  for (const auto& r : info) {
    EXPECT_EQ(r.device, "host");
    EXPECT_GE(r.loaded_unix_s, t0);
    EXPECT_LE(r.loaded_unix_s, t0 + 60);
  }
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-a", "tiny-llm"}));
}

TEST_F(ModelCacheTest, LoadByNameForPreload) {
  add_bert("tiny-a");
  add_llm("tiny-llm");
  serve::ModelCache cache(dir_.string());
  EXPECT_FALSE(cache.load("missing"));
  EXPECT_FALSE(cache.load("../tiny-a"));
  EXPECT_FALSE(cache.load(""));
  EXPECT_TRUE(cache.load("tiny-llm"));
  EXPECT_TRUE(cache.load("tiny-a"));
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-a", "tiny-llm"}));
  EXPECT_TRUE(cache.load("tiny-llm"));  // already resident: made the most recent, not loaded again
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-llm", "tiny-a"}));
}

// The real gemma3-270m (GGUF, 32k context) when it is in the user's store: the KV shape read from
// the GGUF header matches the loaded decoder's, and a 1 GiB budget cuts the context to fit.
TEST(ModelCacheRealModel, GemmaContextIsCutToTheBudget) {
  const std::string store = default_store_dir();
  if (!ModelStore(store).find("gemma3-270m")) GTEST_SKIP() << "gemma3-270m is not in " << store;
  constexpr uint64_t kBudget = 1ull << 30;
  serve::ModelCache cache(store, serve::ModelCacheOptions{.budget_bytes = kBudget, .max_batch = 4});
  auto m = cache.get_llm("gemma3-270m");
  ASSERT_NE(m, nullptr);
  const Decoder& d = m->model->decoder();
  const uint64_t files = ModelStore(store).find("gemma3-270m")->size_bytes;
  EXPECT_LT(m->model->context_length(), d.spec().max_positions);
  EXPECT_GE(m->model->context_length(), 512);
  EXPECT_EQ(m->bytes, files + 4 * d.kv_cache_bytes(m->model->context_length()));
  EXPECT_LE(m->bytes, kBudget);
  EXPECT_GT(m->bytes + 4 * d.kv_cache_bytes(1), kBudget);  // one more token each would not fit
}

// Through the server: a model over --max-memory is a 507 "insufficient_memory" naming both sizes,
// and the server goes on answering.
TEST_F(ModelCacheTest, ServerAnswers507ForAModelOverTheBudget) {
  add_bert("tiny-a");
  add_llm("tiny-llm");
  serve::ServerOptions opts;
  opts.store_dir = dir_.string();
  opts.model_budget_bytes = 4096;
  opts.log_requests = false;
  test::RunningServer server(opts);
  ASSERT_TRUE(server.is_running());
  auto client = server.client();
  const auto expect_507 = [&](const httplib::Result& r) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 507) << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["code"], "insufficient_memory");
    EXPECT_EQ(e["type"], "server_error");
    EXPECT_EQ(e["param"], "model");
    EXPECT_NE(e["message"].get<std::string>().find("4096 bytes"), std::string::npos) << e;
    EXPECT_NE(e["message"].get<std::string>().find("--max-memory"), std::string::npos) << e;
  };
  expect_507(client->Post("/v1/embeddings", json({{"model", "tiny-a"}, {"input", "hello"}}).dump(), "application/json"));
  expect_507(client->Post("/v1/chat/completions",
                          json({{"model", "tiny-llm"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}).dump(),
                          "application/json"));
  expect_507(client->Post("/v1/chat/completions",
                          json({{"model", "tiny-llm"}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}})
                              .dump(),
                          "application/json"));
  // Ollama's routes say the same in Ollama's error shape.
  for (const auto& [path, body] : {std::pair<std::string, json>{"/api/embed", {{"model", "tiny-a"}, {"input", "hello"}}},
                                   {"/api/generate", {{"model", "tiny-llm"}, {"prompt", "hi"}, {"stream", false}}}}) {
    auto r = client->Post(path, body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 507) << path << ": " << r->body;
    const json e = json::parse(r->body);
    ASSERT_TRUE(e["error"].is_string()) << e;
    EXPECT_NE(e["error"].get<std::string>().find("--max-memory"), std::string::npos) << e;
  }
  auto health = client->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(server.server().models().resident().empty());
}

}  // namespace

// POST /v1/embeddings end to end: the server in-process on a free loopback port, a temp store
// holding the tiny BERT fixture (32 dims, 64 positions, 600 tokens) under two names, queried with
// httplib's client. Embeddings are checked against the fixture's sentence-transformers reference.
#include <gtest/gtest.h>
#include <httplib.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

const fs::path kFixture = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";

// A model directory with a manifest, as `npu model pull` leaves it. `files` from `from` (if any).
void add_model(const fs::path& store, const std::string& name, const std::string& family, const fs::path& from) {
  test::add_store_model(store, name, family, "safetensors", "f32", from, /*list_files=*/true);
}

// The fixture with "matryoshka_dimensions" declared: the same weights, allowed to be cut.
void make_matryoshka(const fs::path& dir) {
  const fs::path p = dir / "config_sentence_transformers.json";
  json j = json::parse(std::ifstream(p));
  j["matryoshka_dimensions"] = {32, 16, 8};
  std::ofstream(p) << j.dump();
}

struct Reference {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> embedding;
};

std::vector<Reference> load_reference() {
  const json j = json::parse(std::ifstream(kFixture / "reference.json"));
  std::vector<Reference> out;
  for (const json& in : j["inputs"])
    out.push_back({in["text"], in["ids"].get<std::vector<int32_t>>(), in["embedding"].get<std::vector<float>>()});
  return out;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

std::vector<float> base64_to_f32(const std::string& s) {
  auto val = [](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : 63;
  };
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 3 < s.size(); i += 4) {
    uint32_t w = 0;
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      if (s[i + k] == '=') ++pad;
      w = (w << 6) | (s[i + k] == '=' ? 0 : val(s[i + k]));
    }
    for (int k = 0; k < 3 - pad; ++k) bytes.push_back(static_cast<uint8_t>(w >> (16 - 8 * k)));
  }
  EXPECT_EQ(bytes.size() % 4, 0u);
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b) u |= uint32_t(bytes[4 * i + b]) << (8 * b);  // little-endian
    out[i] = std::bit_cast<float>(u);
  }
  return out;
}

class EmbeddingsApi : public test::ServerSuite<EmbeddingsApi> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-embed-api");
    const fs::path store = dir_ / "models";
    add_model(store, "tiny-bert", "bert", kFixture);
    add_model(store, "tiny-mrl", "bert", kFixture);
    make_matryoshka(store / "tiny-mrl");
    add_model(store, "some-llm", "gemma3", {});
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    server_ = std::make_unique<test::RunningServer>(opts);
  }

  httplib::Result post(const json& body) { return post_raw(body.dump()); }
  httplib::Result post_raw(const std::string& body) {
    return client_->Post("/v1/embeddings", body, "application/json");
  }
  // A 200 response's body, with the checks every success must pass.
  json ok(const httplib::Result& r) {
    const json j = ServerSuite::ok(r);  // status, content type, one X-Npu-Backend: host
    if (!r) return {};
    EXPECT_EQ(j["object"], "list");
    for (size_t i = 0; i < j["data"].size(); ++i) {
      EXPECT_EQ(j["data"][i]["object"], "embedding");
      EXPECT_EQ(j["data"][i]["index"], i);
    }
    EXPECT_EQ(j["usage"]["prompt_tokens"], j["usage"]["total_tokens"]);
    return j;
  }
  // An OpenAI error object with this status, code and param; returns the message.
  std::string error(const httplib::Result& r, int status, const std::string& code, const std::string& param = "input") {
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    const json j = json::parse(r->body);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_EQ(j["error"]["code"], code) << r->body;
    if (param.empty()) EXPECT_TRUE(j["error"]["param"].is_null()) << r->body;
    else EXPECT_EQ(j["error"]["param"], param) << r->body;
    const std::string message = j["error"]["message"];
    EXPECT_FALSE(message.empty());
    return message;
  }

  static std::vector<float> floats(const json& item) { return item["embedding"].get<std::vector<float>>(); }

  const std::vector<Reference> ref_ = load_reference();
};

}  // namespace

TEST_F(EmbeddingsApi, StringInputMatchesSentenceTransformers) {
  const json j = ok(post({{"model", "tiny-bert"}, {"input", ref_[0].text}}));
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["model"], "tiny-bert");
  const std::vector<float> v = floats(j["data"][0]);
  ASSERT_EQ(v.size(), 32u);
  EXPECT_GE(cosine(v, ref_[0].embedding), 0.9999);
  EXPECT_EQ(j["usage"]["prompt_tokens"], ref_[0].ids.size());
}

TEST_F(EmbeddingsApi, ArrayOfStringsKeepsOrderAndCountsTokens) {
  json input = json::array();
  size_t tokens = 0;
  for (const Reference& r : ref_) input.push_back(r.text), tokens += r.ids.size();
  auto res = post({{"model", "tiny-bert"}, {"input", input}, {"user", "someone"}, {"encoding_format", "float"}});
  const json j = ok(res);
  ASSERT_EQ(j["data"].size(), ref_.size());
  for (size_t i = 0; i < ref_.size(); ++i) EXPECT_GE(cosine(floats(j["data"][i]), ref_[i].embedding), 0.9999) << i;
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokens);
  EXPECT_FALSE(res->has_header("X-Npu-Truncated"));
}

TEST_F(EmbeddingsApi, TokenIdsGiveTheSameEmbeddingAsText) {
  const json text = ok(post({{"model", "tiny-bert"}, {"input", ref_[1].text}}));
  const json one = ok(post({{"model", "tiny-bert"}, {"input", ref_[1].ids}}));
  ASSERT_EQ(one["data"].size(), 1u);
  EXPECT_EQ(one["usage"]["prompt_tokens"], ref_[1].ids.size());
  const std::vector<float> a = floats(text["data"][0]), b = floats(one["data"][0]);
  ASSERT_EQ(a.size(), b.size());
  for (size_t d = 0; d < a.size(); ++d) EXPECT_NEAR(a[d], b[d], 1e-6) << d;

  const json many = ok(post({{"model", "tiny-bert"}, {"input", {ref_[0].ids, ref_[2].ids}}}));
  ASSERT_EQ(many["data"].size(), 2u);
  EXPECT_GE(cosine(floats(many["data"][0]), ref_[0].embedding), 0.9999);
  EXPECT_GE(cosine(floats(many["data"][1]), ref_[2].embedding), 0.9999);
  EXPECT_EQ(many["usage"]["prompt_tokens"], ref_[0].ids.size() + ref_[2].ids.size());
}

TEST_F(EmbeddingsApi, Base64IsLittleEndianF32OfTheFloats) {
  const json input = {ref_[0].text, ref_[3].text};
  const json f = ok(post({{"model", "tiny-bert"}, {"input", input}}));
  const json b = ok(post({{"model", "tiny-bert"}, {"input", input}, {"encoding_format", "base64"}}));
  ASSERT_EQ(b["data"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(b["data"][i]["embedding"].is_string());
    const std::vector<float> decoded = base64_to_f32(b["data"][i]["embedding"]);
    const std::vector<float> expect = floats(f["data"][i]);
    ASSERT_EQ(decoded.size(), expect.size());
    for (size_t d = 0; d < decoded.size(); ++d) EXPECT_EQ(decoded[d], expect[d]) << i << "," << d;
  }
  EXPECT_EQ(b["usage"], f["usage"]);
}

TEST_F(EmbeddingsApi, LongInputsAreTruncatedAndTheHeaderSaysWhich) {
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "hello world ";
  auto res = post({{"model", "tiny-bert"}, {"input", {"short", long_text, "also short", long_text}}});
  const json j = ok(res);
  ASSERT_EQ(j["data"].size(), 4u);
  EXPECT_EQ(res->get_header_value("X-Npu-Truncated"), "1,3");
  EXPECT_GE(j["usage"]["prompt_tokens"].get<int>(), 2 * 64);  // the long ones count 64 each
  EXPECT_LT(j["usage"]["prompt_tokens"].get<int>(), 2 * 64 + 20);

  std::vector<int32_t> ids(100, 50);
  ids.front() = 2, ids.back() = 3;
  auto tres = post({{"model", "tiny-bert"}, {"input", ids}});
  const json t = ok(tres);
  EXPECT_EQ(tres->get_header_value("X-Npu-Truncated"), "0");
  EXPECT_EQ(t["usage"]["prompt_tokens"], 64);
}

TEST_F(EmbeddingsApi, DimensionsOnlyForMatryoshkaModels) {
  // The native size is accepted by every model; other sizes only where the config allows them.
  const json full = ok(post({{"model", "tiny-bert"}, {"input", "a"}, {"dimensions", 32}}));
  EXPECT_EQ(floats(full["data"][0]).size(), 32u);
  const std::string msg = error(post({{"model", "tiny-bert"}, {"input", "a"}, {"dimensions", 16}}), 400,
                                "unsupported_value", "dimensions");
  EXPECT_NE(msg.find("Matryoshka"), std::string::npos) << msg;

  const json cut = ok(post({{"model", "tiny-mrl"}, {"input", "a"}, {"dimensions", 8}, {"encoding_format", "base64"}}));
  const std::vector<float> v = base64_to_f32(cut["data"][0]["embedding"]);
  ASSERT_EQ(v.size(), 8u);
  const std::vector<float> whole = floats(full["data"][0]);
  double norm = 0;
  for (float x : v) norm += double(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_GE(cosine(v, {whole.begin(), whole.begin() + 8}), 0.99999);  // the same direction, rescaled

  error(post({{"model", "tiny-mrl"}, {"input", "a"}, {"dimensions", 33}}), 400, "invalid_value", "dimensions");
  error(post({{"model", "tiny-mrl"}, {"input", "a"}, {"dimensions", 0}}), 400, "invalid_value", "dimensions");
  error(post({{"model", "tiny-mrl"}, {"input", "a"}, {"dimensions", "8"}}), 400, "invalid_value", "dimensions");
}

TEST_F(EmbeddingsApi, UnknownModelIs404ModelNotFound) {
  error(post({{"model", "no-such-model"}, {"input", "a"}}), 404, "model_not_found", "model");
  error(post({{"model", "../tiny-bert"}, {"input", "a"}}), 404, "model_not_found", "model");
  error(post({{"model", "/etc"}, {"input", "a"}}), 404, "model_not_found", "model");
  const std::string msg = error(post({{"model", "some-llm"}, {"input", "a"}}), 400, "model_not_supported", "model");
  EXPECT_NE(msg.find("not an embedding model"), std::string::npos) << msg;
}

TEST_F(EmbeddingsApi, MalformedRequestsAre400WithTheReason) {
  error(post_raw("{not json"), 400, "invalid_json", "");
  error(post_raw("[1, 2]"), 400, "invalid_json", "");
  error(post({{"input", "a"}}), 400, "missing_required_parameter", "model");
  error(post({{"model", 3}, {"input", "a"}}), 400, "missing_required_parameter", "model");
  error(post({{"model", "tiny-bert"}}), 400, "missing_required_parameter");
  error(post({{"model", "tiny-bert"}, {"input", 42}}), 400, "invalid_type");
  error(post({{"model", "tiny-bert"}, {"input", {{"k", "v"}}}}), 400, "invalid_type");
  error(post({{"model", "tiny-bert"}, {"input", "a"}, {"encoding_format", "int8"}}), 400, "invalid_value",
        "encoding_format");
}

TEST_F(EmbeddingsApi, EmptyAndMixedInputsAreRejected) {
  error(post({{"model", "tiny-bert"}, {"input", ""}}), 400, "invalid_value");
  error(post({{"model", "tiny-bert"}, {"input", json::array()}}), 400, "invalid_value");
  const std::string msg = error(post({{"model", "tiny-bert"}, {"input", {"a", ""}}}), 400, "invalid_value");
  EXPECT_NE(msg.find("input[1]"), std::string::npos) << msg;
  error(post({{"model", "tiny-bert"}, {"input", {json::array()}}}), 400, "invalid_value");
  error(post({{"model", "tiny-bert"}, {"input", {"a", 5}}}), 400, "invalid_type");
  error(post({{"model", "tiny-bert"}, {"input", {5, "a"}}}), 400, "invalid_type");
  error(post({{"model", "tiny-bert"}, {"input", {{2, 3}, "a"}}}), 400, "invalid_type");
  error(post_raw(R"({"model": "tiny-bert", "input": [2, 1.5, 3]})"), 400, "invalid_type");
}

TEST_F(EmbeddingsApi, TokenIdsOutsideTheVocabularyAre400) {
  std::string msg = error(post({{"model", "tiny-bert"}, {"input", {2, 600, 3}}}), 400, "invalid_token_id");
  EXPECT_NE(msg.find("600"), std::string::npos) << msg;
  msg = error(post({{"model", "tiny-bert"}, {"input", {{2, 3}, {2, -1, 3}}}}), 400, "invalid_token_id");
  EXPECT_NE(msg.find("input[1][1]"), std::string::npos) << msg;
  error(post_raw(R"({"model": "tiny-bert", "input": [2, 18446744073709551615]})"), 400, "invalid_token_id");
}

TEST_F(EmbeddingsApi, TooManyInputsAndTooLargeBodies) {
  const std::string msg =
      error(post({{"model", "tiny-bert"}, {"input", std::vector<std::string>(2049, "a")}}), 400, "too_many_inputs");
  EXPECT_NE(msg.find("2048"), std::string::npos) << msg;
  const std::string big = R"({"model": "tiny-bert", "input": ")" + std::string(17u << 20, 'a') + "\"}";
  error(post_raw(big), 413, "request_too_large", "");
}

TEST_F(EmbeddingsApi, WrongMethodIs405) {
  auto r = client_->Get("/v1/embeddings");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
}

TEST_F(EmbeddingsApi, ConcurrentRequestsGiveTheSameAnswers) {
  const json expect = ok(post({{"model", "tiny-bert"}, {"input", ref_[3].text}}));
  std::vector<std::thread> threads;
  std::vector<json> got(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", server_->port());
      auto r = c.Post("/v1/embeddings", json({{"model", "tiny-bert"}, {"input", ref_[3].text}}).dump(),
                      "application/json");
      if (r && r->status == 200) got[t] = json::parse(r->body);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t]["data"], expect["data"]) << t;
}

// The cache on its own: load on first use, the same object after, LRU past the budget.
TEST(ModelCache, LoadsOnFirstUseAndEvictsLeastRecentPastTheBudget) {
  const fs::path dir = test::make_temp_dir("xdna-embed-api");
  add_model(dir, "tiny-a", "bert", kFixture);
  add_model(dir, "tiny-b", "bert", kFixture);
  add_model(dir, "tiny-mrl", "bert", kFixture);
  make_matryoshka(dir / "tiny-mrl");
  const uint64_t one = ModelStore(dir.string()).find("tiny-a")->size_bytes;
  ASSERT_GT(one, 0u);

  serve::ModelCache cache(dir.string(), one * 2 + one / 2);  // room for two
  EXPECT_EQ(cache.get_embedding("missing"), nullptr);
  EXPECT_EQ(cache.get_embedding("../tiny-a"), nullptr);
  auto a = cache.get_embedding("tiny-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->model.dimensions(), 32);
  EXPECT_TRUE(a->matryoshka_dimensions.empty());
  EXPECT_EQ(cache.get_embedding("tiny-a"), a);  // resident: not loaded again
  auto b = cache.get_embedding("tiny-b");
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-b", "tiny-a"}));
  EXPECT_EQ(cache.get_embedding("tiny-a"), a);  // touch a: b is now the oldest
  auto m = cache.get_embedding("tiny-mrl");
  EXPECT_EQ(m->matryoshka_dimensions, (std::vector<int64_t>{32, 16, 8}));
  EXPECT_EQ(cache.resident(), (std::vector<std::string>{"tiny-mrl", "tiny-a"}));
  EXPECT_EQ(cache.resident_bytes(), 2 * one + (m->bytes - one));
  EXPECT_FALSE(b->model.embed({"still usable"}).items.empty());  // evicted, yet alive while held

  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<serve::CachedEmbeddingModel>> got(4);
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = cache.get_embedding("tiny-b"); });
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(got[t], got[0]);  // loaded once
  fs::remove_all(dir);
}

TEST(ModelCache, BadMatryoshkaConfigIsAnError) {
  const fs::path dir = test::make_temp_dir("xdna-embed-api");
  add_model(dir, "tiny-bad", "bert", kFixture);
  std::ofstream(dir / "tiny-bad" / "config_sentence_transformers.json") << R"({"matryoshka_dimensions": [64]})";
  serve::ModelCache cache(dir.string());
  try {
    cache.get_embedding("tiny-bad");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("matryoshka_dimensions"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

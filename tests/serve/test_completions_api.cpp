// POST /v1/chat/completions and /v1/completions end to end: the server in-process on a free
// loopback port, a temp store holding the tiny chat LLM fixture (tests/fixtures/llm), queried
// with httplib's client. Greedy outputs are checked against transformers' (reference.json).
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

const fs::path kFixture = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";

void add_model(const fs::path& store, const std::string& name, const std::string& family, const fs::path& from) {
  test::add_store_model(store, name, family, "safetensors", "f32", from);
}

// Server-sent events: the JSON of every `data: {...}` event, and whether `data: [DONE]` ended it.
struct Events {
  std::vector<json> chunks;
  bool done = false;
  bool well_formed = true;  // every event is "data: ...\n\n" and nothing follows [DONE]
};

Events parse_sse(const std::string& body) {
  Events ev;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos || body.compare(pos, 6, "data: ") != 0 || ev.done) {
      ev.well_formed = false;
      break;
    }
    const std::string data = body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") ev.done = true;
    else ev.chunks.push_back(json::parse(data));
    pos = end + 2;
  }
  return ev;
}

class CompletionsApi : public test::ServerSuite<CompletionsApi> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-completions-api");
    const fs::path store = dir_ / "models";
    add_model(store, "tiny-chat", "llama", kFixture);
    add_model(store, "tiny-plain", "llama", kFixture);
    {  // the same model without a chat template
      json tc = json::parse(std::ifstream(store / "tiny-plain" / "tokenizer_config.json"));
      tc.erase("chat_template");
      std::ofstream(store / "tiny-plain" / "tokenizer_config.json") << tc.dump();
    }
    add_model(store, "some-bert", "bert", {});
    ref_ = new json(json::parse(std::ifstream(kFixture / "reference.json")));
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    server_ = std::make_unique<test::RunningServer>(opts);
  }
  static void TearDownTestSuite() {
    ServerSuite::TearDownTestSuite();
    delete ref_;
  }

  // A 4xx response's error object, checked for the OpenAI shape.
  json error(const httplib::Result& r, int status) {
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    EXPECT_TRUE(j["error"]["message"].is_string());
    return j["error"];
  }
  const json& ref_case(size_t i) { return (*ref_)["cases"][i]; }

  static json* ref_;
};
json* CompletionsApi::ref_ = nullptr;

TEST_F(CompletionsApi, ChatGreedyMatchesTransformers) {
  const json& c = ref_case(3);
  const json j = ok(post("/v1/chat/completions",
                         {{"model", "tiny-chat"}, {"messages", c["messages"]}, {"temperature", 0}, {"max_tokens", 24}}));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("chatcmpl-"));
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], "tiny-chat");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], c["greedy_text"]);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], c["prompt_ids"].size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["usage"]["total_tokens"], c["prompt_ids"].size() + 24);
}

TEST_F(CompletionsApi, CompletionGreedyStopAndTokenPrompt) {
  const json& c = ref_case(0);
  const json j = ok(post("/v1/completions",
                         {{"model", "tiny-chat"}, {"prompt", c["prompt"]}, {"temperature", 0}, {"max_tokens", 24}}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], c["greedy_text"]);
  EXPECT_EQ(j["usage"]["prompt_tokens"], c["prompt_ids"].size());
  // The same prompt as token ids, and OpenAI's default of 16 tokens.
  const json ids = ok(post("/v1/completions", {{"model", "tiny-chat"}, {"prompt", c["prompt_ids"]}, {"temperature", 0}}));
  EXPECT_EQ(ids["usage"]["completion_tokens"], 16);
  EXPECT_TRUE(c["greedy_text"].get<std::string>().starts_with(ids["choices"][0]["text"].get<std::string>()));
  // A stop string: the text ends right before it, finish_reason "stop".
  const std::string full = c["greedy_text"];
  const std::string stop = full.substr(full.find('Q'), 1);  // an ASCII character of the reference text
  const json s = ok(post("/v1/completions", {{"model", "tiny-chat"}, {"prompt", c["prompt"]}, {"temperature", 0},
                                             {"max_tokens", 24}, {"stop", {stop, "zzz"}}}));
  EXPECT_EQ(s["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop");
}

TEST_F(CompletionsApi, SeedReproducesSampling) {
  const json body = {{"model", "tiny-chat"}, {"prompt", "Hello"}, {"temperature", 1.0}, {"top_p", 0.9},
                     {"top_k", 50}, {"min_p", 0.01}, {"seed", 7}, {"max_tokens", 12}};
  const json a = ok(post("/v1/completions", body)), b = ok(post("/v1/completions", body));
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  json other = body;
  other["seed"] = 8;
  EXPECT_NE(ok(post("/v1/completions", other))["choices"][0]["text"], a["choices"][0]["text"]);
}

TEST_F(CompletionsApi, ChatStreamFraming) {
  const json& c = ref_case(3);
  auto r = post("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", c["messages"]}, {"temperature", 0},
                                         {"max_completion_tokens", 24}, {"stream", true},
                                         {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const Events ev = parse_sse(r->body);
  EXPECT_TRUE(ev.well_formed) << r->body;
  EXPECT_TRUE(ev.done);
  ASSERT_GE(ev.chunks.size(), 4u);
  const json& first = ev.chunks.front();
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  const std::string id = first["id"];
  for (size_t i = 0; i + 2 < ev.chunks.size(); ++i) {  // content chunks: no finish_reason yet
    EXPECT_EQ(ev.chunks[i]["id"], id);
    EXPECT_TRUE(ev.chunks[i]["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(ev.chunks[i].contains("usage") && ev.chunks[i]["usage"].is_null());
    text += ev.chunks[i]["choices"][0]["delta"].value("content", "");
  }
  const json& last = ev.chunks[ev.chunks.size() - 2];
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  const json& usage = ev.chunks.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 24);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], c["prompt_ids"].size());
  EXPECT_EQ(text, c["greedy_text"]);
}

TEST_F(CompletionsApi, CompletionStreamWithStop) {
  const json& c = ref_case(0);
  const std::string full = c["greedy_text"];
  const std::string stop = full.substr(full.find('Q'), 1);
  auto r = post("/v1/completions", {{"model", "tiny-chat"}, {"prompt", c["prompt"]}, {"temperature", 0},
                                    {"max_tokens", 24}, {"stop", stop}, {"stream", true}});
  ASSERT_TRUE(r);
  const Events ev = parse_sse(r->body);
  EXPECT_TRUE(ev.well_formed && ev.done) << r->body;
  std::string text;
  for (const json& ch : ev.chunks) {
    EXPECT_EQ(ch["object"], "text_completion");
    EXPECT_FALSE(ch.contains("usage"));  // not asked for
    text += ch["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
  EXPECT_EQ(ev.chunks.back()["choices"][0]["finish_reason"], "stop");
}

TEST_F(CompletionsApi, Logprobs) {
  const json j = ok(post("/v1/chat/completions", {{"model", "tiny-chat"},
                                                  {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                                  {"temperature", 0}, {"max_tokens", 5}, {"logprobs", true},
                                                  {"top_logprobs", 2}}));
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u);
  for (const json& t : content) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);  // greedy picks the most likely
    EXPECT_TRUE(t["bytes"].is_array());
  }
  const json k = ok(post("/v1/completions", {{"model", "tiny-chat"}, {"prompt", "Hi"}, {"temperature", 0},
                                             {"max_tokens", 4}, {"logprobs", 3}}));
  const json& lp = k["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 4u);
  EXPECT_EQ(lp["token_logprobs"].size(), 4u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 3u);
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(CompletionsApi, PromptLongerThanTheContextIs400WithBothLengths) {
  std::vector<int> ids(200, 65);
  const json e = error(post("/v1/completions", {{"model", "tiny-chat"}, {"prompt", ids}}), 400);
  const std::string msg = e["message"];
  EXPECT_NE(msg.find("200"), std::string::npos) << msg;
  EXPECT_NE(msg.find("128"), std::string::npos) << msg;
  EXPECT_EQ(e["code"], "context_length_exceeded");
}

TEST_F(CompletionsApi, BadRequestsName400Fields) {
  const json msgs = {{{"role", "user"}, {"content", "Hi"}}};
  auto expect_param = [&](const std::string& path, const json& body, const std::string& param) {
    const json e = error(post(path, body), 400);
    EXPECT_EQ(e["param"], param) << body.dump() << " -> " << e.dump();
  };
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", msgs}, {"n", 2}}, "n");
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", msgs}, {"temperature", 3}}, "temperature");
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", msgs}, {"top_p", "x"}}, "top_p");
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", msgs}, {"max_tokens", 0}}, "max_tokens");
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", msgs}, {"stop", {1, 2}}}, "stop");
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", msgs}, {"top_logprobs", 2}}, "top_logprobs");
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}, {"messages", json::array()}}, "messages");
  expect_param("/v1/chat/completions", {{"model", "tiny-chat"}}, "messages");
  expect_param("/v1/chat/completions", {{"messages", msgs}}, "model");
  expect_param("/v1/chat/completions", {{"model", "tiny-plain"}, {"messages", msgs}}, "model");  // no template
  expect_param("/v1/chat/completions", {{"model", "some-bert"}, {"messages", msgs}}, "model");
  expect_param("/v1/completions", {{"model", "tiny-chat"}, {"prompt", {"a", "b"}}}, "prompt");
  expect_param("/v1/completions", {{"model", "tiny-chat"}, {"prompt", {1, 99999}}}, "prompt");
  expect_param("/v1/completions", {{"model", "tiny-chat"}, {"prompt", "a"}, {"logprobs", 9}}, "logprobs");
  auto bad = client_->Post("/v1/chat/completions", "{not json", "application/json");
  EXPECT_EQ(error(bad, 400)["code"], "invalid_json");
  const json nf = error(post("/v1/chat/completions", {{"model", "no-such-model"}, {"messages", msgs}}), 404);
  EXPECT_EQ(nf["code"], "model_not_found");
  // The plain model still serves /v1/completions.
  EXPECT_EQ(ok(post("/v1/completions", {{"model", "tiny-plain"}, {"prompt", "Hi"}, {"max_tokens", 2}}))["usage"]
                ["completion_tokens"], 2);
}

TEST_F(CompletionsApi, ConcurrentRequestsAreSerialisedAndCorrect) {
  const json& c = ref_case(1);
  const json body = {{"model", "tiny-chat"}, {"prompt", c["prompt"]}, {"temperature", 0}, {"max_tokens", 24}};
  std::vector<std::string> texts(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&, i] {
      httplib::Client cl("127.0.0.1", server_->port());
      cl.set_read_timeout(120, 0);
      auto r = cl.Post("/v1/completions", body.dump(), "application/json");
      if (r && r->status == 200) texts[i] = json::parse(r->body)["choices"][0]["text"];
    });
  for (auto& t : threads) t.join();
  for (const std::string& t : texts) EXPECT_EQ(t, c["greedy_text"]);
}

}  // namespace

// Ollama's API end to end: the server in-process on a free loopback port, a temp store holding the
// tiny chat LLM (tests/fixtures/llm/tiny-llama-chat, greedy outputs from transformers in its
// reference.json) and the tiny BERT embedder (tests/fixtures/encoders/tiny-bert-e5), queried with
// httplib's client. Also the request parsers (serve/ollama_requests.h) alone.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "serve/ollama_requests.h"
#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

const fs::path kLlm = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";
const fs::path kBert = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";

// NDJSON: one JSON object per line, every line ending in "\n".
std::vector<json> parse_ndjson(const std::string& body, bool* well_formed) {
  std::vector<json> out;
  *well_formed = !body.empty() && body.back() == '\n';
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find('\n', pos);
    if (end == std::string::npos) break;
    const json j = json::parse(body.substr(pos, end - pos), nullptr, false);
    if (j.is_discarded() || !j.is_object()) *well_formed = false;
    else out.push_back(j);
    pos = end + 1;
  }
  return out;
}

double norm(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  return std::sqrt(ss);
}

class OllamaApi : public test::ServerSuite<OllamaApi> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-ollama-api");
    const fs::path store = dir_ / "models";
    test::add_store_model(store, "tiny-chat", "llama", "safetensors", "f32", kLlm, /*list_files=*/true);
    test::add_store_model(store, "tiny-bert", "bert", "safetensors", "f32", kBert, /*list_files=*/true);
    ref_ = new json(json::parse(std::ifstream(kLlm / "reference.json")));
    embed_ref_ = new json(json::parse(std::ifstream(kBert / "reference.json")));
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    opts.log_requests = false;
    server_ = std::make_unique<test::RunningServer>(opts);
  }
  static void TearDownTestSuite() {
    ServerSuite::TearDownTestSuite();
    delete ref_;
    delete embed_ref_;
  }

  // Ollama's error shape: exactly {"error": "message"}; returns the message.
  std::string error(const httplib::Result& r, int status) {
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j.size(), 1u) << r->body;
    EXPECT_TRUE(j["error"].is_string()) << r->body;
    return j.value("error", "");
  }
  // A streamed generation: its lines, checked for NDJSON and exactly one final done line.
  std::vector<json> stream(const std::string& path, const json& body) {
    const auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/x-ndjson");
    bool well_formed = false;
    std::vector<json> lines = parse_ndjson(r->body, &well_formed);
    EXPECT_TRUE(well_formed) << r->body;
    EXPECT_GE(lines.size(), 2u);
    for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["done"], i + 1 == lines.size()) << lines[i];
    return lines;
  }
  static void expect_stats(const json& j, int64_t prompt_tokens, int64_t eval_tokens) {
    EXPECT_EQ(j["done"], true);
    EXPECT_EQ(j["prompt_eval_count"], prompt_tokens);
    EXPECT_EQ(j["eval_count"], eval_tokens);
    for (const char* k : {"total_duration", "load_duration", "prompt_eval_duration", "eval_duration"})
      EXPECT_TRUE(j[k].is_number_integer() && j[k].get<int64_t>() >= 0) << k << ": " << j;
    EXPECT_GT(j["total_duration"].get<int64_t>(), j["eval_duration"].get<int64_t>());
    EXPECT_GT(j["eval_duration"].get<int64_t>(), 0);
  }
  const json& ref_case(size_t i) { return (*ref_)["cases"][i]; }

  static inline json* ref_ = nullptr;
  static inline json* embed_ref_ = nullptr;
};

TEST_F(OllamaApi, Version) {
  const json j = ok(client_->Get("/api/version"));
  EXPECT_EQ(j["version"], serve::kEngineVersion);
}

TEST_F(OllamaApi, TagsListsTheStoreWithLatestTags) {
  const json j = ok(client_->Get("/api/tags"));
  ASSERT_EQ(j["models"].size(), 2u) << j;
  const json& bert = j["models"][0];
  EXPECT_EQ(bert["name"], "tiny-bert:latest");
  EXPECT_EQ(bert["model"], "tiny-bert:latest");
  EXPECT_EQ(bert["modified_at"], "2023-11-14T22:13:20.000000Z");  // the manifest's created: 1700000000
  EXPECT_GT(bert["size"].get<uint64_t>(), fs::file_size(kBert / "model.safetensors"));
  EXPECT_EQ(bert["digest"].get<std::string>().size(), 64u);
  EXPECT_EQ(bert["details"]["format"], "safetensors");
  EXPECT_EQ(bert["details"]["family"], "bert");
  EXPECT_EQ(bert["details"]["families"], json::array({"bert"}));
  EXPECT_EQ(bert["details"]["quantization_level"], "F32");
  // float32 weights: 4 bytes a parameter, the file less its JSON header (a few KiB); "39.52K" has
  // two decimals, so +-5 parameters.
  const double file = static_cast<double>(fs::file_size(kBert / "model.safetensors"));
  const std::string size = bert["details"]["parameter_size"];
  ASSERT_TRUE(size.ends_with("K")) << size;
  EXPECT_LE(std::stod(size) * 1e3 * 4, file + 20) << size;
  EXPECT_GE(std::stod(size) * 1e3 * 4, file - 8192) << size;
  EXPECT_EQ(j["models"][1]["name"], "tiny-chat:latest");
  EXPECT_NE(j["models"][1]["digest"], bert["digest"]);
}

TEST_F(OllamaApi, ShowGivesDetailsModelInfoTemplateAndCapabilities) {
  const json chat = ok(post("/api/show", {{"model", "tiny-chat:latest"}}));
  EXPECT_EQ(chat["details"]["family"], "llama");
  EXPECT_EQ(chat["capabilities"], json::array({"completion"}));
  EXPECT_EQ(chat["model_info"]["general.architecture"], "llama");
  EXPECT_EQ(chat["model_info"]["llama.context_length"], 128);
  EXPECT_EQ(chat["model_info"]["llama.embedding_length"], 64);
  EXPECT_EQ(chat["model_info"]["llama.block_count"], 2);
  EXPECT_GT(chat["model_info"]["general.parameter_count"].get<uint64_t>(), 10000u);
  EXPECT_NE(chat["template"].get<std::string>().find("<|im_start|>"), std::string::npos);
  EXPECT_TRUE(chat["modified_at"].is_string());
  // older clients send "name"
  const json bert = ok(post("/api/show", {{"name", "tiny-bert"}}));
  EXPECT_EQ(bert["capabilities"], json::array({"embedding"}));
  EXPECT_EQ(bert["model_info"]["bert.embedding_length"], 32);
  EXPECT_EQ(bert["template"], "");
  EXPECT_NE(error(post("/api/show", {{"model", "nope"}}), 404).find("\"nope\" not found"), std::string::npos);
  EXPECT_NE(error(post("/api/show", {{"model", "tiny-chat:7b"}}), 404).find("tiny-chat:7b"), std::string::npos);
  EXPECT_EQ(error(post("/api/show", json::object()), 400), "model is required");
}

TEST_F(OllamaApi, GenerateNonStreamingMatchesTransformersGreedy) {
  const json& c = ref_case(3);  // chat case: the prompt goes through the chat template
  const auto r = post("/api/generate", {{"model", "tiny-chat"}, {"prompt", "Hi there"}, {"stream", false},
                                        {"options", {{"temperature", 0}, {"num_predict", 24}}}});
  const json j = ok(r);
  EXPECT_EQ(r->get_header_value("X-Npu-Backend"), "host");
  EXPECT_EQ(j["model"], "tiny-chat");
  EXPECT_EQ(j["response"], c["greedy_text"]);
  EXPECT_EQ(j["done_reason"], "length");
  EXPECT_TRUE(j["created_at"].get<std::string>().ends_with("Z"));
  expect_stats(j, c["prompt_ids"].size(), 24);
  // context: prompt then response ids
  std::vector<int32_t> ctx = c["prompt_ids"].get<std::vector<int32_t>>();
  for (int32_t id : c["greedy_ids"].get<std::vector<int32_t>>()) ctx.push_back(id);
  EXPECT_EQ(j["context"].get<std::vector<int32_t>>(), ctx);
}

TEST_F(OllamaApi, GenerateRawSkipsTheTemplate) {
  const json& c = ref_case(0);
  const json j = ok(post("/api/generate", {{"model", "tiny-chat:latest"}, {"prompt", c["prompt"]}, {"raw", true},
                                           {"stream", false}, {"options", {{"temperature", 0}, {"num_predict", 24}}}}));
  EXPECT_EQ(j["response"], c["greedy_text"]);
  EXPECT_EQ(j["prompt_eval_count"], c["prompt_ids"].size());
}

TEST_F(OllamaApi, GenerateStreamsByDefault) {
  const json& c = ref_case(3);
  const std::vector<json> lines =
      stream("/api/generate", {{"model", "tiny-chat"}, {"prompt", "Hi there"},
                               {"options", {{"temperature", 0}, {"num_predict", 24}}}});
  ASSERT_FALSE(lines.empty());
  std::string text;
  for (const json& l : lines) {
    EXPECT_EQ(l["model"], "tiny-chat");
    text += l["response"].get<std::string>();
  }
  EXPECT_GT(lines.size(), 5u);  // piece by piece, not all at once
  EXPECT_EQ(text, c["greedy_text"]);
  EXPECT_EQ(lines.back()["response"], "");
  EXPECT_EQ(lines.back()["done_reason"], "length");
  EXPECT_EQ(lines.back()["backend"], "host");
  expect_stats(lines.back(), c["prompt_ids"].size(), 24);
}

TEST_F(OllamaApi, GenerateSeedIsDeterministicAndStopCuts) {
  const json body = {{"model", "tiny-chat"}, {"prompt", "Hello"}, {"stream", false},
                     {"options", {{"seed", 7}, {"temperature", 1.0}, {"top_k", 0}, {"top_p", 1.0}, {"num_predict", 12}}}};
  const json a = ok(post("/api/generate", body)), b = ok(post("/api/generate", body));
  EXPECT_EQ(a["response"], b["response"]);
  EXPECT_EQ(a["eval_count"], 12);
  const std::string full = ref_case(3)["greedy_text"];
  const std::string stop = full.substr(full.find('J'), 1);
  const json s = ok(post("/api/generate", {{"model", "tiny-chat"}, {"prompt", "Hi there"}, {"stream", false},
                                           {"options", {{"temperature", 0}, {"num_predict", 24}, {"stop", {stop}}}}}));
  EXPECT_EQ(s["response"], full.substr(0, full.find(stop)));
  EXPECT_EQ(s["done_reason"], "stop");
}

TEST_F(OllamaApi, ChatStreamAndNot) {
  const json& c = ref_case(4);
  const json opts = {{"temperature", 0}, {"num_predict", 24}};
  const json j = ok(post("/api/chat", {{"model", "tiny-chat"}, {"messages", c["messages"]}, {"stream", false}, {"options", opts}}));
  EXPECT_EQ(j["message"]["role"], "assistant");
  EXPECT_EQ(j["message"]["content"], c["greedy_text"]);
  EXPECT_FALSE(j.contains("context"));
  expect_stats(j, c["prompt_ids"].size(), 24);

  const std::vector<json> lines = stream("/api/chat", {{"model", "tiny-chat"}, {"messages", c["messages"]}, {"options", opts}});
  std::string text;
  for (const json& l : lines) {
    EXPECT_EQ(l["message"]["role"], "assistant");
    text += l["message"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, c["greedy_text"]);
  EXPECT_EQ(lines.back()["done_reason"], "length");
}

TEST_F(OllamaApi, EmptyPromptOrMessagesLoadTheModel) {
  const json g = ok(post("/api/generate", {{"model", "tiny-chat"}}));
  EXPECT_EQ(g["done"], true);
  EXPECT_EQ(g["done_reason"], "load");
  EXPECT_EQ(g["response"], "");
  const json c = ok(post("/api/chat", {{"model", "tiny-chat"}, {"messages", json::array()}}));
  EXPECT_EQ(c["done_reason"], "load");
  EXPECT_EQ(c["message"]["content"], "");
}

TEST_F(OllamaApi, PsShowsResidentModelsWithDevice) {
  ok(post("/api/generate", {{"model", "tiny-chat"}}));  // resident now
  const json j = ok(client_->Get("/api/ps"));
  const json* chat = nullptr;
  for (const json& m : j["models"])
    if (m["name"] == "tiny-chat:latest") chat = &m;
  ASSERT_NE(chat, nullptr) << j;
  EXPECT_EQ((*chat)["model"], "tiny-chat:latest");
  EXPECT_EQ((*chat)["kind"], "llm");
  EXPECT_EQ((*chat)["device"], "host");
  EXPECT_EQ((*chat)["size_vram"], 0);
  EXPECT_GT((*chat)["size"].get<uint64_t>(), 0u);
  EXPECT_EQ((*chat)["details"]["family"], "llama");
  EXPECT_EQ((*chat)["digest"].get<std::string>().size(), 64u);
  EXPECT_TRUE((*chat)["expires_at"].is_string());
}

TEST_F(OllamaApi, EmbedMatchesSentenceTransformers) {
  const json& in = (*embed_ref_)["inputs"];
  const auto r = post("/api/embed", {{"model", "tiny-bert"}, {"input", {in[0]["text"], in[1]["text"]}}});
  const json j = ok(r);
  EXPECT_EQ(r->get_header_value("X-Npu-Backend"), "host");
  EXPECT_EQ(j["model"], "tiny-bert");
  ASSERT_EQ(j["embeddings"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<float> v = j["embeddings"][i].get<std::vector<float>>(), want = in[i]["embedding"];
    ASSERT_EQ(v.size(), 32u);
    EXPECT_NEAR(norm(v), 1.0, 1e-5);
    for (size_t k = 0; k < v.size(); ++k) EXPECT_NEAR(v[k], want[k], 1e-4) << i << "," << k;
  }
  EXPECT_EQ(j["prompt_eval_count"], in[0]["ids"].size() + in[1]["ids"].size());
  EXPECT_GT(j["total_duration"].get<int64_t>(), 0);
  // one string; legacy /api/embeddings
  const json one = ok(post("/api/embed", {{"model", "tiny-bert:latest"}, {"input", in[2]["text"]}}));
  EXPECT_EQ(one["embeddings"].size(), 1u);
  const json legacy = ok(post("/api/embeddings", {{"model", "tiny-bert"}, {"prompt", in[2]["text"]}}));
  EXPECT_EQ(legacy.size(), 1u);
  const std::vector<float> lv = legacy["embedding"].get<std::vector<float>>(), ov = one["embeddings"][0];
  ASSERT_EQ(lv.size(), ov.size());
  for (size_t k = 0; k < lv.size(); ++k) EXPECT_NEAR(lv[k], ov[k], 1e-5);
  // an empty input loads only
  EXPECT_EQ(ok(post("/api/embed", {{"model", "tiny-bert"}, {"input", ""}}))["embeddings"], json::array());
}

TEST_F(OllamaApi, EmbedTruncateFalseRefusesLongInput) {
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "word ";
  const json cut = ok(post("/api/embed", {{"model", "tiny-bert"}, {"input", long_text}}));
  EXPECT_EQ(cut["prompt_eval_count"], 64);  // the fixture's max length
  const std::string msg = error(post("/api/embed", {{"model", "tiny-bert"}, {"input", long_text}, {"truncate", false}}), 400);
  EXPECT_NE(msg.find("input[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncate"), std::string::npos) << msg;
}

TEST_F(OllamaApi, ErrorsAreOllamaShaped) {
  EXPECT_EQ(error(client_->Post("/api/generate", "{not json", "application/json"), 400),
            "the request body is not valid JSON");
  EXPECT_EQ(error(post("/api/generate", {{"prompt", "x"}}), 400), "model is required");
  EXPECT_NE(error(post("/api/generate", {{"model", "missing"}, {"prompt", "x"}}), 404).find("model \"missing\" not found"),
            std::string::npos);
  EXPECT_NE(error(post("/api/chat", {{"model", "tiny-chat:q4"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}), 404)
                .find("tiny-chat:q4"), std::string::npos);
  EXPECT_NE(error(post("/api/generate", {{"model", "../etc"}, {"prompt", "x"}}), 404).find("not found"), std::string::npos);
  EXPECT_NE(error(post("/api/generate", {{"model", "tiny-bert"}, {"prompt", "x"}}), 400).find("does not support generate"),
            std::string::npos);
  EXPECT_NE(error(post("/api/embed", {{"model", "tiny-chat"}, {"input", "x"}}), 400).find("does not support embeddings"),
            std::string::npos);
  EXPECT_NE(error(post("/api/generate", {{"model", "tiny-chat"}, {"prompt", "x"}, {"format", "json"}}), 400).find("format"),
            std::string::npos);
  EXPECT_NE(error(post("/api/generate", {{"model", "tiny-chat"}, {"prompt", "x"}, {"images", {"aGk="}}}), 400).find("images"),
            std::string::npos);
  EXPECT_NE(error(post("/api/chat", {{"model", "tiny-chat"}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
                                     {"tools", {{{"type", "function"}}}}}), 400).find("tools"), std::string::npos);
  EXPECT_NE(error(post("/api/generate", {{"model", "tiny-chat"}, {"prompt", "x"}, {"options", {{"temperature", -1}}}}), 400)
                .find("options.temperature"), std::string::npos);
  EXPECT_NE(error(post("/api/generate", {{"model", "tiny-chat"}, {"prompt", "x"}, {"options", {{"top_k", "many"}}}}), 400)
                .find("options.top_k must be an integer"), std::string::npos);
  std::string huge;
  for (int i = 0; i < 200; ++i) huge += "many words here ";
  EXPECT_NE(error(post("/api/generate", {{"model", "tiny-chat"}, {"prompt", huge}, {"stream", false}}), 400)
                .find("context of 128 tokens"), std::string::npos);
  // the server is still fine
  EXPECT_EQ(ok(post("/api/generate", {{"model", "tiny-chat"}, {"prompt", "Hi"}, {"stream", false},
                                      {"options", {{"num_predict", 2}}}}))["eval_count"], 2);
}

// ---- the parsers alone ------------------------------------------------------------------------

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const serve::OllamaError& e) {
    return e.status;
  }
  return 0;
}

TEST(OllamaRequests, ModelNamesAndTags) {
  EXPECT_EQ(serve::ollama_model_name("gemma3-270m"), "gemma3-270m");
  EXPECT_EQ(serve::ollama_model_name("gemma3-270m:latest"), "gemma3-270m");
  EXPECT_EQ(status_of([] { serve::ollama_model_name("gemma3:270m"); }), 404);
  EXPECT_EQ(status_of([] { serve::ollama_model_name(":latest"); }), 404);
  EXPECT_EQ(status_of([] { serve::ollama_model_name(""); }), 400);
}

TEST(OllamaRequests, OptionsMapOntoSampling) {
  const serve::OllamaOptions d = serve::parse_ollama_options(json());
  EXPECT_FLOAT_EQ(d.sampling.temperature, 0.8f);  // Ollama's defaults
  EXPECT_EQ(d.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(d.sampling.top_p, 0.9f);
  EXPECT_TRUE(d.random_seed);
  EXPECT_EQ(d.max_tokens, 0);
  const serve::OllamaOptions o = serve::parse_ollama_options(
      {{"temperature", 0}, {"top_k", 5}, {"top_p", 0.5}, {"min_p", 0.1}, {"seed", 42}, {"num_predict", 9},
       {"stop", {"a", "bc"}}, {"repeat_penalty", 1.2}, {"presence_penalty", 0.5}, {"frequency_penalty", -0.5},
       {"num_ctx", 4096}, {"num_thread", 8}});
  EXPECT_EQ(o.sampling.temperature, 0.0f);
  EXPECT_EQ(o.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(o.sampling.top_p, 0.5f);
  EXPECT_FLOAT_EQ(o.sampling.min_p, 0.1f);
  EXPECT_FALSE(o.random_seed);
  EXPECT_EQ(o.sampling.seed, 42u);
  EXPECT_EQ(o.max_tokens, 9);
  EXPECT_EQ(o.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_FLOAT_EQ(o.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(o.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(o.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(serve::parse_ollama_options({{"num_predict", -1}}).max_tokens, 0);
  EXPECT_EQ(serve::parse_ollama_options({{"num_predict", -2}}).max_tokens, 0);
  EXPECT_TRUE(serve::parse_ollama_options({{"seed", -1}}).random_seed);
  for (const json& bad : {json{{"num_predict", 0}}, json{{"num_predict", -3}}, json{{"top_p", 1.5}},
                          json{{"temperature", "hot"}}, json{{"stop", {1}}}, json{{"stop", {""}}},
                          json{{"mirostat", 2}}, json{{"typical_p", 0.5}}, json{{"repeat_penalty", 0}}, json::array()})
    EXPECT_EQ(status_of([&] { serve::parse_ollama_options(bad); }), 400) << bad;
}

TEST(OllamaRequests, GenerateChatEmbedBodies) {
  const serve::OllamaGenerateRequest g = serve::parse_ollama_generate(
      R"({"model":"m:latest","prompt":"p","system":"s","raw":true,"context":[1,2],"keep_alive":"5m"})");
  EXPECT_EQ(g.model, "m");
  EXPECT_EQ(g.prompt, "p");
  EXPECT_EQ(g.system, "s");
  EXPECT_TRUE(g.raw);
  EXPECT_TRUE(g.stream);  // Ollama's default
  EXPECT_EQ(g.context, (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(g.load_only);
  EXPECT_TRUE(serve::parse_ollama_generate(R"({"model":"m"})").load_only);
  EXPECT_FALSE(serve::parse_ollama_generate(R"({"model":"m","prompt":"x","stream":false,"format":""})").stream);

  const serve::OllamaChatRequest c = serve::parse_ollama_chat(
      R"({"model":"m","messages":[{"role":"user","content":"hi","images":[]}],"stream":false,"think":false})");
  ASSERT_EQ(c.messages.size(), 1u);
  EXPECT_EQ(c.messages[0], (json{{"role", "user"}, {"content", "hi"}}));
  EXPECT_FALSE(c.stream);

  const serve::OllamaEmbedRequest e = serve::parse_ollama_embed(R"({"model":"m","input":["a","b"],"truncate":false,"dimensions":8})");
  EXPECT_EQ(e.inputs, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(e.truncate);
  EXPECT_EQ(e.dimensions, 8);
  const serve::OllamaEmbedRequest l = serve::parse_ollama_embeddings(R"({"model":"m","prompt":"x"})");
  EXPECT_TRUE(l.legacy);
  EXPECT_EQ(l.inputs, (std::vector<std::string>{"x"}));

  for (const char* bad :
       {"", "[]", "{\"model\":3}", "{\"model\":\"m\",\"prompt\":5}", "{\"model\":\"m\",\"stream\":\"yes\"}",
        "{\"model\":\"m\",\"context\":[\"a\"]}", "{\"model\":\"m\",\"format\":{\"type\":\"object\"}}",
        "{\"model\":\"m\",\"think\":true}", "{\"model\":\"m\",\"template\":\"{{.Prompt}}\"}",
        "{\"model\":\"m\",\"suffix\":\"x\"}", "{\"model\":\"m\",\"options\":[]}"})
    EXPECT_EQ(status_of([&] { serve::parse_ollama_generate(bad); }), 400) << bad;
  for (const char* bad : {"{\"model\":\"m\",\"messages\":{}}", "{\"model\":\"m\",\"messages\":[3]}",
                          "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}",
                          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":7}]}",
                          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"images\":[\"aGk=\"]}]}"})
    EXPECT_EQ(status_of([&] { serve::parse_ollama_chat(bad); }), 400) << bad;
  for (const char* bad : {"{\"model\":\"m\",\"input\":3}", "{\"model\":\"m\",\"input\":[\"a\",1]}",
                          "{\"model\":\"m\",\"input\":[\"\"]}", "{\"model\":\"m\",\"dimensions\":0}",
                          "{\"model\":\"m\",\"truncate\":1}"})
    EXPECT_EQ(status_of([&] { serve::parse_ollama_embed(bad); }), 400) << bad;
}

}  // namespace

// LanguageModel + generate() on the tiny chat LLM fixture (tests/fixtures/llm/tiny-llama-chat,
// scripts/make_llm_fixtures.py): a random-init Llama with a byte-level BPE tokenizer and a
// ChatML-style template. Greedy generation must reproduce transformers' generate() ids; the rest
// (stop strings, stop tokens, seeds, limits, cancellation, log-probs) is checked against it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "pipeline/llm.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

const fs::path kFixture = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";

struct Case {
  std::string kind, prompt, greedy_text;
  std::vector<int32_t> prompt_ids, greedy_ids;
  json messages;
};

std::vector<Case> load_cases() {
  const json j = json::parse(std::ifstream(kFixture / "reference.json"));
  std::vector<Case> out;
  for (const json& c : j["cases"])
    out.push_back({c["kind"], c["prompt"], c["greedy_text"], c["prompt_ids"].get<std::vector<int32_t>>(),
                   c["greedy_ids"].get<std::vector<int32_t>>(), c.value("messages", json())});
  return out;
}

fs::path make_temp_copy() {
  char tmpl[] = "/tmp/xdna-llm-XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp failed");
  const fs::path dir = fs::path(d) / "model";
  fs::copy(kFixture, dir, fs::copy_options::recursive);
  return dir;
}

GenerateRequest greedy(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerateRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

class Llm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions o;
    o.kv_dtype = DType::F32;  // the transformers reference ids are compared against an f32 cache
    model_ = LanguageModel::load(kFixture.string(), o).release();
    cases_ = new std::vector<Case>(load_cases());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete cases_;
  }
  static LanguageModel* model_;
  static std::vector<Case>* cases_;
};
LanguageModel* Llm::model_ = nullptr;
std::vector<Case>* Llm::cases_ = nullptr;

TEST_F(Llm, LoadsTheHfDirectory) {
  EXPECT_EQ(model_->name(), "tiny-llama-chat");
  EXPECT_TRUE(model_->has_chat_template());
  EXPECT_TRUE(model_->add_bos());
  EXPECT_EQ(model_->context_length(), 128);
  EXPECT_EQ(model_->decoder().spec().family, "llama");
  EXPECT_EQ(model_->decoder().spec().bos_token_id, 0);
  const std::vector<int32_t>& stops = model_->stop_token_ids();
  for (int32_t id : {1, 3}) EXPECT_NE(std::find(stops.begin(), stops.end(), id), stops.end()) << id;
  EXPECT_EQ(std::find(stops.begin(), stops.end(), 0), stops.end());  // BOS is not a stop token
}

TEST_F(Llm, PromptsAndChatTemplateMatchTransformers) {
  for (const Case& c : *cases_) {
    if (c.kind == "chat") {
      EXPECT_EQ(model_->render_chat(c.messages), c.prompt);
    }
    EXPECT_EQ(encode_prompt(*model_, c.prompt), c.prompt_ids) << c.prompt;  // one BOS, never two
  }
}

TEST_F(Llm, GreedyEqualsTransformersGenerate) {
  for (const Case& c : *cases_) {
    std::string streamed;
    int pieces_with_token = 0;
    const GenerateResult r = generate(*model_, greedy(c.prompt_ids, 24), [&](const GeneratedPiece& p) {
      streamed += p.text;
      pieces_with_token += p.token.id >= 0;
      return true;
    });
    EXPECT_EQ(r.tokens, c.greedy_ids) << c.prompt;
    EXPECT_EQ(r.text, c.greedy_text) << c.prompt;
    EXPECT_EQ(streamed, r.text);
    EXPECT_EQ(pieces_with_token, 24);
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(c.prompt_ids.size()));
    EXPECT_EQ(r.completion_tokens, 24);
    EXPECT_GT(r.prefill_ms, 0.0);
    EXPECT_FALSE(r.report.ops.empty());
  }
}

// A stop string taken from the middle of the greedy text: the output ends right before its first
// occurrence, and no streamed piece ever shows any of it.
TEST_F(Llm, StopStringCutsAndIsNeverStreamed) {
  const Case& c = (*cases_)[0];
  const std::string& full = c.greedy_text;
  // Three characters of plain ASCII or complete UTF-8, away from any U+FFFD.
  size_t at = std::string::npos;
  for (size_t i = full.size() / 3; i + 3 <= full.size(); ++i) {
    const std::string s = full.substr(i, 3);
    if (s.find("\xEF\xBF\xBD") == std::string::npos && (static_cast<unsigned char>(s[0]) & 0xC0) != 0x80 &&
        (static_cast<unsigned char>(full[i + 3]) & 0xC0) != 0x80) {
      at = i;
      break;
    }
  }
  ASSERT_NE(at, std::string::npos);
  const std::string stop = full.substr(at, 3);
  GenerateRequest req = greedy(c.prompt_ids, 24);
  req.stop = {"never-there", stop};
  std::string streamed;
  const GenerateResult r = generate(*model_, req, [&](const GeneratedPiece& p) {
    streamed += p.text;
    return true;
  });
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(streamed, r.text);
  EXPECT_LT(r.tokens.size(), 24u);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(c.greedy_ids.begin(), c.greedy_ids.begin() + r.tokens.size()));
}

TEST_F(Llm, StopTokenEndsGenerationAndMakesNoText) {
  const Case& c = (*cases_)[0];
  // Declare the 6th greedy token an EOS (its first occurrence): generation must stop on it.
  size_t k = 5;
  while (std::find(c.greedy_ids.begin(), c.greedy_ids.begin() + k, c.greedy_ids[k]) != c.greedy_ids.begin() + k) ++k;
  const fs::path dir = make_temp_copy();
  std::ofstream(dir / "generation_config.json") << json{{"eos_token_id", {1, 3, c.greedy_ids[k]}}}.dump();
  const auto lm = LanguageModel::load(dir.string());
  const GenerateResult r = generate(*lm, greedy(c.prompt_ids, 24));
  fs::remove_all(dir.parent_path());
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.tokens, std::vector<int32_t>(c.greedy_ids.begin(), c.greedy_ids.begin() + k + 1));
  EXPECT_EQ(r.completion_tokens, static_cast<int64_t>(k + 1));
  EXPECT_EQ(r.text, lm->tokenizer().decode(std::vector<int32_t>(c.greedy_ids.begin(), c.greedy_ids.begin() + k)));
}

TEST_F(Llm, SameSeedSameTokens) {
  GenerateRequest req;
  req.prompt = (*cases_)[1].prompt_ids;
  req.max_tokens = 16;
  req.sampling.temperature = 1.0f;
  req.sampling.seed = 42;
  const GenerateResult a = generate(*model_, req), b = generate(*model_, req);
  req.sampling.seed = 43;
  const GenerateResult c = generate(*model_, req);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  EXPECT_NE(a.tokens, c.tokens);
  EXPECT_NE(a.tokens, (*cases_)[1].greedy_ids);  // sampling, not argmax
}

TEST_F(Llm, MaxTokensAndContextEndGiveLength) {
  const Case& c = (*cases_)[0];  // 20 prompt tokens
  const GenerateResult five = generate(*model_, greedy(c.prompt_ids, 5));
  EXPECT_EQ(five.finish_reason, "length");
  EXPECT_EQ(five.tokens, std::vector<int32_t>(c.greedy_ids.begin(), c.greedy_ids.begin() + 5));

  LoadOptions small;
  small.context_length = 32;
  const auto lm = LanguageModel::load(kFixture.string(), small);
  EXPECT_EQ(lm->context_length(), 32);
  const GenerateResult full = generate(*lm, greedy(c.prompt_ids, 0));  // 0 = until the context is full
  EXPECT_EQ(full.finish_reason, "length");
  EXPECT_EQ(full.tokens, std::vector<int32_t>(c.greedy_ids.begin(), c.greedy_ids.begin() + 12));
  const GenerateResult capped = generate(*lm, greedy(c.prompt_ids, 100));
  EXPECT_EQ(capped.tokens.size(), 12u);

  small.context_length = 16;
  const auto tiny = LanguageModel::load(kFixture.string(), small);
  try {
    generate(*tiny, greedy(c.prompt_ids, 4));
    FAIL() << "a 20-token prompt fit a 16-token context";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("20"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
  small.context_length = 1000;
  EXPECT_THROW(LanguageModel::load(kFixture.string(), small), std::invalid_argument);  // over 128
}

TEST_F(Llm, KvBudgetCapsTheContext) {
  LoadOptions o;
  o.memory_budget_bytes = 40 * model_->decoder().kv_cache_bytes(1);
  o.kv_dtype = model_->decoder().kv_dtype();  // the budget is counted in model_'s KV type
  const auto lm = LanguageModel::load(kFixture.string(), o);
  EXPECT_EQ(lm->context_length(), 40);
}

TEST_F(Llm, CancelStopsAtOnce) {
  int calls = 0;
  const GenerateResult r = generate(*model_, greedy((*cases_)[2].prompt_ids, 24), [&](const GeneratedPiece&) {
    return ++calls < 3;
  });
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.finish_reason, "stop");
}

TEST_F(Llm, LogprobsOfGreedyAreTheTopChoice) {
  GenerateRequest req = greedy((*cases_)[3].prompt_ids, 8);
  req.sampling.logprobs = true;
  req.sampling.top_logprobs = 3;
  const GenerateResult r = generate(*model_, req);
  ASSERT_EQ(r.logprobs.size(), r.tokens.size());
  for (size_t i = 0; i < r.logprobs.size(); ++i) {
    const TokenChoice& c = r.logprobs[i];
    EXPECT_EQ(c.id, r.tokens[i]);
    EXPECT_LE(c.logprob, 0.0f);
    ASSERT_EQ(c.top.size(), 3u);
    EXPECT_EQ(c.top[0].first, c.id);
    EXPECT_FLOAT_EQ(c.top[0].second, c.logprob);
    EXPECT_GE(c.top[0].second, c.top[1].second);
    EXPECT_GE(c.top[1].second, c.top[2].second);
  }
  EXPECT_TRUE(generate(*model_, greedy((*cases_)[3].prompt_ids, 4)).logprobs.empty());
}

TEST_F(Llm, BadRequestsThrow) {
  EXPECT_THROW(generate(*model_, greedy({}, 4)), std::invalid_argument);
  EXPECT_THROW(generate(*model_, greedy({0, 5000}, 4)), std::invalid_argument);  // outside the vocabulary
  GenerateRequest neg = greedy({0, 5}, 4);
  neg.sampling.temperature = -1.0f;
  EXPECT_THROW(generate(*model_, neg), std::invalid_argument);
}

TEST(LlmLoad, ErrorsNameThePathAndWhatIsMissing) {
  try {
    LanguageModel::load("/no/such/model");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/model"), std::string::npos) << e.what();
  }
  const fs::path dir = make_temp_copy();
  fs::remove(dir / "tokenizer.json");
  try {
    LanguageModel::load(dir.string());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
  fs::remove(dir / "config.json");
  EXPECT_THROW(LanguageModel::load(dir.string()), std::runtime_error);
  fs::remove_all(dir.parent_path());
}

TEST(LlmLoad, WithoutATemplateRenderChatThrows) {
  const fs::path dir = make_temp_copy();
  json tc = json::parse(std::ifstream(dir / "tokenizer_config.json"));
  tc.erase("chat_template");
  std::ofstream(dir / "tokenizer_config.json") << tc.dump();
  const auto lm = LanguageModel::load(dir.string());
  fs::remove_all(dir.parent_path());
  EXPECT_FALSE(lm->has_chat_template());
  EXPECT_THROW(lm->render_chat(json::array({{{"role", "user"}, {"content", "hi"}}})), std::runtime_error);
}

TEST(LlmLoad, ResolveModelPath) {
  EXPECT_EQ(resolve_model_path(kFixture.string()), kFixture.string());
  char tmpl[] = "/tmp/xdna-llm-store-XXXXXX";
  const std::string store = mkdtemp(tmpl);
  try {
    resolve_model_path("gemma-3-270m", store);  // the catalog alias of gemma3-270m
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("npu model pull gemma3-270m"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_model_path("no-such-model", store), std::runtime_error);
  fs::remove_all(store);
}

}  // namespace

// The catalog's Gemma 3 270M (a GGUF without a chat template), when it has been pulled into the
// default store: the built-in Gemma template renders as transformers renders Gemma 3's own
// (tests/fixtures/chat_templates), and greedy decoding matches llama.cpp (llama-cpp-python 0.3.36
// on the same file: 16 prompt ids, first 8 generated ids).
TEST(LlmRealModel, Gemma3_270mSlow) {
  std::string dir;
  try {
    dir = resolve_model_path("gemma3-270m");
  } catch (const std::runtime_error&) {
    GTEST_SKIP() << "gemma3-270m is not in the default store (`npu model pull gemma3-270m`)";
  }
  LoadOptions o;
  o.context_length = 256;
  const auto lm = LanguageModel::load(dir, o);
  ASSERT_TRUE(lm->has_chat_template());
  int compared = 0;
  for (const json& c : json::parse(std::ifstream(fs::path(XDNA_FIXTURE_DIR) / "chat_templates" / "cases.json"))) {
    if (c["template"] != "gemma-3-it.jinja" || !c.contains("expected")) continue;
    bool text_only = true;
    for (const json& m : c["messages"]) text_only = text_only && m["content"].is_string();
    if (!text_only) continue;
    EXPECT_EQ(lm->render_chat(c["messages"], c["add_generation_prompt"]), c["expected"]) << c["messages"].dump();
    ++compared;
  }
  EXPECT_GE(compared, 3);
  const std::string prompt = lm->render_chat(json::array({{{"role", "user"}, {"content", "Name three colours of the rainbow."}}}));
  const std::vector<int32_t> ids = encode_prompt(*lm, prompt);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 105, 2364, 107, 1567, 1806, 22640, 529, 506, 30591, 236761, 106, 107, 105, 4368, 107}));
  const GenerateResult r = generate(*lm, greedy(ids, 8));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1567, 1806, 22640, 529, 506, 30591, 236761, 217716}));
}

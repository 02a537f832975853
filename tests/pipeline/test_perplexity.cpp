// perplexity() on the tiny chat LLM fixture against transformers
// (tests/fixtures/llm/perplexity_tiny.json, scripts/make_perplexity_fixture.py), token_nll on
// hand-computed values, and the input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "pipeline/perplexity.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

// The transformers reference is compared at f32-cache tolerances: pin the KV cache to f32 (the
// default is f16).
std::unique_ptr<LanguageModel> load_f32_kv(const std::string& dir) {
  LoadOptions o;
  o.kv_dtype = DType::F32;
  return LanguageModel::load(dir, o);
}

const fs::path kLlm = fs::path(XDNA_FIXTURE_DIR) / "llm";

json reference() { return json::parse(std::ifstream(kLlm / "perplexity_tiny.json")); }

TEST(Perplexity, TokenNllIsMinusLogSoftmax) {
  const float logits[3] = {0.0f, std::log(3.0f), 0.0f};
  // softmax = {1, 3, 1} / 5
  EXPECT_NEAR(token_nll(logits, 3, 1), -std::log(3.0 / 5.0), 1e-6);
  EXPECT_NEAR(token_nll(logits, 3, 0), std::log(5.0), 1e-6);
  const float big[2] = {1000.0f, 1000.0f};  // no overflow: the maximum is subtracted
  EXPECT_NEAR(token_nll(big, 2, 0), std::log(2.0), 1e-9);
  EXPECT_THROW(token_nll(logits, 3, 3), std::invalid_argument);
  EXPECT_THROW(token_nll(logits, 3, -1), std::invalid_argument);
}

TEST(Perplexity, MatchesTransformersOnTinyModel) {
  const json ref = reference();
  const auto lm = load_f32_kv((kLlm / "tiny-llama-chat").string());
  const std::vector<int32_t> ids = lm->tokenizer().encode(ref["text"].get<std::string>(), false).ids;
  ASSERT_EQ(ids, ref["text_ids"].get<std::vector<int32_t>>());

  PerplexityOptions o;
  o.context = ref["context"];
  int64_t calls = 0;
  o.progress = [&](int64_t done, int64_t all, double ppl) {
    ++calls;
    EXPECT_EQ(done, calls);
    EXPECT_EQ(all, ref["windows"].get<int64_t>());
    EXPECT_GT(ppl, 1.0);
  };
  const PerplexityResult r = perplexity(*lm, ids, o);
  EXPECT_EQ(calls, ref["windows"].get<int64_t>());
  EXPECT_EQ(r.windows, ref["windows"].get<int64_t>());
  EXPECT_EQ(r.scored_tokens, ref["scored_tokens"].get<int64_t>());
  EXPECT_EQ(r.text_tokens, static_cast<int64_t>(ids.size()));
  const auto window_nll = ref["window_nll"].get<std::vector<double>>();
  ASSERT_EQ(r.window_nll.size(), window_nll.size());
  for (size_t w = 0; w < window_nll.size(); ++w)
    EXPECT_NEAR(r.window_nll[w], window_nll[w], 1e-4 * std::max(1.0, std::abs(window_nll[w]))) << "window " << w;
  EXPECT_NEAR(r.mean_nll, ref["mean_nll"].get<double>(), 1e-4 * ref["mean_nll"].get<double>());
  EXPECT_NEAR(r.perplexity / ref["perplexity"].get<double>(), 1.0, 1e-3);
}

TEST(Perplexity, MaxWindowsTakesTheFirstWindows) {
  const json ref = reference();
  const auto lm = load_f32_kv((kLlm / "tiny-llama-chat").string());
  const std::vector<int32_t> ids = ref["text_ids"].get<std::vector<int32_t>>();
  PerplexityOptions o;
  o.context = ref["context"];
  o.max_windows = 2;
  const PerplexityResult r = perplexity(*lm, ids, o);
  EXPECT_EQ(r.windows, 2);
  EXPECT_EQ(r.scored_tokens, 2 * o.context / 2);
  const auto window_nll = ref["window_nll"].get<std::vector<double>>();
  EXPECT_NEAR(r.mean_nll, (window_nll[0] + window_nll[1]) / 2, 1e-4 * std::abs(window_nll[0]));
}

TEST(Perplexity, RejectsBadContextAndShortText) {
  const auto lm = LanguageModel::load((kLlm / "tiny-llama-chat").string());
  const std::vector<int32_t> ids(40, 5);
  PerplexityOptions o;
  o.context = 7;
  EXPECT_THROW(perplexity(*lm, ids, o), std::invalid_argument);  // odd
  o.context = 0;
  EXPECT_THROW(perplexity(*lm, ids, o), std::invalid_argument);
  o.context = lm->context_length() + 2;
  EXPECT_THROW(perplexity(*lm, ids, o), std::invalid_argument);  // beyond the model
  o.context = 64;
  try {
    perplexity(*lm, ids, o);
    FAIL() << "40 tokens cannot fill a 64-token window";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("40 tokens"), std::string::npos) << e.what();
  }
}

}  // namespace

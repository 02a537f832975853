// CachedLanguageModel::generate (serve/llm_scheduler.cpp): concurrent generations on one model
// share batched decode steps, and each gives exactly what xdna::generate gives alone with the same
// request (tokens, text, finish reason, log-probs), greedy or seeded sampling. Also: a sequence
// joining while another decodes, one cancelled midway (its KV cache freed at once), one whose
// callback throws, a bad request, the max_batch limit and the metrics it records. On the tiny
// chat LLM fixture (tests/fixtures/llm/tiny-llama-chat).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "serve/model_cache.h"
#include "serve/system_info.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;
using namespace xdna::serve;

namespace {

const fs::path kFixture = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";

std::vector<std::vector<int32_t>> load_prompts() {
  const json j = json::parse(std::ifstream(kFixture / "reference.json"));
  std::vector<std::vector<int32_t>> out;
  for (const json& c : j["cases"]) out.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
  return out;
}

GenerateRequest request(const std::vector<int32_t>& prompt, int64_t max_tokens, float temperature, uint64_t seed) {
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

// What a generation gave, piece by piece as streamed.
struct Streamed {
  GenerateResult result;
  std::string streamed;
};

void expect_same(const Streamed& got, const GenerateResult& alone, const std::string& what) {
  EXPECT_EQ(got.result.tokens, alone.tokens) << what;
  EXPECT_EQ(got.result.text, alone.text) << what;
  EXPECT_EQ(got.streamed, alone.text) << what;
  EXPECT_EQ(got.result.finish_reason, alone.finish_reason) << what;
  EXPECT_EQ(got.result.prompt_tokens, alone.prompt_tokens) << what;
  EXPECT_EQ(got.result.completion_tokens, alone.completion_tokens) << what;
  ASSERT_EQ(got.result.logprobs.size(), alone.logprobs.size()) << what;
  for (size_t i = 0; i < alone.logprobs.size(); ++i) {
    EXPECT_EQ(got.result.logprobs[i].id, alone.logprobs[i].id) << what;
    EXPECT_EQ(got.result.logprobs[i].logprob, alone.logprobs[i].logprob) << what << " token " << i;  // bit-exact
    EXPECT_EQ(got.result.logprobs[i].top, alone.logprobs[i].top) << what << " token " << i;
  }
}

// A one-shot signal between threads.
class Signal {
 public:
  void set() {
    std::lock_guard<std::mutex> l(mu_);
    set_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

class LlmScheduler : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    alone_model_ = LanguageModel::load(kFixture.string()).release();
    prompts_ = new std::vector<std::vector<int32_t>>(load_prompts());
  }
  static void TearDownTestSuite() {
    delete alone_model_;
    delete prompts_;
  }
  static std::unique_ptr<CachedLanguageModel> cached(int max_batch) {
    auto m = std::make_unique<CachedLanguageModel>(LanguageModel::load(kFixture.string()), 0, max_batch, 16);
    m->name = "tiny";
    return m;
  }
  static Streamed run_one(CachedLanguageModel& m, const GenerateRequest& r) {
    Streamed out;
    out.result = m.generate(r, [&](const GeneratedPiece& p) {
      out.streamed += p.text;
      return true;
    });
    return out;
  }
  static LanguageModel* alone_model_;
  static std::vector<std::vector<int32_t>>* prompts_;
};
LanguageModel* LlmScheduler::alone_model_ = nullptr;
std::vector<std::vector<int32_t>>* LlmScheduler::prompts_ = nullptr;

// Six requests at once on a model that decodes four together: greedy, seeded sampling at
// several temperatures, top-p/top-k, a repetition penalty, log-probs, a stop string.
TEST_F(LlmScheduler, ConcurrentGenerationsEqualEachAlone) {
  const auto& p = *prompts_;
  std::vector<GenerateRequest> reqs = {
      request(p[0], 24, 0.0f, 0),  request(p[1], 30, 1.0f, 7),  request(p[2], 20, 0.7f, 11),
      request(p[3], 28, 1.3f, 3),  request(p[4], 16, 0.0f, 0),  request(p[0], 26, 0.9f, 99),
  };
  reqs[2].sampling.top_p = 0.9f;
  reqs[3].sampling.top_k = 20;
  reqs[3].sampling.logprobs = true;
  reqs[3].sampling.top_logprobs = 2;
  reqs[4].sampling.repetition_penalty = 1.3f;
  reqs[4].sampling.logprobs = true;
  std::vector<GenerateResult> alone;
  for (const auto& r : reqs) alone.push_back(generate(*alone_model_, r));
  reqs[5].stop = {alone[5].text.substr(alone[5].text.size() / 2, 3)};  // a stop string it does produce
  alone[5] = generate(*alone_model_, reqs[5]);
  EXPECT_NE(alone[0].tokens, alone[1].tokens);

  Metrics metrics;
  const auto m = cached(4);
  m->metrics = &metrics;
  std::vector<Streamed> runs(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) threads.emplace_back([&, i] { runs[i] = run_one(*m, reqs[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) expect_same(runs[i], alone[i], "request " + std::to_string(i));
  EXPECT_EQ(runs[5].result.finish_reason, "stop");

  const auto stats = m->scheduler_stats();
  EXPECT_EQ(stats.live_sequences, 0);
  EXPECT_EQ(stats.prefills, 6);
  int64_t decoded = 0;
  for (const auto& a : alone) decoded += a.completion_tokens - 1;  // the first token comes from the prefill
  EXPECT_EQ(stats.decode_rows, decoded);
  EXPECT_LT(stats.decode_steps, stats.decode_rows) << "no decode step ran more than one sequence";

  int64_t prompt = 0, completion = 0;
  for (const auto& a : alone) {
    prompt += a.prompt_tokens;
    completion += a.completion_tokens;
  }
  ModelCache cache((fs::temp_directory_path() / "xdna-llm-scheduler-empty-store").string());
  const std::string text = metrics.render_prometheus(cache, NpuInfo{});
  const auto has_line = [&](const std::string& kind, int64_t n) {
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);)
      if (l.starts_with("xdna_generated_tokens_total") && l.find("\"tiny\"") != std::string::npos &&
          l.find("\"" + kind + "\"") != std::string::npos && l.ends_with(" " + std::to_string(n)))
        return true;
    return false;
  };
  EXPECT_TRUE(has_line("prompt", prompt)) << text;
  EXPECT_TRUE(has_line("completion", completion)) << text;
}

// A decodes; while it is held in its callback, D joins and is cancelled after 3 pieces (its KV
// cache is freed before its generate() returns), then C joins and decodes alongside A.
TEST_F(LlmScheduler, JoinAndCancelWhileOthersDecode) {
  const auto& p = *prompts_;
  const GenerateRequest ra = request(p[4], 40, 0.8f, 5), rc = request(p[1], 20, 0.0f, 0),
                        rd = request(p[2], 24, 1.0f, 21);
  const GenerateResult alone_a = generate(*alone_model_, ra), alone_c = generate(*alone_model_, rc),
                       alone_d = generate(*alone_model_, rd);
  ASSERT_GE(alone_a.tokens.size(), 12u);
  ASSERT_GE(alone_d.tokens.size(), 4u);

  const auto m = cached(4);
  Signal a_at_4, c_started, go;
  std::atomic<int> a_pieces = 0;
  Streamed a, c, d;
  std::thread ta([&] {
    a.result = m->generate(ra, [&](const GeneratedPiece& piece) {
      a.streamed += piece.text;
      if (++a_pieces == 4) {
        a_at_4.set();
        go.wait();
      }
      return true;
    });
  });
  a_at_4.wait();
  EXPECT_EQ(m->scheduler_stats().live_sequences, 1);

  int d_pieces = 0;
  std::thread td([&] {
    d.result = m->generate(rd, [&](const GeneratedPiece& piece) {
      d.streamed += piece.text;
      return ++d_pieces < 3;
    });
  });
  td.join();
  EXPECT_EQ(m->scheduler_stats().live_sequences, 1) << "the cancelled sequence still holds its KV cache";
  EXPECT_EQ(d.result.finish_reason, "stop");
  EXPECT_EQ(d.result.tokens, std::vector<int32_t>(alone_d.tokens.begin(), alone_d.tokens.begin() + 3));

  std::thread tc([&] {
    c.result = m->generate(rc, [&](const GeneratedPiece& piece) {
      c.streamed += piece.text;
      c_started.set();
      return true;
    });
  });
  c_started.wait();
  EXPECT_EQ(m->scheduler_stats().live_sequences, 2);
  EXPECT_EQ(a_pieces.load(), 4);  // A was still mid-generation when C joined
  go.set();
  ta.join();
  tc.join();
  expect_same(a, alone_a, "A");
  expect_same(c, alone_c, "C");
  const auto stats = m->scheduler_stats();
  EXPECT_EQ(stats.live_sequences, 0);
  EXPECT_EQ(stats.prefills, 3);
  EXPECT_LT(stats.decode_steps, stats.decode_rows) << "A and C never decoded together";
}

// More concurrent calls than max_batch: the rest wait to be prefilled until one leaves.
TEST_F(LlmScheduler, AtMostMaxBatchSequencesHoldACache) {
  const auto& p = *prompts_;
  const auto m = cached(2);
  std::atomic<int> most = 0;
  std::vector<GenerateResult> alone;
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(request(p[i], 10, 1.0f, 100 + i));
    alone.push_back(generate(*alone_model_, reqs.back()));
  }
  std::vector<Streamed> runs(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] {
      runs[i].result = m->generate(reqs[i], [&](const GeneratedPiece& piece) {
        runs[i].streamed += piece.text;
        int live = m->scheduler_stats().live_sequences, seen = most.load();
        while (live > seen && !most.compare_exchange_weak(seen, live)) {
        }
        return true;
      });
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) expect_same(runs[i], alone[i], "request " + std::to_string(i));
  EXPECT_LE(most.load(), 2);
  EXPECT_GE(most.load(), 1);
  EXPECT_EQ(m->scheduler_stats().live_sequences, 0);
}

// A bad request throws before it joins; a callback that throws ends only its own generation.
TEST_F(LlmScheduler, ErrorsLeaveNothingBehind) {
  const auto& p = *prompts_;
  const auto m = cached(4);
  EXPECT_THROW(m->generate(request({}, 4, 0.0f, 0)), std::invalid_argument);
  GenerateRequest bad = request(p[0], 4, -1.0f, 0);
  EXPECT_THROW(m->generate(bad), std::invalid_argument);
  EXPECT_EQ(m->scheduler_stats().prefills, 0);

  const GenerateRequest ok = request(p[1], 16, 0.0f, 0);
  const GenerateResult alone = generate(*alone_model_, ok);
  Streamed good;
  std::thread t([&] { good = run_one(*m, ok); });
  int calls = 0;
  EXPECT_THROW(m->generate(request(p[2], 16, 0.0f, 0),
                           [&](const GeneratedPiece&) -> bool {
                             if (++calls == 2) throw std::runtime_error("client went away");
                             return true;
                           }),
               std::runtime_error);
  t.join();
  expect_same(good, alone, "the other generation");
  EXPECT_EQ(m->scheduler_stats().live_sequences, 0);
}

// The real gemma3-270m (Q4_K_M GGUF) from the default store, when pulled: four seeded
// generations at once equal each alone, and the aggregate token rate of running them one after
// another vs together (printed; wall time includes the short prefills).
TEST(LlmSchedulerRealModel, Gemma3_270mFourAtOnceSlow) {
  std::string dir;
  try {
    dir = resolve_model_path("gemma3-270m");
  } catch (const std::runtime_error&) {
    GTEST_SKIP() << "gemma3-270m is not in the default store (`npu model pull gemma3-270m`)";
  }
  LoadOptions o;
  o.context_length = 256;
  auto m = std::make_unique<CachedLanguageModel>(LanguageModel::load(dir, o), 0, 4, 16);
  const LanguageModel& lm = *m->model;
  const char* texts[] = {"The capital of France is", "Once upon a time, in a small village,",
                         "def fibonacci(n):", "The three primary colours are"};
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(request(encode_prompt(lm, texts[i]), 48, i == 0 ? 0.0f : 0.8f, 17 + i));
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  std::vector<GenerateResult> alone;
  int64_t tokens = 0;
  auto t0 = clock::now();
  for (const auto& r : reqs) {
    alone.push_back(generate(lm, r));
    tokens += alone.back().completion_tokens;
  }
  const double alone_s = seconds(t0);
  std::vector<Streamed> runs(reqs.size());
  std::vector<std::thread> threads;
  t0 = clock::now();
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] {
      runs[i].result = m->generate(reqs[i], [&](const GeneratedPiece& piece) {
        runs[i].streamed += piece.text;
        return true;
      });
    });
  for (auto& t : threads) t.join();
  const double together_s = seconds(t0);
  for (size_t i = 0; i < reqs.size(); ++i) expect_same(runs[i], alone[i], "request " + std::to_string(i));
  const auto stats = m->scheduler_stats();
  std::printf("gemma3-270m, %lld tokens: one at a time %.1f tokens/s, four at once %.1f tokens/s "
              "(%lld decode steps, %.2f rows each)\n",
              static_cast<long long>(tokens), tokens / alone_s, tokens / together_s,
              static_cast<long long>(stats.decode_steps),
              stats.decode_steps ? double(stats.decode_rows) / double(stats.decode_steps) : 0.0);
  EXPECT_LT(stats.decode_steps, stats.decode_rows);
}

}  // namespace

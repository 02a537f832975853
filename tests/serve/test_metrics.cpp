// GET /metrics: the exposition parses line by line (Prometheus text format 0.0.4), request
// counters grow by exactly the requests made, latency histograms are cumulative with +Inf == count,
// label values are escaped, and the gauges show the loaded models (tiny BERT fixture).
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "serve/metrics.h"
#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Every line is "# HELP name text", "# TYPE name type", or "name{k="v",...} value"; anything
// else fails the test. Label values are unescaped (\\, \", \n).
std::vector<Sample> parse_exposition(const std::string& text) {
  static const std::regex comment(R"(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+)");
  static const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+))");
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, comment)) continue;
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "not a comment or a sample: '" << line << "'";
      continue;
    }
    Sample s;
    s.name = m[1];
    const std::string v = m[4];
    s.value = v == "+Inf" ? INFINITY : v == "-Inf" ? -INFINITY : v == "NaN" ? NAN : std::stod(v);
    const std::string labels = m[3];
    size_t i = 0;
    while (i < labels.size()) {
      const size_t eq = labels.find("=\"", i);
      if (eq == std::string::npos) {
        ADD_FAILURE() << "bad labels in '" << line << "'";
        break;
      }
      const std::string key = labels.substr(i, eq - i);
      EXPECT_TRUE(std::regex_match(key, std::regex("[a-zA-Z_][a-zA-Z0-9_]*"))) << line;
      std::string value;
      size_t j = eq + 2;
      for (; j < labels.size() && labels[j] != '"'; ++j) {
        if (labels[j] != '\\') {
          value += labels[j];
          continue;
        }
        const char e = labels[++j];
        EXPECT_TRUE(e == '\\' || e == '"' || e == 'n') << "bad escape in " << line;
        value += e == 'n' ? '\n' : e;
      }
      EXPECT_LT(j, labels.size()) << "unterminated label value in " << line;
      s.labels[key] = value;
      i = j + 1;
      if (i < labels.size()) {
        EXPECT_EQ(labels[i], ',') << line;
        ++i;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The value of the one sample named `name` whose labels include `want`; NaN when there is none.
double value_of(const std::vector<Sample>& samples, const std::string& name,
                const std::map<std::string, std::string>& want = {}) {
  double found = NAN;
  int n = 0;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : want) match = match && s.labels.count(k) && s.labels.at(k) == v;
    if (match) found = s.value, ++n;
  }
  EXPECT_LE(n, 1) << name << ": more than one sample matches";
  return found;
}

// Counter values absent from a scrape are zero (a series appears with its first event).
double counter(const std::vector<Sample>& samples, const std::string& endpoint, int status) {
  const double v = value_of(samples, "xdna_http_requests_total", {{"endpoint", endpoint}, {"status", std::to_string(status)}});
  return std::isnan(v) ? 0 : v;
}

// The buckets of one endpoint's latency histogram are cumulative, +Inf equals _count.
void expect_consistent_histogram(const std::vector<Sample>& samples, const std::string& endpoint) {
  std::vector<std::pair<double, double>> buckets;  // (le, count)
  for (const Sample& s : samples)
    if (s.name == "xdna_http_request_duration_seconds_bucket" && s.labels.at("endpoint") == endpoint)
      buckets.emplace_back(s.labels.at("le") == "+Inf" ? INFINITY : std::stod(s.labels.at("le")), s.value);
  ASSERT_GE(buckets.size(), 2u) << endpoint;
  EXPECT_DOUBLE_EQ(buckets.front().first, 0.001);
  EXPECT_TRUE(std::isinf(buckets.back().first));
  EXPECT_GE(buckets[buckets.size() - 2].first, 120.0);
  for (size_t i = 1; i < buckets.size(); ++i) {
    EXPECT_GT(buckets[i].first, buckets[i - 1].first) << endpoint;
    EXPECT_GE(buckets[i].second, buckets[i - 1].second) << endpoint << " le=" << buckets[i].first;
  }
  const double count = value_of(samples, "xdna_http_request_duration_seconds_count", {{"endpoint", endpoint}});
  EXPECT_EQ(buckets.back().second, count) << endpoint;
  EXPECT_GE(value_of(samples, "xdna_http_request_duration_seconds_sum", {{"endpoint", endpoint}}), 0.0);
}

class MetricsTest : public test::ServerSuite<MetricsTest> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-metrics");
    const fs::path store = dir_ / "models";
    test::add_store_model(store, "tiny-bert", "bert", "safetensors", "f32",
                          fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5", /*list_files=*/true);
    test::add_store_model(store, "tiny-chat", "llama", "safetensors", "f32",
                          fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat");
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    opts.log_requests = false;
    server_ = std::make_unique<test::RunningServer>(opts);
  }
  void SetUp() override {
    test::ServerSuite<MetricsTest>::SetUp();
    // One connection: the server counts a request after sending its response, on the thread that
    // serves the connection, so the next request on it always sees the count.
    client_->set_keep_alive(true);
  }
  std::vector<Sample> scrape() {
    auto r = client_->Get("/metrics");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u)
        << r->get_header_value("Content-Type");
    return parse_exposition(r->body);
  }
};

TEST_F(MetricsTest, CountersGrowByExactlyTheRequestsMade) {
  const auto before = scrape();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(client_->Get("/health")->status, 200);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(client_->Get("/no/such/path")->status, 404);
  ASSERT_EQ(client_->Post("/health", "{}", "application/json")->status, 405);
  ASSERT_EQ(client_->Get("/v1/models/does-not-exist")->status, 404);  // a route's own 404
  const auto after = scrape();

  EXPECT_EQ(counter(after, "/health", 200) - counter(before, "/health", 200), 3);
  EXPECT_EQ(counter(after, "other", 404) - counter(before, "other", 404), 2);
  EXPECT_EQ(counter(after, "/health", 405) - counter(before, "/health", 405), 1);
  EXPECT_EQ(counter(after, "/v1/models/(.+)", 404) - counter(before, "/v1/models/(.+)", 404), 1);
  // The first scrape is counted once answered, so the second sees it.
  EXPECT_EQ(counter(after, "/metrics", 200) - counter(before, "/metrics", 200), 1);
  // The raw path never becomes a label value: label sets stay bounded.
  for (const Sample& s : after)
    for (const auto& [k, v] : s.labels) EXPECT_EQ(v.find("/no/such/path"), std::string::npos) << s.name;
}

TEST_F(MetricsTest, HistogramsAreCumulativeAndMatchTheCounters) {
  for (int i = 0; i < 2; ++i) ASSERT_EQ(client_->Get("/health")->status, 200);
  ASSERT_EQ(client_->Get("/nothing-here")->status, 404);
  const auto samples = scrape();
  for (const std::string endpoint : {"/health", "other"}) {
    expect_consistent_histogram(samples, endpoint);
    double requests = 0;
    for (const Sample& s : samples)
      if (s.name == "xdna_http_requests_total" && s.labels.at("endpoint") == endpoint) requests += s.value;
    EXPECT_EQ(value_of(samples, "xdna_http_request_duration_seconds_count", {{"endpoint", endpoint}}), requests)
        << endpoint;
  }
}

TEST_F(MetricsTest, GaugesShowLoadedModelsAndTheBuild) {
  auto r = client_->Post("/v1/embeddings", R"({"model": "tiny-bert", "input": "hello metrics"})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto samples = scrape();
  // One bytes series per resident model (the suite's other tests may have loaded the LLM too).
  int series = 0;
  for (const Sample& x : samples) series += x.name == "xdna_model_loaded_bytes";
  EXPECT_GE(series, 1);
  EXPECT_EQ(value_of(samples, "xdna_models_loaded"), series);
  const double bytes = value_of(samples, "xdna_model_loaded_bytes", {{"model", "tiny-bert"}, {"kind", "embedding"}, {"device", "host"}});
  EXPECT_GT(bytes, 1000);  // the fixture's weights
  EXPECT_EQ(value_of(samples, "xdna_queue_running", {{"model", "tiny-bert"}}), 0);
  EXPECT_EQ(value_of(samples, "xdna_queue_waiting", {{"model", "tiny-bert"}}), 0);
  EXPECT_EQ(value_of(samples, "xdna_build_info", {{"version", serve::kEngineVersion}}), 1);
  const double present = value_of(samples, "xdna_npu_present");
  EXPECT_TRUE(present == 0 || present == 1);
  EXPECT_EQ(counter(samples, "/v1/embeddings", 200), 1);
}

TEST_F(MetricsTest, GenerationsCountTheirTokens) {
  int64_t prompt = 0, completion = 0;
  for (int i = 0; i < 2; ++i) {
    const json body = {{"model", "tiny-chat"}, {"prompt", "Hello there"}, {"temperature", 0}, {"max_tokens", 6 + i}};
    auto r = client_->Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json usage = json::parse(r->body)["usage"];
    prompt += usage["prompt_tokens"].get<int64_t>();
    completion += usage["completion_tokens"].get<int64_t>();
  }
  ASSERT_GT(completion, 0);
  const auto samples = scrape();
  EXPECT_EQ(value_of(samples, "xdna_generated_tokens_total", {{"model", "tiny-chat"}, {"kind", "prompt"}}), prompt);
  EXPECT_EQ(value_of(samples, "xdna_generated_tokens_total", {{"model", "tiny-chat"}, {"kind", "completion"}}), completion);
  const double seconds = value_of(samples, "xdna_decode_seconds_total", {{"model", "tiny-chat"}});
  ASSERT_GT(seconds, 0);
  EXPECT_NEAR(value_of(samples, "xdna_decode_tokens_per_second", {{"model", "tiny-chat"}}), completion / seconds,
              1e-6 * completion / seconds);
  EXPECT_GT(value_of(samples, "xdna_model_loaded_bytes", {{"model", "tiny-chat"}, {"kind", "llm"}}), 0);
}

// Metrics on its own: generation counters, tokens/s, bucket placement and label escaping.
TEST(Metrics, GenerationsAndEscapedLabels) {
  serve::Metrics m;
  const std::string odd = "we\"ird\\mo\ndel";
  m.record_generation(odd, 5, 10, 2.0);
  m.record_generation(odd, 1, 6, 2.0);
  m.record_generation("plain", 3, 0, 0);  // no decode: no rate for it
  m.record_request("/health", 200, 0.003);
  m.record_request("/health", 200, 200.0);  // past the last bound: only +Inf
  const fs::path dir = test::make_temp_dir("xdna-metrics-unit");
  const auto samples = parse_exposition(m.render_prometheus(serve::ModelCache(dir.string()), NpuInfo{}));
  fs::remove_all(dir);

  EXPECT_EQ(value_of(samples, "xdna_generated_tokens_total", {{"model", odd}, {"kind", "prompt"}}), 6);
  EXPECT_EQ(value_of(samples, "xdna_generated_tokens_total", {{"model", odd}, {"kind", "completion"}}), 16);
  EXPECT_DOUBLE_EQ(value_of(samples, "xdna_decode_tokens_per_second", {{"model", odd}}), 4.0);
  EXPECT_EQ(value_of(samples, "xdna_generated_tokens_total", {{"model", "plain"}, {"kind", "prompt"}}), 3);
  EXPECT_TRUE(std::isnan(value_of(samples, "xdna_decode_tokens_per_second", {{"model", "plain"}})));

  auto bucket = [&](const std::string& le) {
    return value_of(samples, "xdna_http_request_duration_seconds_bucket", {{"endpoint", "/health"}, {"le", le}});
  };
  EXPECT_EQ(bucket("0.001"), 0);
  EXPECT_EQ(bucket("0.0025"), 0);
  EXPECT_EQ(bucket("0.005"), 1);
  EXPECT_EQ(bucket("120"), 1);
  EXPECT_EQ(bucket("+Inf"), 2);
  EXPECT_DOUBLE_EQ(value_of(samples, "xdna_http_request_duration_seconds_sum", {{"endpoint", "/health"}}), 200.003);
  expect_consistent_histogram(samples, "/health");
  EXPECT_EQ(value_of(samples, "xdna_models_loaded"), 0);
  EXPECT_EQ(value_of(samples, "xdna_npu_present"), 0);
}

}  // namespace

// Tokenizer throughput on the fixture corpus (tests/fixtures/tokenizers/corpus.jsonl), one
// thread, encode without special tokens. Compare with bench/bench_tokenizer_hf.py (HF tokenizers
// on the same corpus and files): tokens/s is the counter to read.
#include <benchmark/benchmark.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "pipeline/tokenizer.h"

static const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/tokenizers/";

static const std::vector<std::string>& corpus() {
  static const std::vector<std::string> lines = [] {
    std::vector<std::string> out;
    std::ifstream f(kDir + "corpus.jsonl");
    for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line).get<std::string>());
    return out;
  }();
  return lines;
}

static void BM_Encode(benchmark::State& state, const char* file) {
  xdna::Tokenizer tok = xdna::Tokenizer::from_file(kDir + file);
  const auto& lines = corpus();
  size_t tokens = 0, bytes = 0;
  for (auto _ : state) {
    for (const auto& line : lines) {
      auto e = tok.encode(line, false);
      tokens += e.ids.size();
      bytes += line.size();
      benchmark::DoNotOptimize(e.ids.data());
    }
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

BENCHMARK_CAPTURE(BM_Encode, minilm_wordpiece, "minilm.tokenizer.json")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, qwen2_bytelevel_bpe, "qwen2.tokenizer.json")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, llama2_bpe_byte_fallback, "llama2.tokenizer.json")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, unigram_metaspace, "unigram.tokenizer.json")->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();

// Decoder speed on real weights: prefill tok/s (a 512-token prompt as one GEMM step) and decode
// tok/s (one token per step, GEMVs), plus how much of a decode step is not matmul (graph build,
// executor, small ops), from the step's RunReport.
// On a machine shared with other work, compare the CPU column at --threads=1.
//
//   XDNA_GEMMA3_GGUF=path/to/gemma-3-270m-q4_k_m.gguf bench_decoder --benchmark_min_time=3x
//   (default path: the model store, ~/.cache/xdna-engine/models/gemma3-270m/...)
// Threads: XDNA_THREADS or --threads=N before the benchmark flags (default 2).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/parallel.h"
#include "models/decoder.h"
#include "models/model_store.h"
#include "weights/gguf.h"
#include "bench_main.h"

namespace {

std::string model_path() {
  if (const char* p = std::getenv("XDNA_GEMMA3_GGUF")) return p;
  return xdna::ModelStore(xdna::default_store_dir()).model_dir("gemma3-270m") + "/gemma-3-270m-q4_k_m.gguf";
}

struct Model {
  std::shared_ptr<xdna::GgufFile> file;
  std::unique_ptr<xdna::Decoder> decoder;
};

Model* model() {
  static std::unique_ptr<Model> m = [] {
    auto out = std::make_unique<Model>();
    const std::string p = model_path();
    if (!std::filesystem::exists(p)) return std::unique_ptr<Model>();
    out->file = std::make_shared<xdna::GgufFile>(p);
    out->decoder = std::make_unique<xdna::Decoder>(xdna::decoder_spec_from_gguf(*out->file), out->file);
    return out;
  }();
  return m.get();
}

std::vector<int32_t> tokens(int64_t n) {
  std::vector<int32_t> ids{2};
  for (int64_t i = 1; i < n; ++i) ids.push_back(static_cast<int32_t>(1000 + (i * 7919) % 20000));
  return ids;
}

void BM_Prefill(benchmark::State& state) {
  Model* m = model();
  if (!m) return state.SkipWithError("no model file (npu model pull gemma3-270m, or XDNA_GEMMA3_GGUF)");
  const int64_t n = state.range(0);
  const auto ids = tokens(n);
  for (auto _ : state) {
    xdna::DecoderState st = m->decoder->new_state(n + 1);
    benchmark::DoNotOptimize(m->decoder->forward(ids, st).logits.data<float>());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Decode(benchmark::State& state) {
  Model* m = model();
  if (!m) return state.SkipWithError("no model file (npu model pull gemma3-270m, or XDNA_GEMMA3_GGUF)");
  const int64_t context = state.range(0);  // tokens already in the cache
  xdna::DecoderState st = m->decoder->new_state(context + 4096);
  m->decoder->forward(tokens(context), st);
  double matmul_ms = 0, ops_ms = 0, total_ms = 0;
  int64_t steps = 0;
  for (auto _ : state) {
    if (st.position + 1 >= st.context_length()) {
      st.cache.truncate(context);
      st.position = context;
    }
    const auto t0 = std::chrono::steady_clock::now();
    xdna::DecoderStep s = m->decoder->forward({1234}, st);
    total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& r : s.report.ops) {
      if (r.op == xdna::OpKind::MatMul) matmul_ms += r.ms;
      ops_ms += r.ms;
    }
    ++steps;
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["matmul_share"] = matmul_ms / total_ms;
  // Time outside every op: building the graph, the executor, copying the logits out.
  state.counters["overhead_share"] = (total_ms - ops_ms) / total_ms;
  state.counters["ms/step"] = total_ms / static_cast<double>(steps);
}

// Rates use the main thread's CPU time (the "CPU" column): on a shared machine wall time also
// counts the time other processes held the cores; "Time" is wall time.
BENCHMARK(BM_Prefill)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Arg(16)->Arg(512)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return run_model_benchmarks(argc, argv); }

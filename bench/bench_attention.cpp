// Decode attention (one query row against a KvCache) per KV element type, at the decoder shapes:
// Qwen3-0.6B (16 query heads, 8 kv heads, head_dim 128) and Gemma 3 270M (4, 1, 256). Every
// iteration reads the next of 28 layers, so the cache streams from memory as in a real decode step
// (28 layers x 2.6 MiB of f16 K/V at 640 positions is past the 32 MiB L3).
// Args: dtype, context length, shape (0 Qwen3, 1 Gemma 3). Threads: --threads=N (default 2).
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "bench_main.h"
#include "host/attention.h"
#include "host/kv_cache.h"

using namespace xdna;

namespace {

constexpr int64_t kLayers = 28;

Tensor random_f32(Shape shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(std::move(shape));
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

void BM_DecodeAttention(benchmark::State& state) {
  const auto dt = static_cast<DType>(state.range(0));
  const int64_t S = state.range(1);
  const bool gemma = state.range(2) == 1;
  const int64_t Hq = gemma ? 4 : 16, Hkv = gemma ? 1 : 8, D = gemma ? 256 : 128;
  std::mt19937 rng(3);
  host::KvCache cache(kLayers, S, Hkv, D, dt);
  const int64_t chunk = 64;  // appended in chunks: the random source stays small
  for (int64_t l = 0; l < kLayers; ++l)
    for (int64_t s0 = 0; s0 < S; s0 += chunk) {
      const int64_t n = std::min(chunk, S - s0);
      cache.append(l, random_f32({n, Hkv, D}, rng), random_f32({n, Hkv, D}, rng));
    }
  const Tensor q = random_f32({1, Hq, D}, rng);
  host::AttentionParams p;
  p.causal = true;
  p.q_offset = S - 1;
  int64_t layer = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(host::attention(q, cache.keys(layer), cache.values(layer), p));
    layer = (layer + 1) % kLayers;
  }
  state.SetBytesProcessed(state.iterations() * 2 * dtype_bytes(dt, S * Hkv * D));
  state.SetLabel(std::string(gemma ? "gemma3-270m " : "qwen3-0.6b ") + std::string(dtype_name(dt)));
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{int(DType::F32), int(DType::F16), int(DType::BF16)}, {640, 2048, 8192}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return run_model_benchmarks(argc, argv); }

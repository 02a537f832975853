// Host matmul kernels (Google Benchmark): triad bandwidth, GEMV per weight dtype (bytes/s),
// f32 GEMM vs OpenBLAS cblas_sgemm at the transformer shapes, bf16-weight GEMM.
// Threads: XDNA threads = cores; OPENBLAS_NUM_THREADS is set to the same count before the first
// OpenBLAS call. `npu bench kernels` prints the same figures as ratios in one table.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/cpu.h"
#include "core/parallel.h"
#include "host/gemm.h"
#include "host/matmul.h"
#include "host/matmul_bench.h"

using namespace xdna;

extern "C" void openblas_set_num_threads(int);

namespace {

constexpr int64_t kGemvK = 4096;

void BM_Triad(benchmark::State& state) {
  const int64_t bytes = state.range(0) << 20;
  double best = 0;
  for (auto _ : state) best = host::triad_bytes_per_s(bytes, 1);
  state.counters["bytes_per_second"] = benchmark::Counter(best);
}
BENCHMARK(BM_Triad)->Arg(256)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_Gemv(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const int64_t n = (state.range(1) << 20) / dtype_bytes(t, kGemvK);
  Tensor w = host::random_weights(t, n, kGemvK, 7, t == DType::I4 ? 128 : 0);
  Tensor x = host::random_weights(DType::F32, 1, kGemvK, 9);
  Tensor y = Tensor::empty({1, n});
  for (auto _ : state) host::matmul(x, w, nullptr, y);
  const int64_t bytes = w.nbytes() + (w.scales() ? w.scales()->nbytes() : 0);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(std::string(dtype_name(t)));
}
BENCHMARK(BM_Gemv)
    ->ArgsProduct({{int(DType::F32), int(DType::F16), int(DType::BF16), int(DType::I8), int(DType::I4),
                    int(DType::BFP16), int(DType::Q8_0), int(DType::Q4_0), int(DType::Q4_K), int(DType::Q5_K),
                    int(DType::Q6_K)},
                   {64}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One thread, GGML decode GEMV kernels side by side in one process: the AVX-512 one-row dot
// (variant 0, rows in order) against the four-rows-per-pass row kernel (variant 1) on the same
// matrix and the same quantized x, K = 1024 (Qwen3-0.6B's hidden size). Args: dtype, MiB,
// variant. 28 MiB mostly fits the 32 MiB L3 (compute-bound); 128 MiB is a DRAM stream.
void BM_GgmlRows(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const bool row_kernel = state.range(2) == 1;
  const host::IsaKernels& kern = host::avx512_kernels();
  if (active_isa() != Isa::Avx512 || !has_avx512_vnni()) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  const int64_t K = 1024, n = (state.range(1) << 20) / dtype_bytes(t, K);
  Tensor w = host::random_weights(t, n, K, 7);
  Tensor x = host::random_weights(DType::F32, 1, K, 9);
  std::vector<int8_t> q(K);
  std::vector<float> scale4(K / 4), xsum16(K / 16);
  std::vector<int32_t> neg8sum4(K / 4);
  kern.quantize_x_s8(x.data<float>(), K, q.data(), scale4.data(), xsum16.data());
  for (int64_t j = 0; j < K / 4; ++j) neg8sum4[j] = -8 * (q[4 * j] + q[4 * j + 1] + q[4 * j + 2] + q[4 * j + 3]);
  host::XRow xr{x.data<float>(), nullptr, nullptr, K};
  xr.q_s8 = q.data();
  xr.q_scale4 = scale4.data();
  xr.q_xsum16 = xsum16.data();
  xr.q_neg8sum4 = neg8sum4.data();
  host::WeightRows wr{t, reinterpret_cast<const uint8_t*>(w.raw()), dtype_bytes(t, K), n, K};
  const host::RowsKernel rows = t == DType::Q6_K ? kern.rows_q6_k : t == DType::Q8_0 ? kern.rows_q8_0 : kern.rows_q4_0;
  float (*dot)(const uint8_t*, const host::XRow&) = t == DType::Q6_K   ? kern.dot_q6_k
                                                    : t == DType::Q8_0 ? kern.dot_q8_0
                                                                       : kern.dot_q4_0;
  std::vector<float> y(n);
  for (auto _ : state) {
    if (row_kernel) {
      for (int64_t r = 0; r < n; r += host::kGemvRows)
        rows(wr, r, static_cast<int>(std::min<int64_t>(host::kGemvRows, n - r)), xr, y.data() + r);
    } else {
      for (int64_t r = 0; r < n; ++r) y[r] = dot(wr.row(r), xr);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * w.nbytes());
  state.SetLabel(std::string(dtype_name(t)) + (row_kernel ? " row kernel" : " one-row dot"));
}
BENCHMARK(BM_GgmlRows)
    ->ArgsProduct({{int(DType::Q8_0), int(DType::Q4_0), int(DType::Q6_K)}, {28, 128}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Q6_K GEMV at Qwen3-0.6B's tied LM head (151936 x 1024, 127.6 MB: a DRAM stream) or a 28 MiB
// or 1 MiB slice of it (mostly L3, L2): the GGML-layout row kernel (variant 0) against the same rows repacked
// (variant 1, gemm_q6k_avx512.cpp), on the same quantized x. Args: rows, variant, threads (the
// rows split as the decode GEMV splits them).
void BM_Q6kGemv(benchmark::State& state) {
  const host::IsaKernels& kern = host::avx512_kernels();
  if (active_isa() != Isa::Avx512 || !has_avx512_vnni()) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  const int64_t K = 1024, n = state.range(0);
  const bool repacked = state.range(1) == 1;
  const int threads = static_cast<int>(state.range(2));
  Tensor w = host::random_weights(DType::Q6_K, n, K, 7);
  Tensor x = host::random_weights(DType::F32, 1, K, 9);
  std::vector<int8_t> q(K);
  std::vector<float> scale4(K / 4), xsum16(K / 16);
  kern.quantize_x_s8(x.data<float>(), K, q.data(), scale4.data(), xsum16.data());
  host::XRow xr{x.data<float>(), nullptr, nullptr, K};
  xr.q_s8 = q.data();
  xr.q_scale4 = scale4.data();
  xr.q_xsum16 = xsum16.data();
  host::WeightRows wr{DType::Q6_K, reinterpret_cast<const uint8_t*>(w.raw()), dtype_bytes(DType::Q6_K, K), n, K};
  std::unique_ptr<HeapBuffer> rp;  // huge-page backed, as the GEMV's cache holds the copy
  if (repacked) {  // in place of the GGML rows
    rp = std::make_unique<HeapBuffer>(static_cast<size_t>(w.nbytes()));
    host::repack_q6_k_blocks(wr.data, reinterpret_cast<uint8_t*>(rp->data()), n * K / 256);
    wr.data = reinterpret_cast<const uint8_t*>(rp->data());
    wr.q6_k_repacked = true;
    w = Tensor();
  }
  const host::RowsKernel rows = repacked ? host::rows_q6_k_repacked_avx512 : kern.rows_q6_k;
  std::vector<float> y(n);
  const int before = num_threads();
  set_num_threads(threads);
  for (auto _ : state) {
    parallel_for(n, 16, [&](int64_t n0, int64_t n1) {
      for (int64_t r = n0; r < n1; r += host::kGemvRows)
        rows(wr, r, static_cast<int>(std::min<int64_t>(host::kGemvRows, n1 - r)), xr, y.data() + r);
    });
    benchmark::DoNotOptimize(y.data());
  }
  set_num_threads(before);
  state.SetBytesProcessed(state.iterations() * n * dtype_bytes(DType::Q6_K, K));
  state.SetLabel(repacked ? "Q6_K repacked" : "Q6_K GGML layout");
}
BENCHMARK(BM_Q6kGemv)
    ->ArgsProduct({{151936, 28 * 1024 * 1024 / 840, 1248}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Shapes M x K x N: square, and a transformer FFN projection at two sequence lengths.
const int64_t kShapes[][3] = {{1024, 1024, 1024}, {128, 384, 1536}, {1500, 384, 1536}};

void set_flops(benchmark::State& state, int64_t m, int64_t k, int64_t n) {
  state.counters["flops"] =
      benchmark::Counter(2.0 * m * k * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemmF32(benchmark::State& state) {
  const auto* s = kShapes[state.range(0)];
  Tensor x = host::random_weights(DType::F32, s[0], s[1], 1), w = host::random_weights(DType::F32, s[2], s[1], 2);
  Tensor y = Tensor::empty({s[0], s[2]});
  for (auto _ : state) host::matmul(x, w, nullptr, y);
  set_flops(state, s[0], s[1], s[2]);
}
BENCHMARK(BM_GemmF32)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GemmOpenBlas(benchmark::State& state) {
  const auto* s = kShapes[state.range(0)];
  openblas_set_num_threads(num_threads());
  Tensor x = host::random_weights(DType::F32, s[0], s[1], 1), w = host::random_weights(DType::F32, s[2], s[1], 2);
  Tensor y = Tensor::empty({s[0], s[2]});
  const int m = int(s[0]), k = int(s[1]), n = int(s[2]);
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, x.data<float>(), k, w.data<float>(), k, 0.f,
                y.data<float>(), n);
  set_flops(state, s[0], s[1], s[2]);
}
BENCHMARK(BM_GemmOpenBlas)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GemmBf16(benchmark::State& state) {
  const auto* s = kShapes[state.range(0)];
  Tensor x = host::random_weights(DType::F32, s[0], s[1], 1), w = host::random_weights(DType::BF16, s[2], s[1], 3);
  Tensor y = Tensor::empty({s[0], s[2]});
  for (auto _ : state) host::matmul(x, w, nullptr, y);
  set_flops(state, s[0], s[1], s[2]);
}
BENCHMARK(BM_GemmBf16)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS reads this when its first call runs its thread setup.
  setenv("OPENBLAS_NUM_THREADS", std::to_string(num_threads()).c_str(), 0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// `npu bench kernels`: host matmul kernels measured in one run against this machine's own limits:
// GEMV bytes/s as a fraction of STREAM-triad bandwidth, f32 GEMM against OpenBLAS sgemm (loaded
// with dlopen so `npu` never links it), bf16 GEMM against our f32 GEMM.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/cpu.h"
#include "core/parallel.h"
#include "host/matmul.h"
#include "host/matmul_bench.h"

namespace xdna::cli {
namespace {

// The slice of the CBLAS interface we call (values from cblas.h).
enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                         float*, int);

struct Peer {
  SgemmFn sgemm = nullptr;
  std::string corename, config;
};

// OpenBLAS reads OPENBLAS_NUM_THREADS when it loads: set it to the engine's thread count first.
Peer load_openblas(int threads) {
  Peer p;
  setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 1);
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return p;
  p.sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"))) set(threads);
  if (auto core = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename"))) p.corename = core();
  if (auto cfg = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_config"))) p.config = cfg();
  return p;
}

struct GemmShape {
  int64_t m, k, n;
};

void run_kernels(bool quick, bool json_out) {
  using nlohmann::json;
  const int threads = num_threads();
  const auto& cpu = cpu_features();
  json report = {{"label", "host measurements (CPU, not NPU)"},
                 {"cpu", cpu.brand},
                 {"threads", threads},
                 {"isa", isa_name(active_isa())},
                 {"avx512_bf16", has_avx512_bf16()},
                 {"avx512_vnni", has_avx512_vnni()},
                 {"mode", quick ? "quick" : "full"}};
  auto say = [&](const char* fmt, auto... args) {
    if (!json_out) std::printf(fmt, args...), std::fflush(stdout);
  };
  say("Host kernel benchmark (host measurements: CPU %s, %d threads, isa %s%s)\n", cpu.brand.c_str(), threads,
      isa_name(active_isa()).c_str(), has_avx512_bf16() ? "+bf16" : "");

  // 1. Memory bandwidth: arrays well past the last-level cache.
  // Arrays 1.5x (quick) / 2x the 32 MiB L3 of current desktop parts; best pass of many, as STREAM.
  const int64_t triad_bytes = (quick ? 48ll : 64ll) << 20;
  const double triad = host::triad_bytes_per_s(triad_bytes, quick ? 10 : 30, quick ? 1.0 : 3.0);
  report["triad_gb_s"] = triad / 1e9;
  say("\nSTREAM triad (3 x %lld MiB): %.1f GB/s\n", static_cast<long long>(triad_bytes >> 20), triad / 1e9);

  // 2. GEMV: one x row against a weight matrix of each dtype; effective bytes = weight bytes read.
  const int64_t gemv_bytes = (quick ? 40ll : 64ll) << 20, K = 4096;
  say("\nGEMV  y[1, N] = x[1, %lld] . w[N, %lld]^T   (weights %lld MiB each)\n", static_cast<long long>(K),
      static_cast<long long>(K), static_cast<long long>(gemv_bytes >> 20));
  say("  %-7s %8s %10s %9s %10s\n", "dtype", "N", "time ms", "GB/s", "of triad");
  json gemv = json::array();
  const DType dtypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::I8,   DType::I4,  DType::BFP16,
                          DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  Tensor x1 = host::random_weights(DType::F32, 1, K, 99);
  for (DType t : dtypes) {
    const int64_t row = dtype_bytes(t, K);
    const int64_t n = gemv_bytes / row;
    const int64_t group = t == DType::I4 ? 128 : 0;  // int4 per group of 128, int8 per channel
    Tensor w = host::random_weights(t, n, K, 7, group);
    Tensor y = Tensor::empty({1, n});
    host::matmul(x1, w, nullptr, y);  // warm-up (page faults, thread start)
    const double s = host::best_seconds([&] { host::matmul(x1, w, nullptr, y); }, quick ? 5 : 15, quick ? 0.2 : 1.0);
    int64_t bytes = w.nbytes() + (w.scales() ? w.scales()->nbytes() : 0);
    const double bw = static_cast<double>(bytes) / s;
    say("  %-7s %8lld %10.3f %9.1f %9.0f%%\n", std::string(dtype_name(t)).c_str(), static_cast<long long>(n), s * 1e3,
        bw / 1e9, 100 * bw / triad);
    gemv.push_back({{"dtype", dtype_name(t)}, {"n", n}, {"k", K}, {"bytes", bytes}, {"seconds", s},
                    {"gb_s", bw / 1e9}, {"fraction_of_triad", bw / triad}});
  }
  report["gemv"] = gemv;

  // 3. GEMM: f32 against OpenBLAS, bf16 weights against our f32.
  const Peer peer = load_openblas(threads);
  report["openblas"] = peer.sgemm ? json{{"corename", peer.corename}, {"config", peer.config}} : json("peer not installed");
  if (peer.sgemm)
    say("\nOpenBLAS peer: %s (core %s), OPENBLAS_NUM_THREADS=%d\n", peer.config.c_str(), peer.corename.c_str(), threads);
  else
    say("\nOpenBLAS: peer not installed (libopenblas.so.0 not found)\n");
  const GemmShape shapes[] = {{1024, 1024, 1024}, {128, 384, 1536}, {1500, 384, 1536}};
  say("\nGEMM  y[M, N] = x[M, K] . w[N, K]^T   (GFLOP/s)\n");
  say("  %-16s %9s %9s %10s %9s %10s\n", "M x K x N", "f32", "OpenBLAS", "f32/BLAS", "bf16", "bf16/f32");
  json gemm = json::array();
  for (const auto& sh : shapes) {
    Tensor x = host::random_weights(DType::F32, sh.m, sh.k, 1);
    Tensor w = host::random_weights(DType::F32, sh.n, sh.k, 2);
    Tensor wb = host::random_weights(DType::BF16, sh.n, sh.k, 3);
    Tensor y = Tensor::empty({sh.m, sh.n});
    const double flop = 2.0 * sh.m * sh.n * sh.k;
    const int reps = quick ? 3 : 10;
    const double min_s = quick ? 0.3 : 1.5;
    host::matmul(x, w, nullptr, y);
    const double f32 = flop / host::best_seconds([&] { host::matmul(x, w, nullptr, y); }, reps, min_s) / 1e9;
    host::matmul(x, wb, nullptr, y);
    const double bf16 = flop / host::best_seconds([&] { host::matmul(x, wb, nullptr, y); }, reps, min_s) / 1e9;
    double blas = 0;
    if (peer.sgemm) {
      auto call = [&] {
        peer.sgemm(kRowMajor, kNoTrans, kTrans, static_cast<int>(sh.m), static_cast<int>(sh.n), static_cast<int>(sh.k),
                   1.f, x.data<float>(), static_cast<int>(sh.k), w.data<float>(), static_cast<int>(sh.k), 0.f,
                   y.data<float>(), static_cast<int>(sh.n));
      };
      call();
      blas = flop / host::best_seconds(call, reps, min_s) / 1e9;
    }
    const std::string name = std::to_string(sh.m) + "x" + std::to_string(sh.k) + "x" + std::to_string(sh.n);
    if (peer.sgemm)
      say("  %-16s %9.1f %9.1f %9.0f%% %9.1f %9.2fx\n", name.c_str(), f32, blas, 100 * f32 / blas, bf16, bf16 / f32);
    else
      say("  %-16s %9.1f %9s %10s %9.1f %9.2fx\n", name.c_str(), f32, "-", "-", bf16, bf16 / f32);
    json row = {{"m", sh.m}, {"k", sh.k}, {"n", sh.n}, {"f32_gflops", f32}, {"bf16_gflops", bf16}, {"bf16_over_f32", bf16 / f32}};
    if (peer.sgemm) row["openblas_gflops"] = blas, row["f32_over_openblas"] = f32 / blas;
    gemm.push_back(row);
  }
  report["gemm"] = gemm;
  say("\nbf16 GEMM %s (bf16 products, f32 accumulation).\n",
      has_avx512_bf16() ? "uses vdpbf16ps" : "has no vdpbf16ps here: weights are widened to f32");
  if (json_out) std::printf("%s\n", report.dump(2).c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure the engine's kernels on this machine");
  bench->require_subcommand(1);
  auto* kernels = bench->add_subcommand("kernels", "Host matmul kernels vs memory bandwidth and OpenBLAS");
  static bool quick = false, json_out = false;
  kernels->add_flag("--quick", quick, "Smaller sizes, about 20 s");
  kernels->add_flag("--json", json_out, "Print the figures as JSON");
  kernels->callback([] { run_kernels(quick, json_out); });
  add_bench_embed_command(*bench);  // `npu bench embed`: cmd_bench_embed.cpp
  add_bench_llm_command(*bench);    // `npu bench llm`: cmd_bench_llm.cpp
  add_bench_upscale_command(*bench);  // `npu bench upscale`: cmd_bench_upscale.cpp
}

}  // namespace xdna::cli

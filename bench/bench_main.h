// The main() of the model benchmarks: thread count from --threads=N (or XDNA_THREADS; default 2,
// the project machine's cores), then Google Benchmark with the remaining arguments.
#pragma once
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>

#include "core/parallel.h"

inline int run_model_benchmarks(int argc, char** argv) {
  int threads = 2;
  if (const char* t = std::getenv("XDNA_THREADS")) threads = std::atoi(t);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--threads=", 10) == 0) threads = std::atoi(argv[i] + 10);
  xdna::set_num_threads(threads);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

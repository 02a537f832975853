// Measurement helpers shared by bench/bench_kernels.cpp and `npu bench kernels`: random weights
// in any dtype, a STREAM-triad bandwidth probe, and a best-of-N timer.
#pragma once
#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace xdna::host {

// Random weights [n, k] of dtype t with plausible values (int8/int4: scales per `group` values,
// 0 = per channel; GGML formats: random quants with small finite block scales).
Tensor random_weights(DType t, int64_t n, int64_t k, uint32_t seed, int64_t group = 0);

// STREAM triad a[i] = b[i] + s·c[i] on three f32 arrays of `bytes_per_array` each, split over
// the engine's threads; returns the best pass of at least `reps` passes and `min_seconds`, in
// bytes/s counted as STREAM does (3 arrays per pass, write-allocate traffic not counted).
double triad_bytes_per_s(int64_t bytes_per_array, int reps, double min_seconds = 0);

// Best wall time of fn over at least `reps` calls and `min_seconds` in total.
double best_seconds(const std::function<void()>& fn, int reps, double min_seconds);

}  // namespace xdna::host

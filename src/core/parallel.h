// Work splitting for host kernels. Uses OpenMP's thread team (threads stay warm between calls,
// which matters for per-token GEMV latency).
#pragma once
#include <cstdint>
#include <functional>

namespace xdna {

int num_threads();
void set_num_threads(int n);  // n <= 0: one per core

// Calls fn(begin, end) on disjoint chunks covering [0, n), at most one chunk per thread,
// chunk boundaries multiples of `grain`. Runs inline when there is one chunk.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace xdna

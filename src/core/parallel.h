// Work splitting for host kernels. Uses the engine's own thread team (parallel.cpp): threads
// spin briefly between calls (per-token GEMV latency), and a caller never waits for a worker that
// has not started: it runs the unclaimed chunks itself (robust on a loaded machine).
#pragma once
#include <cstdint>
#include <functional>

namespace xdna {

int num_threads();
void set_num_threads(int n);  // n <= 0: one per core

// Calls fn(begin, end) on disjoint chunks covering [0, n), at most one chunk per thread,
// chunk boundaries multiples of `grain`. Runs inline when there is one chunk, when called from
// inside another parallel_for, or while another thread is using the team. An exception thrown by
// fn is rethrown to the caller once every chunk has finished.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace xdna

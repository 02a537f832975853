#include "core/parallel.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace xdna {

static int cores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

static std::atomic<int> g_threads{0};

int num_threads() {
  int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : cores();
}

void set_num_threads(int n) { g_threads.store(n > 0 ? n : 0); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), units));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
    if (b < e) fn(b, e);
  }
}

}  // namespace xdna

#include "core/parallel.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

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

namespace {

// Our own thread team instead of an OpenMP region per call. The difference is what the caller
// waits for: an OpenMP region ends at a barrier every thread of the team must reach, so on a
// loaded machine a worker the OS has not scheduled yet holds the caller for a whole time slice
// (~28 ms measured here with 2 threads on 2 busy cores, for a 0.1 ms GEMM). Here the chunks are
// claimed from a counter: the caller runs every chunk no worker has claimed, and waits only for
// chunks another thread is running. Chunks and their boundaries are the same as before (one per
// thread), so results do not depend on who runs which chunk.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n, grain, units;
  int chunks;
  std::atomic<int> next{0};  // next chunk to claim
  std::atomic<int> done{0};  // chunks finished
  std::mutex error_mu;
  std::exception_ptr error;  // the first exception a chunk threw; the caller rethrows it

  // Claims and runs chunks until none is left.
  void work() {
    for (int c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t u0 = units * c / chunks, u1 = units * (c + 1) / chunks;
      const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
      try {
        if (b < e) (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

// Set on pool workers and on a caller while it runs a job: nested parallel_for calls run inline
// (as nested OpenMP regions did).
thread_local bool t_in_job = false;

// Workers spin this long for the next job before sleeping: between the ops of one forward pass
// the gaps are microseconds, and waking a sleeping thread costs tens of them.
constexpr auto kSpin = std::chrono::microseconds(200);

struct Pool {
  std::mutex run_mu;  // one caller at a time; others run their loops inline
  std::mutex mu;      // guards job and the sleep/wake handshake
  std::condition_variable cv;
  std::shared_ptr<Job> job;
  std::atomic<uint64_t> generation{0};
  int sleeping = 0;
  int workers = 0;

  // `seen`: the generation when the worker was made, so that a job published before the new
  // thread gets to run is still one it picks up (reading it at thread start missed that job).
  void worker_loop(uint64_t seen) {
    t_in_job = true;
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int i = 0; generation.load(std::memory_order_acquire) == seen; ++i) {
        _mm_pause();
        if ((i & 255) == 255 && std::chrono::steady_clock::now() > until) break;
      }
      std::shared_ptr<Job> j;
      {
        std::unique_lock<std::mutex> lock(mu);
        if (generation.load(std::memory_order_relaxed) == seen) {
          ++sleeping;
          cv.wait(lock, [&] { return generation.load(std::memory_order_relaxed) != seen; });
          --sleeping;
        }
        seen = generation.load(std::memory_order_relaxed);
        j = job;
      }
      // A job whose chunks are all claimed has nothing left; its caller may have returned, but
      // work() then claims nothing and never touches fn.
      if (j) j->work();
    }
  }

  // Starts workers up to `count` (they are never stopped: the pool lives as long as the process).
  void grow(int count) {
    const uint64_t now = generation.load(std::memory_order_acquire);
    for (; workers < count; ++workers) std::thread([this, now] { worker_loop(now); }).detach();
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: detached workers may still be spinning at exit
  return *p;
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), units));
  if (threads <= 1 || t_in_job) {
    fn(0, n);
    return;
  }
  Pool& p = pool();
  std::unique_lock<std::mutex> busy(p.run_mu, std::try_to_lock);
  if (!busy.owns_lock()) {  // another thread is using the team: run on this one
    fn(0, n);
    return;
  }
  p.grow(threads - 1);
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->grain = grain;
  job->units = units;
  job->chunks = threads;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.job = job;
    p.generation.fetch_add(1, std::memory_order_release);
    if (p.sleeping) p.cv.notify_all();
  }
  t_in_job = true;
  job->work();
  t_in_job = false;
  // Wait for the chunks other threads claimed; yield now and then so that a worker sharing this
  // core gets to finish. Only every 16384 pauses (~0.4 ms at the ~25 ns a pause takes here): on a
  // loaded machine a yield can hand this core to another process for a whole time slice, and
  // yielding every 1024 (~25 us) made 2-thread decode under load slower (docs/benchmarks-llm.md).
  for (int i = 0; job->done.load(std::memory_order_acquire) < threads; ++i) {
    _mm_pause();
    if ((i & 16383) == 16383) std::this_thread::yield();
  }
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.job.reset();  // workers that wake late find no job
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace xdna

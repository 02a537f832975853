#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "core/parallel.h"

using namespace xdna;

namespace {

// Restores the thread count a test changed.
struct Threads {
  int saved = num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(saved); }
};

// The chunks parallel_for handed out, sorted by start.
std::vector<std::pair<int64_t, int64_t>> chunks_of(int64_t n, int64_t grain) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> got;
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    got.emplace_back(b, e);
  });
  std::sort(got.begin(), got.end());
  return got;
}

}  // namespace

TEST(Parallel, ChunksCoverTheRangeOnGrainBoundaries) {
  Threads t(3);
  for (int rep = 0; rep < 50; ++rep) {
    const auto got = chunks_of(1000, 64);
    ASSERT_FALSE(got.empty());
    EXPECT_LE(got.size(), 3u);
    int64_t at = 0;
    for (auto [b, e] : got) {
      EXPECT_EQ(b, at);
      EXPECT_LT(b, e);
      EXPECT_EQ(b % 64, 0);
      at = e;
    }
    EXPECT_EQ(at, 1000);
  }
}

TEST(Parallel, OneUnitRunsInlineOnTheCaller) {
  Threads t(4);
  const auto caller = std::this_thread::get_id();
  std::thread::id ran;
  parallel_for(10, 16, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
    ran = std::this_thread::get_id();
  });
  EXPECT_EQ(ran, caller);
}

TEST(Parallel, NestedCallsRunInline) {
  Threads t(2);
  std::atomic<int64_t> total{0};
  parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int inner_chunks = 0;
      parallel_for(100, 1, [&](int64_t ib, int64_t ie) {
        ++inner_chunks;  // not atomic: inline calls run on this thread only
        total += ie - ib;
      });
      EXPECT_EQ(inner_chunks, 1);
    }
  });
  EXPECT_EQ(total.load(), 800);
}

TEST(Parallel, ExceptionReachesTheCallerAfterAllChunks) {
  Threads t(2);
  std::atomic<int> finished{0};
  EXPECT_THROW(parallel_for(2, 1,
                            [&](int64_t b, int64_t) {
                              if (b == 1) throw std::runtime_error("chunk failed");
                              ++finished;
                            }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 1);
  // The team still works afterwards.
  EXPECT_EQ(chunks_of(100, 1).back().second, 100);
}

TEST(Parallel, ConcurrentCallersEachCoverTheirRange) {
  Threads t(2);
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        std::atomic<int64_t> sum{0};
        parallel_for(1000, 10, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) sum += i;
        });
        if (sum.load() != 999 * 1000 / 2) ++bad;
      }
    });
  for (auto& th : callers) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Parallel, WorkersStartedForAJobTakePartInIt) {
  // Every chunk waits until all chunks have started, so the job finishes only if each of the
  // threads runs one at the same time. The team grows to 6 threads for this call: a worker made
  // for a job must take part in it (workers once read the job counter only when they got to run,
  // after the job was published, and then waited for the next one; the caller ran their chunks
  // later, one after another).
  Threads t(6);
  std::atomic<int> started{0};
  std::atomic<bool> timed_out{false};
  parallel_for(6, 1, [&](int64_t, int64_t) {
    ++started;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.load() < 6 && !timed_out.load())
      if (std::chrono::steady_clock::now() > until) timed_out = true;
      else std::this_thread::yield();
  });
  EXPECT_FALSE(timed_out.load());
  EXPECT_EQ(started.load(), 6);
}

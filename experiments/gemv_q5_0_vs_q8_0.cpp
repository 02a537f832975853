// GEMV time per matrix, GGML Q5_0 against its exact Q8_0 form (the same d, q - 16 as int8), at
// Gemma 3 270M's gate|up shape (4096 x 640), host::matmul with one x row. A pool of matrices is
// cycled so each call streams its weights from DRAM (pool 48: ~86 MB of Q5_0, past L3), or one
// matrix stays cached (pool 1); the two dtypes alternate per pass, 40 passes, medians and bests.
// Prints MISMATCH if the two outputs differ in any bit. Figures: docs/benchmarks-llm.md (Q5_0 as
// an engine dtype).
// Build (from a configured build dir B, after `ninja -C B xdna_host`; one command line):
//   g++ -O2 -std=gnu++20 -fopenmp -Isrc experiments/gemv_q5_0_vs_q8_0.cpp B/src/host/libxdna_host.a
//     B/src/libxdna_core.a -lpthread -o /tmp/gemv_q5_0_vs_q8_0
// Run: /tmp/gemv_q5_0_vs_q8_0 [THREADS=2] [POOL=48]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include "core/parallel.h"
#include "core/tensor.h"
#include "host/matmul.h"
using namespace xdna;
int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int pool = argc > 2 ? atoi(argv[2]) : 48;
  set_num_threads(threads);
  const int64_t N = 4096, K = 640, blocks = N * K / 32;
  std::mt19937 rng(1);
  std::vector<Tensor> w5, w8;
  for (int p = 0; p < pool; ++p) {
    Tensor a = Tensor::empty({N, K}, DType::Q5_0), b = Tensor::empty({N, K}, DType::Q8_0);
    auto* q5 = reinterpret_cast<uint8_t*>(a.raw());
    auto* q8 = reinterpret_cast<uint8_t*>(b.raw());
    for (int64_t i = 0; i < a.nbytes(); ++i) q5[i] = uint8_t(rng());
    for (int64_t bl = 0; bl < blocks; ++bl) {
      uint8_t* s = q5 + bl * 22; uint8_t* d = q8 + bl * 34;
      s[0] = uint8_t(rng()); s[1] = 0x20;
      std::memcpy(d, s, 2);
      uint32_t qh; std::memcpy(&qh, s + 2, 4);
      for (int j = 0; j < 16; ++j) {
        d[2 + j] = uint8_t(int8_t(((s[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16));
        d[18 + j] = uint8_t(int8_t(((s[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16));
      }
    }
    w5.push_back(a); w8.push_back(b);
  }
  std::vector<float> xv(K);
  for (auto& v : xv) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  Tensor x = Tensor::from_vector({1, K}, xv), y = Tensor::empty({1, N});
  auto run = [&](std::vector<Tensor>& w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& m : w) host::matmul(x, m, nullptr, y);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / w.size() * 1e6;
  };
  // The outputs must agree bit for bit.
  Tensor y5 = host::matmul(x, w5[0]), y8 = host::matmul(x, w8[0]);
  if (std::memcmp(y5.raw(), y8.raw(), N * 4)) std::printf("MISMATCH\n");
  std::vector<double> t5, t8;
  for (int r = 0; r < 40; ++r) { t8.push_back(run(w8)); t5.push_back(run(w5)); }
  std::sort(t5.begin(), t5.end()); std::sort(t8.begin(), t8.end());
  std::printf("threads %d pool %d: us/matrix q8_0 median %.1f best %.1f | q5_0 median %.1f best %.1f\n", threads, pool,
              t8[t8.size() / 2], t8[0], t5[t5.size() / 2], t5[0]);
}

#include "host/matmul_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "core/parallel.h"

namespace xdna::host {

Tensor random_weights(DType t, int64_t n, int64_t k, uint32_t seed, int64_t group) {
  Tensor w = Tensor::empty({n, k}, t);
  auto* bytes = reinterpret_cast<uint8_t*>(w.raw());
  const int64_t nbytes = w.nbytes();
  // Fill with a fast generator in parallel: 64 MiB+ matrices should not take seconds to make.
  parallel_for(nbytes / 8, 1 << 16, [&](int64_t b, int64_t e) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(b);
    for (int64_t i = b; i < e; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      std::memcpy(bytes + i * 8, &s, 8);
    }
  });
  for (int64_t i = nbytes / 8 * 8; i < nbytes; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + seed);
  const int64_t count = n * k;
  auto f16_small = [](uint8_t* p) {  // f16 2^-7: keeps GGML block scales finite and small
    const uint16_t d = 0x2000;
    std::memcpy(p, &d, 2);
  };
  switch (t) {
    case DType::F32: {
      float* f = w.data<float>();
      parallel_for(count, 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) f[i] = static_cast<float>(reinterpret_cast<int32_t*>(f)[i] >> 8) * 0x1p-23f;
      });
      break;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t* h = w.data<uint16_t>();
      const uint16_t exp_mask = t == DType::F16 ? 0x7c00 : 0x7f80, one = t == DType::F16 ? 0x3800 : 0x3f00;
      for (int64_t i = 0; i < count; ++i) h[i] = static_cast<uint16_t>((h[i] & ~exp_mask) | one);  // |v| in [0.5, 1)
      break;
    }
    case DType::I8:
    case DType::I4: {
      const int64_t g = group > 0 ? group : k;
      Tensor sc = Tensor::empty({n, k / g});
      std::mt19937 rng(seed);
      for (int64_t i = 0; i < sc.numel(); ++i) sc.data<float>()[i] = 0.001f + 0.01f * (rng() % 100) / 100.f;
      if (t == DType::I8)
        for (int64_t i = 0; i < count; ++i)
          if (w.data<int8_t>()[i] == -128) w.data<int8_t>()[i] = -127;
      w.set_scales(sc, g);
      break;
    }
    case DType::BFP16:
      for (int64_t b = 0; b < count / 8; ++b) bytes[b * 9] = static_cast<uint8_t>(120 + bytes[b * 9] % 8);
      break;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: {
      const auto& tr = traits(t);
      for (int64_t b = 0; b < count / tr.block_elems; ++b) {
        uint8_t* blk = bytes + b * tr.block_bytes;
        if (t == DType::Q6_K) {
          f16_small(blk + 208);
        } else {
          f16_small(blk);
          if (t == DType::Q4_K || t == DType::Q5_K) f16_small(blk + 2);
        }
      }
      break;
    }
    case DType::I32: break;
  }
  return w;
}

double triad_bytes_per_s(int64_t bytes_per_array, int reps, double min_seconds) {
  const int64_t n = bytes_per_array / 4;
  Tensor a = Tensor::empty({n}), b = Tensor::empty({n}), c = Tensor::empty({n});
  float *pa = a.data<float>(), *pb = b.data<float>(), *pc = c.data<float>();
  // First touch from the same threads that run the triad.
  parallel_for(n, 4096, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) pa[i] = 0.f, pb[i] = 1.f, pc[i] = 2.f;
  });
  const float scalar = 3.f;
  const double secs = best_seconds(
      [&] {
        parallel_for(n, 4096, [&](int64_t s, int64_t e) {
          // Local restrict copies: without them GCC reloads `scalar` every element and stays scalar.
          float* __restrict out = pa;
          const float* __restrict in1 = pb;
          const float* __restrict in2 = pc;
          const float k = scalar;
          for (int64_t i = s; i < e; ++i) out[i] = in1[i] + k * in2[i];
        });
      },
      reps, min_seconds);
  return 3.0 * static_cast<double>(n) * 4 / secs;
}

double best_seconds(const std::function<void()>& fn, int reps, double min_seconds) {
  using clock = std::chrono::steady_clock;
  double best = 1e30, total = 0;
  for (int i = 0; i < reps || total < min_seconds; ++i) {
    const auto t0 = clock::now();
    fn();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

}  // namespace xdna::host

// What the fused stage kernel tests share (test_aie_stage_kernels.cpp, test_sim_fused_int8.cpp):
// seeded bf16-exact random inputs, a decoder layer's weights, RoPE rows and a filled KV cache.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "npu/design_families.h"
#include "npu/sim_exec.h"

namespace xdna::npu::test {

struct FusedRng {
  std::mt19937 g;
  explicit FusedRng(uint32_t seed) : g(seed) {}
  // bf16-exact values in [lo, hi): packing them is exact.
  std::vector<float> vals(int64_t n, float lo = -0.5f, float hi = 0.5f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(u(g)));
    return v;
  }
  std::vector<aie::bf16> bf16s(int64_t n) { return to_bf16(vals(n, -1.0f, 1.0f)); }
};

// A layer's weights without Gemma 3's post-norm gammas (drawn after these where a test wants them).
inline SimLayerWeights layer_weights(FusedRng& r, const DecodeLayerShape& s) {
  const int64_t H = s.hidden, Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim, I = s.intermediate;
  SimLayerWeights w;
  w.attn_norm = r.vals(H, 0.5f, 1.5f), w.ffn_norm = r.vals(H, 0.5f, 1.5f);
  w.q = r.vals(Q * H), w.k = r.vals(KV * H), w.v = r.vals(KV * H), w.o = r.vals(H * Q);
  if (s.qk_norm) w.q_norm = r.vals(s.head_dim, 0.5f, 1.5f), w.k_norm = r.vals(s.head_dim, 0.5f, 1.5f);
  w.gate = r.vals(I * H), w.up = r.vals(I * H), w.down = r.vals(H * I);
  return w;
}

inline std::vector<float> rope(int64_t D, int64_t position) {
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(10000.0f, -2.0f * float(i) / float(D));
  return rope_row(inv, position);
}

// A KV cache of `capacity` positions holding `length` random ones.
inline SimKvCache kv_cache(FusedRng& r, const DecodeLayerShape& s, int64_t length, int64_t capacity) {
  SimKvCache kv(s.kv_heads, s.head_dim, capacity);
  for (int64_t t = 0; t < length; ++t) kv.append(r.bf16s(2 * s.kv_heads * s.head_dim));
  return kv;
}

}  // namespace xdna::npu::test

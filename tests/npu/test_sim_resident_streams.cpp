// npu-sim's fused decode reads the cores' DDR objects in place from the kept arguments
// (sim_exec.h, SimStreamCounts): after the first token no weight byte is gathered into a buffer
// of its own, as the device streams its resident buffers; and a layer's KV views (each about the
// cache's size) are cleared only where the last layer wrote them, not whole. Counts, not timings.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "npu/sim_exec_decoder.h"

using namespace xdna::npu;

namespace {

// A small Qwen3-like model (QK-norm, SwiGLU) with random weights: hidden 64, 4 query heads on
// 2 KV heads of 16, intermediate 64, vocabulary 96, 2 layers; int8 weights and KV.
SimDecoderModel small_model() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const auto rnd = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  };
  const auto ones = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n), 1.0f); };
  SimDecoderModel m;
  m.shape.hidden = 64, m.shape.heads = 4, m.shape.kv_heads = 2, m.shape.head_dim = 16, m.shape.intermediate = 64;
  m.shape.qk_norm = true;
  m.shape.kv_int8 = true;
  m.weights = xdna::DType::I8;
  m.vocab = 96;
  const int64_t H = 64, Q = 64, KV = 32, I = 64, D = 16;
  m.embed = rnd(m.vocab * H);
  for (int64_t i = 0; i < D / 2; ++i) m.inv_freq.push_back(1.0f / float(1 << i));
  for (int l = 0; l < 2; ++l) {
    SimLayerWeights w;
    w.attn_norm = ones(H), w.ffn_norm = ones(H), w.q_norm = ones(D), w.k_norm = ones(D);
    w.q = rnd(Q * H), w.k = rnd(KV * H), w.v = rnd(KV * H), w.o = rnd(H * Q);
    w.gate = rnd(I * H), w.up = rnd(I * H), w.down = rnd(H * I);
    m.layers.push_back(std::move(w));
  }
  m.final_norm = ones(H);
  m.head = rnd(m.vocab * H);
  return m;
}

int64_t weight_arg_bytes(const SimResidentArgs& kept) {
  int64_t n = 0;
  for (const HostArgs& a : kept.layers)
    for (const std::vector<uint8_t>& arg : a) n += int64_t(arg.size());  // only the weights are kept
  for (const std::vector<uint8_t>& arg : kept.head) n += int64_t(arg.size());
  return n;
}

}  // namespace

TEST(SimFusedResidentStreams, WeightsReadInPlaceAndKvViewsNotClearedWhole) {
  const SimDecoderModel m = small_model();
  SimResidentArgs kept;
  // A cache of 256 positions: each layer's kv and kv_row views hold at least
  // 2 (K, V) x 2 KV heads x 256 rows x 16 int8 values, 32 KiB for the two.
  const int64_t capacity = 256, views_bytes = 2 * int64_t(m.layers.size()) * (2 * 2 * capacity * 16);
  SimDecoderState fresh(m, capacity), resident(m, capacity);
  const int32_t ids[] = {3, 41, 77, 12};
  for (size_t t = 0; t < std::size(ids); ++t) {
    const SimTokenResult a = fused_decode_token(m, ids[t], fresh);
    const SimTokenResult b = fused_decode_token(m, ids[t], resident, &kept);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * 4), 0) << "token " << t;
    const SimStreamCounts& c = kept.last_token;
    // Every object read, and every byte of the kept weight arguments among them read in place:
    // a per-token gather of the streams (or of the weights) would move these bytes to gathered.
    const int64_t weights = weight_arg_bytes(kept);
    EXPECT_GT(weights, 0);
    EXPECT_GE(c.in_place_bytes, weights) << "token " << t;
    EXPECT_LT(c.gathered_bytes, weights / 4) << "token " << t;
    // From the second token the layers' arguments are reused: the KV views cleared where written
    // (a few cached rows; the small arguments, x, the RoPE row and the outputs, whole), not whole
    // as a fresh zero-fill would (at least views_bytes).
    if (t > 0) {
      EXPECT_GT(kept.last_token_cleared, 0) << "token " << t;
      EXPECT_LT(kept.last_token_cleared, views_bytes / 4) << "token " << t;
    }
  }
}

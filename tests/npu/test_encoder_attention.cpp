// Encoder attention: the design family (shapes of BERT-base and Whisper encoders validate, a tile
// that cannot fit is refused naming L1), npu-sim's tile-by-tile execution of the kernel source
// aie_kernels/attention_encoder_bf16.cc against (a) a direct host implementation of the same
// numerics written here from the kernel's stated rules (bit-exact: the block order per row is the
// same) and (b) f32 attention on the same bf16-rounded inputs (tolerance stated below), for
// non-causal, GQA, banded and causal cases; and the placement in NpuSimBackend and the planner.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "core/graph.h"
#include "core/numeric.h"
#include "npu/aie_numerics.h"
#include "npu/design_families.h"
#include "npu/planner.h"
#include "npu/sim_backend.h"
#include "npu/sim_exec_encoder.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

float bf(float x) { return aie::to_float(aie::to_bf16(x, aie::Rounding::NearestEven)); }

bool sees(const EncoderAttentionShape& s, int64_t p, int64_t j) {
  if (s.causal) return j <= p && (s.window <= 0 || p - j < s.window);
  return s.window <= 0 || std::abs(p - j) < s.window;
}

// The kernel's numerics written out directly: per row, blocks of kb keys from key 0 in order
// (a block the row cannot see changes nothing, so visiting every block is the same order).
std::vector<float> direct_same_numerics(const EncoderAttentionShape& s, int64_t kb, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v) {
  using namespace aie;
  const Rounding rn = Rounding::NearestEven;
  const int64_t D = s.head_dim, group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> out(q.size());
  auto b16 = [&](float x) { return to_bf16(x, rn); };
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t i = 0; i < s.T; ++i) {
      const int64_t g = h / group;
      float m = -std::numeric_limits<float>::infinity(), l = 0;
      std::vector<float> o(size_t(D), 0.0f);
      for (int64_t b0 = 0; b0 < s.S; b0 += kb) {
        std::vector<float> sc(static_cast<size_t>(kb));
        std::vector<bool> vis(size_t(kb), false);
        float bmax = -std::numeric_limits<float>::infinity();
        bool any = false;
        for (int64_t j = b0; j < std::min(s.S, b0 + kb); ++j) {
          if (!sees(s, i, j)) continue;
          accum<float, 16> acc;
          for (int64_t d = 0; d < D; d += 16) {
            vector<bf16, 16> a, c;
            for (int t = 0; t < 16; ++t)
              a.lane[t] = b16(q[size_t((i * s.heads + h) * D + d + t)]),
              c.lane[t] = b16(k[size_t((j * s.kv_heads + g) * D + d + t)]);
            acc = mac(acc, a, c);
          }
          sc[size_t(j - b0)] = reduce_add(acc) * scale;
          vis[size_t(j - b0)] = true;
          bmax = std::max(bmax, sc[size_t(j - b0)]);
          any = true;
        }
        if (!any) continue;
        const float mn = std::max(m, bmax);
        const float alpha = mn == m ? 1.0f : std::isinf(m) ? 0.0f : exp_lut(m - mn);
        float bsum = 0;
        for (int64_t t = 0; t < kb; ++t)
          if (vis[size_t(t)]) sc[size_t(t)] = to_float(b16(exp_lut(sc[size_t(t)] - mn))), bsum += sc[size_t(t)];
        for (int64_t d = 0; d < D; d += 16) {
          accum<float, 16> acc;
          for (int64_t t = 0; t < kb; ++t) {
            if (!vis[size_t(t)]) continue;
            vector<bf16, 16> p, c;
            for (int u = 0; u < 16; ++u)
              p.lane[u] = b16(sc[size_t(t)]), c.lane[u] = b16(v[size_t(((b0 + t) * s.kv_heads + g) * D + d + u)]);
            acc = mac(acc, p, c);
          }
          for (int u = 0; u < 16; ++u) o[size_t(d + u)] = o[size_t(d + u)] * alpha + acc.lane[u];
        }
        m = mn;
        l = l * alpha + bsum;
      }
      const float r = l > 0 ? reciprocal_lut(l) : 0.0f;
      for (int64_t d = 0; d < D; ++d)
        out[size_t((i * s.heads + h) * D + d)] = to_float(b16(l > 0 ? o[size_t(d)] * r : 0.0f));
    }
  return out;
}

// Plain attention in double on the bf16-rounded inputs.
std::vector<float> f32_attention(const EncoderAttentionShape& s, const std::vector<float>& q,
                                 const std::vector<float>& k, const std::vector<float>& v) {
  const int64_t D = s.head_dim, group = s.heads / s.kv_heads;
  std::vector<float> out(q.size(), 0.0f);
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t i = 0; i < s.T; ++i) {
      std::vector<double> w(size_t(s.S), 0.0);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < s.S; ++j) {
        if (!sees(s, i, j)) continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += double(bf(q[size_t((i * s.heads + h) * D + d)])) * bf(k[size_t((j * s.kv_heads + h / group) * D + d)]);
        w[size_t(j)] = dot / std::sqrt(double(D));
        mx = std::max(mx, w[size_t(j)]);
      }
      for (int64_t j = 0; j < s.S; ++j)
        if (sees(s, i, j)) w[size_t(j)] = std::exp(w[size_t(j)] - mx), sum += w[size_t(j)];
        else w[size_t(j)] = 0;
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < s.S; ++j) acc += w[size_t(j)] * bf(v[size_t((j * s.kv_heads + h / group) * D + d)]);
        out[size_t((i * s.heads + h) * D + d)] = sum > 0 ? float(acc / sum) : 0.0f;
      }
    }
  return out;
}

struct Case {
  const char* name;
  EncoderAttentionShape s;
};

}  // namespace

TEST(EncoderAttentionDesign, EncoderShapesValidateWithinL1AndL2) {
  struct Want {
    EncoderAttentionShape s;
    const char* what;
  };
  for (const Want& w : {Want{{512, 512, 12, 12, 64}, "BERT-base"}, Want{{128, 128, 12, 12, 32}, "MiniLM-L6 (128 tokens)"},
                        Want{{1500, 1500, 8, 8, 64}, "Whisper base"}, Want{{1500, 1500, 6, 6, 64}, "Whisper tiny"},
                        Want{{1024, 1024, 12, 12, 64, false, 128}, "ModernBERT local layer"}}) {
    const Design d = encoder_attention_design(w.s);
    EXPECT_NO_THROW(validate_design(d)) << w.what;
    EXPECT_EQ(d.family, "encoder_attention");
    for (const TileUse& t : d.tiles) {
      const int64_t bytes = tile_memory_bytes(d, t.at);
      if (t.has_kernel) {
        EXPECT_LE(bytes, 64 * 1024) << w.what << " " << to_string(t.at);
      } else if (t.at.row == 1) {
        EXPECT_LE(bytes, 512 * 1024) << w.what << " " << to_string(t.at);
      }
    }
    EXPECT_GE(d.params.at("q_tile"), 16) << w.what;
    EXPECT_GE(d.params.at("T_pad"), w.s.T);
    const DesignCost c = model_design(d);
    EXPECT_GT(c.compute_s, 0) << w.what;
    EXPECT_GT(c.total_s, 0) << w.what;
  }
  // The band reads fewer K/V blocks than full attention of the same length.
  const Design full = encoder_attention_design({1024, 1024, 12, 12, 64});
  const Design band = encoder_attention_design({1024, 1024, 12, 12, 64, false, 128});
  EXPECT_LT(band.args[1].bytes, full.args[1].bytes + 1);  // same KV layout ...
  EXPECT_LT(model_run(std::vector<Invocation>{{&band, "x", true}}).ddr_bytes,
            model_run(std::vector<Invocation>{{&full, "x", true}}).ddr_bytes);  // ... fewer bytes read
}

TEST(EncoderAttentionDesign, RefusesWhatCannotFitNamingTheResource) {
  // head_dim 256: even a 16-row tile with 16-key blocks needs more than 64 KiB of L1.
  try {
    encoder_attention_design({64, 64, 2, 2, 256});
    FAIL() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("compute tile"), std::string::npos) << m;
    EXPECT_NE(m.find("L1"), std::string::npos) << m;
  }
  EXPECT_THROW(encoder_attention_design({64, 64, 6, 4, 64}), std::invalid_argument);  // heads % kv_heads
  EXPECT_THROW(encoder_attention_design({64, 64, 4, 4, 24}), std::invalid_argument);  // head_dim % 16
  EXPECT_THROW(encoder_attention_design({0, 64, 4, 4, 64}), std::invalid_argument);
}

TEST(EncoderAttentionSim, BitExactWithDirectNumericsAndCloseToF32) {
  // Tolerance vs f32 attention on the same bf16 inputs: max |diff| <= 1.5e-2 with |v| <= 1
  // (exp table 1.4e-3 and reciprocal table 2e-3 relative, probabilities and outputs rounded to
  // bf16: 2^-9 relative each).
  const Case cases[] = {
      {"non-causal", {70, 70, 4, 4, 32}},
      {"GQA 6/2", {45, 45, 6, 2, 16}},
      {"banded window 9", {100, 100, 2, 2, 32, false, 9}},
      {"causal", {33, 33, 2, 1, 16, true, 0}},
      {"causal window 5", {40, 40, 2, 2, 16, true, 5}},
      {"cross (T != S)", {20, 37, 2, 2, 16}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const EncoderAttentionShape& s = c.s;
    const std::vector<float> q = random_values(size_t(s.T * s.heads * s.head_dim), seed++, 2.0f);
    const std::vector<float> k = random_values(size_t(s.S * s.kv_heads * s.head_dim), seed++, 2.0f);
    const std::vector<float> v = random_values(size_t(s.S * s.kv_heads * s.head_dim), seed++);
    const std::vector<float> same = direct_same_numerics(s, encoder_attention_design(s).params.at("kv_block"), q, k, v);
    const std::vector<float> ref = f32_attention(s, q, k, v);
    for (int columns : {8, 3}) {  // the block size does not depend on the columns
      const Design d = encoder_attention_design(s, columns);
      const std::vector<float> got = sim_encoder_attention(d, q, k, v);
      ASSERT_EQ(got.size(), same.size());
      size_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) mismatches += std::memcmp(&got[i], &same[i], 4) != 0;
      EXPECT_EQ(mismatches, 0u) << c.name << ", columns " << columns;
      double max_err = 0;
      for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, double(std::fabs(got[i] - ref[i])));
      EXPECT_LE(max_err, 1.5e-2) << c.name;
      if (columns == 8) std::printf("%s: max |npu-sim - f32| = %.2e\n", c.name, max_err);
      EXPECT_GT(max_err, 0.0) << c.name;  // bf16 and table numerics do differ from f32
    }
  }
}

TEST(EncoderAttentionSim, BackendPlacesAndRunsAttention) {
  NpuSimBackend sim;
  const EncoderAttentionShape s{24, 24, 4, 2, 32};
  const std::vector<float> qv = random_values(size_t(24 * 4 * 32), 7), kv = random_values(size_t(24 * 2 * 32), 8),
                           vv = random_values(size_t(24 * 2 * 32), 9);
  Tensor q = Tensor::empty({24, 4, 32}), k = Tensor::empty({24, 2, 32}), v = Tensor::empty({24, 2, 32});
  std::copy(qv.begin(), qv.end(), q.data<float>());
  std::copy(kv.begin(), kv.end(), k.data<float>());
  std::copy(vv.begin(), vv.end(), v.data<float>());
  const Node n{OpKind::Attention, {}, {0, 1, 2}, 3, "attn"};
  const std::vector<Tensor> in{q, k, v};
  ASSERT_TRUE(sim.supports(n, in));
  const Tensor out = sim.compute(n, in);
  EXPECT_EQ(out.shape(), (Shape{24, 4, 32}));
  const std::vector<float> want = sim_encoder_attention(encoder_attention_design(s), qv, kv, vv);
  EXPECT_EQ(std::memcmp(out.data<float>(), want.data(), want.size() * 4), 0);
  EXPECT_EQ(sim.dispatches(), 1u);
  EXPECT_EQ(sim.cost().designs.begin()->first.rfind("encoder_attention_", 0), 0u);
  // A mask input, soft-capping, or a head_dim that is not a multiple of 16: host.
  EXPECT_FALSE(sim.supports(Node{OpKind::Attention, {}, {0, 1, 2, 3}, 4, "masked"},
                            std::vector<Tensor>{q, k, v, Tensor::zeros({24, 24})}));
  EXPECT_NE(sim.refusals().at("attention").find("mask"), std::string::npos);
  Node capped = n;
  capped.attrs.softcap = 30.0f;
  EXPECT_FALSE(sim.supports(capped, in));
  const Tensor q8 = Tensor::zeros({4, 2, 8});
  EXPECT_FALSE(sim.supports(n, std::vector<Tensor>{q8, q8, q8}));
  EXPECT_NE(sim.refusals().at("attention").find("head_dim 8"), std::string::npos);
}

TEST(EncoderAttentionSim, PlannerPutsEncoderAttentionOnTheNpu) {
  Graph g;
  const ValueId q = g.input("q", Tensor::zeros({128, 12, 32}));
  const ValueId k = g.input("k", Tensor::zeros({128, 12, 32}));
  const ValueId v = g.input("v", Tensor::zeros({128, 12, 32}));
  OpAttrs band;
  band.window = 33;
  g.add(OpKind::Attention, {q, k, v}, {}, "attention");
  g.add(OpKind::Attention, {q, k, v}, band, "local_attention");
  const Plan p = plan_graph(g);
  ASSERT_EQ(p.ops.size(), 2u);
  for (const PlannedOp& o : p.ops) {
    EXPECT_TRUE(o.on_npu) << o.node << ": " << o.reason;
    EXPECT_GT(o.modelled_us, 0);
  }
  EXPECT_NE(p.ops[1].design.find("_w33"), std::string::npos);
  EXPECT_EQ(p.cost.run.dispatches, 2);
  EXPECT_EQ(p.cost.run.configures, 1);  // two designs in one xclbin
}

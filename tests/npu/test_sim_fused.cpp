// npu-sim executing the fused designs (sim_exec.h): a whole decode layer run as one decode_layer
// design equals, bit for bit, the same layer run op by op (qkv_rope and attention_decode designs,
// then unfused GEMV / add / RMSNorm / SiLU / mul dispatches of NpuSimBackend); it matches an f64
// host reference of the layer within the bf16 tolerance stated below; the fused MLP and LM head
// designs likewise; bad input is refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "npu/aie_kernels.h"
#include "npu/sim_backend.h"
#include "npu/sim_exec.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

std::vector<float> randn(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

SimLayerWeights random_layer(const DecodeLayerShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t H = size_t(s.hidden), Q = size_t(s.heads * s.head_dim), KV = size_t(s.kv_heads * s.head_dim),
               I = size_t(s.intermediate), D = size_t(s.head_dim);
  const auto gamma = [&](size_t n) {
    std::vector<float> g = randn(rng, n, 0.1f);
    for (float& x : g) x += 1.0f;
    return g;
  };
  SimLayerWeights w;
  w.attn_norm = gamma(H);
  w.q = randn(rng, Q * H, 1.0f / std::sqrt(float(H)));
  w.k = randn(rng, KV * H, 1.0f / std::sqrt(float(H)));
  w.v = randn(rng, KV * H, 1.0f / std::sqrt(float(H)));
  if (s.qk_norm) w.q_norm = gamma(D), w.k_norm = gamma(D);
  w.o = randn(rng, H * Q, 1.0f / std::sqrt(float(Q)));
  w.ffn_norm = gamma(H);
  w.gate = randn(rng, I * H, 1.0f / std::sqrt(float(H)));
  w.up = randn(rng, I * H, 1.0f / std::sqrt(float(H)));
  w.down = randn(rng, H * I, 1.0f / std::sqrt(float(I)));
  return w;
}

std::vector<float> inv_freq(int64_t D, float theta) {
  std::vector<float> f(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) f[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(D));
  return f;
}

// The layer as the host computes it, in f64 on the f32 weights (no bf16 anywhere): pre-norm,
// QKV, QK-norm, RoPE (half-split), causal attention over the cache, o + residual, RMSNorm,
// SiLU(gate) * up, down + residual. kc / vc: every position so far, [pos][kv_dim].
struct RefLayer {
  const DecodeLayerShape& s;
  const SimLayerWeights& w;
  float eps;
  std::vector<std::vector<double>> kc, vc;
  std::vector<double> norm(const std::vector<double>& x, const std::vector<float>& g) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
  }
  static std::vector<double> mv(const std::vector<float>& W, const std::vector<double>& x, size_t rows) {
    std::vector<double> y(rows, 0.0);
    for (size_t r = 0; r < rows; ++r)
      for (size_t k = 0; k < x.size(); ++k) y[r] += double(W[r * x.size() + k]) * x[k];
    return y;
  }
  std::vector<double> step(const std::vector<double>& x, int64_t pos, const std::vector<float>& freq) {
    const size_t D = size_t(s.head_dim), Hq = size_t(s.heads), Hk = size_t(s.kv_heads);
    const std::vector<double> xn = norm(x, w.attn_norm);
    std::vector<double> q = mv(w.q, xn, Hq * D), k = mv(w.k, xn, Hk * D), v = mv(w.v, xn, Hk * D);
    const auto head_op = [&](std::vector<double>& t, size_t heads, const std::vector<float>& g) {
      for (size_t h = 0; h < heads; ++h) {
        std::vector<double> hv(t.begin() + long(h * D), t.begin() + long(h * D + D));
        if (s.qk_norm) hv = norm(hv, g);
        for (size_t i = 0; i < D / 2; ++i) {
          const double a = double(pos) * freq[i], c = std::cos(a), sn = std::sin(a);
          const double lo = hv[i], hi = hv[i + D / 2];
          hv[i] = lo * c - hi * sn;
          hv[i + D / 2] = hi * c + lo * sn;
        }
        std::copy(hv.begin(), hv.end(), t.begin() + long(h * D));
      }
    };
    head_op(q, Hq, w.q_norm);
    head_op(k, Hk, w.k_norm);
    kc.push_back(k);
    vc.push_back(v);
    std::vector<double> attn(Hq * D, 0.0);
    for (size_t h = 0; h < Hq; ++h) {
      const size_t kh = h / (Hq / Hk);
      std::vector<double> sc(kc.size());
      double mx = -1e300, sum = 0;
      for (size_t t = 0; t < kc.size(); ++t) {
        double d = 0;
        for (size_t i = 0; i < D; ++i) d += q[h * D + i] * kc[t][kh * D + i];
        sc[t] = d / std::sqrt(double(D));
        mx = std::max(mx, sc[t]);
      }
      for (double& e : sc) sum += (e = std::exp(e - mx));
      for (size_t t = 0; t < kc.size(); ++t)
        for (size_t i = 0; i < D; ++i) attn[h * D + i] += sc[t] / sum * vc[t][kh * D + i];
    }
    std::vector<double> h1 = mv(w.o, attn, size_t(s.hidden));
    for (size_t i = 0; i < h1.size(); ++i) h1[i] += x[i];
    const std::vector<double> hn = norm(h1, w.ffn_norm);
    std::vector<double> g = mv(w.gate, hn, size_t(s.intermediate)), u = mv(w.up, hn, size_t(s.intermediate));
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    std::vector<double> out = mv(w.down, g, size_t(s.hidden));
    for (size_t i = 0; i < out.size(); ++i) out[i] += h1[i];
    return out;
  }
};

struct Case {
  const char* name;
  DecodeLayerShape shape;
  int columns;
};

// Qwen3-shaped (QK-norm, GQA 2:1) on the whole array; Llama-shaped with more KV heads than
// cores (2 KV heads per core); a GeGLU variant on 2 columns.
const Case kCases[] = {
    {"qwen3_tiny_c8", {64, 4, 2, 16, 96, 1, true, false}, 8},
    {"llama_kv8_c1", {128, 8, 8, 16, 64, 1, false, false}, 1},
    {"geglu_c2", {64, 4, 1, 32, 128, 1, true, true}, 2},
};

}  // namespace

// Route A (one decode_layer design) == route B (qkv_rope, attention_decode, then unfused
// dispatches), bit for bit, on the output and on every KV row, for 7 positions.
TEST(SimFused, DecodeLayerEqualsOpByOpBitForBit) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const DecodeLayerShape& s = c.shape;
    const SimLayerWeights w = random_layer(s, 11);
    const std::vector<float> freq = inv_freq(s.head_dim, 10000.0f);
    SimKvCache kv_a(s.kv_heads, s.head_dim, 16), kv_b(s.kv_heads, s.head_dim, 16);
    NpuSimBackend sim;
    std::mt19937 rng(5);
    for (int64_t pos = 0; pos < 7; ++pos) {
      const std::vector<aie::bf16> x = to_bf16(randn(rng, size_t(s.hidden), 1.0f));
      const std::vector<float> rope = rope_row(freq, pos);
      const SimLayerResult a = fused_decode_layer(s, w, x, rope, kv_a, {}, c.columns);
      const SimLayerResult b = op_by_op_decode_layer(sim, s, w, x, rope, kv_b, {}, c.columns);
      ASSERT_EQ(a.designs.size(), 1u);
      EXPECT_EQ(a.designs[0].rfind("decode_layer_bf16_", 0), 0u) << a.designs[0];
      EXPECT_EQ(b.designs.size(), 11u);  // qkv_rope, attention_decode, 9 unfused ops
      ASSERT_EQ(a.out.size(), b.out.size());
      int diff = 0;
      for (size_t i = 0; i < a.out.size(); ++i) diff += a.out[i].bits != b.out[i].bits;
      EXPECT_EQ(diff, 0) << "position " << pos;
      ASSERT_EQ(kv_a.length, pos + 1);
      ASSERT_EQ(kv_b.length, pos + 1);
      for (size_t i = 0; i < kv_a.k.size(); ++i)
        ASSERT_TRUE(kv_a.k[i].bits == kv_b.k[i].bits && kv_a.v[i].bits == kv_b.v[i].bits) << "kv " << i;
    }
    EXPECT_EQ(sim.dispatches(), size_t(7 * 9));  // the unfused dispatches were priced by npu-sim
  }
}

// Against the f64 host reference (f32 weights, no bf16): relative L2 error of the layer output
// <= 1.5e-2 and every value within 0.05 + 2e-2 |ref| (bf16 rounds activations and weights at
// 2^-9 relative, the exp/recip tables add 1.4e-3 / 2e-3).
TEST(SimFused, DecodeLayerMatchesHostReferenceWithinBf16Tolerance) {
  for (const Case& c : kCases) {
    if (c.shape.gelu) continue;  // the reference is SwiGLU
    SCOPED_TRACE(c.name);
    const DecodeLayerShape& s = c.shape;
    const SimLayerWeights w = random_layer(s, 3);
    const std::vector<float> freq = inv_freq(s.head_dim, 10000.0f);
    SimKvCache kv(s.kv_heads, s.head_dim, 16);
    RefLayer ref{s, w, 1e-6f, {}, {}};
    std::mt19937 rng(9);
    double worst = 0;
    for (int64_t pos = 0; pos < 6; ++pos) {
      const std::vector<float> xf = randn(rng, size_t(s.hidden), 1.0f);
      const std::vector<aie::bf16> x = to_bf16(xf);
      const std::vector<float> got = to_f32(fused_decode_layer(s, w, x, rope_row(freq, pos), kv, {}, c.columns).out);
      std::vector<double> xd(xf.size());
      for (size_t i = 0; i < xf.size(); ++i) xd[i] = aie::to_float(x[i]);  // the same input
      const std::vector<double> want = ref.step(xd, pos, freq);
      double num = 0, den = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
        EXPECT_LE(std::fabs(got[i] - want[i]), 0.05 + 2e-2 * std::fabs(want[i])) << "pos " << pos << " i " << i;
      }
      worst = std::max(worst, std::sqrt(num / den));
    }
    std::printf("%s: fused layer vs f64 host reference, worst relative L2 error %.2e\n", c.name, worst);
    EXPECT_LE(worst, 1.5e-2);
    EXPECT_GT(worst, 0.0);  // bf16 is not f64: the comparison is live
  }
}

// The fused MLP design == gate, up, SiLU, mul, down as unfused npu-sim dispatches, bit for bit.
TEST(SimFused, MlpFusedEqualsUnfusedDispatches) {
  const DecodeLayerShape s{64, 4, 2, 16, 160, 1, false, false};
  const SimLayerWeights w = random_layer(s, 21);
  std::mt19937 rng(2);
  const std::vector<aie::bf16> x = to_bf16(randn(rng, 64, 1.0f));
  const Design d = mlp_fused_design(DType::BF16, s, 8);
  HostArgs a = pack_mlp_fused(d, w, x);
  run_design(d, a);
  const std::vector<aie::bf16> got = arg_bf16(d, a, "result", 64);

  NpuSimBackend sim;
  const auto run = [&](OpKind op, std::vector<Tensor> in) {
    Node n;
    n.op = op;
    EXPECT_TRUE(sim.supports(n, in));
    return sim.compute(n, in);
  };
  const Tensor xt = Tensor::from_vector({1, 64}, to_f32(x));
  const Tensor g = run(OpKind::MatMul, {xt, Tensor::from_vector({160, 64}, w.gate)});
  const Tensor u = run(OpKind::MatMul, {xt, Tensor::from_vector({160, 64}, w.up)});
  const Tensor m = run(OpKind::Mul, {run(OpKind::Silu, {g}), u});
  const std::vector<float> want = run(OpKind::MatMul, {m, Tensor::from_vector({64, 160}, w.down)}).to_vector();
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(aie::to_float(got[i]), want[i]) << i;
}

// LM head: logits leave per column [object][core][chunk]; they equal gemv_bf16_f32 on the
// RMSNorm'd input row by row (vocab not a multiple of the cores: padding rows are dropped).
// 300 on 32 cores: one object of 10 rows; 2101 on 4: three objects of 176 rows (the core's 526
// rows spread evenly, two padding rows a core).
TEST(SimFused, LmHeadLogitsInVocabOrder) {
  for (const auto& [V, columns, chunk] : {std::tuple<int64_t, int, int64_t>{300, 8, 10}, {2101, 1, 176}}) {
    const int64_t H = 64;
    std::mt19937 rng(4);
    const std::vector<float> gamma = randn(rng, H, 1.0f), head = randn(rng, size_t(V * H), 0.2f);
    const std::vector<aie::bf16> x = to_bf16(randn(rng, H, 1.0f));
    const Design d = lm_head_design(DType::BF16, V, H, columns);
    EXPECT_EQ(d.params.at("chunk_rows"), chunk);
    HostArgs a = pack_lm_head(d, gamma, head, x);
    run_design(d, a);
    const std::vector<float> logits = lm_head_logits(d, a);
    ASSERT_EQ(logits.size(), size_t(V));
    const std::vector<aie::bf16> g = to_bf16(gamma), w = to_bf16(head);
    std::vector<aie::bf16> xn(H);
    aie::rmsnorm_bf16(x.data(), g.data(), 0.0f, 1e-6f, xn.data(), H, kSimRounding);
    std::vector<float> want(static_cast<size_t>(V));
    aie::gemv_bf16_f32(w.data(), xn.data(), want.data(), V, H);
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(logits[size_t(v)], want[size_t(v)]) << d.name << " " << v;
  }
}

TEST(SimFused, RefusesWhatItCannotExecute) {
  const DecodeLayerShape s{64, 4, 2, 16, 96, 3, true, false};
  const Design bfp = decode_layer_design(DType::BFP16, s, 8);
  HostArgs a;
  for (const HostArg& h : bfp.args) a.emplace_back(size_t(h.bytes), 0);
  try {
    run_design(bfp, a);
    FAIL() << "a bfp16 design ran";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bfp16 is priced, not executed"), std::string::npos) << e.what();
  }
  const Design bf = decode_layer_design(DType::BF16, s, 8);
  HostArgs b;
  for (const HostArg& h : bf.args) b.emplace_back(size_t(h.bytes), 0);
  b[0].pop_back();
  EXPECT_THROW(run_design(bf, b), std::invalid_argument);
  // context 3 needs 2 cached positions
  SimKvCache kv(2, 16, 8);
  const SimLayerWeights w = random_layer(s, 1);
  EXPECT_THROW(pack_decode_layer(bf, w, to_bf16(std::vector<float>(64, 0.5f)), rope_row(inv_freq(16, 1e4f), 0), kv),
               std::invalid_argument);
}

// An lm_head design whose logits objects do not split its padded rows is refused by name.
TEST(SimFused, RefusesAnLmHeadWithAMismatchedChunk) {
  Design d = lm_head_design(DType::BF16, 2101, 64, 1);  // 528 rows a core in objects of 176
  d.params["chunk_rows"] = 100;
  const std::vector<float> gamma(64, 1.0f), head(size_t(2101 * 64), 0.5f);
  try {
    pack_lm_head(d, gamma, head, to_bf16(std::vector<float>(64, 0.5f)));
    FAIL() << "a mismatched chunk was packed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("chunk_rows"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(d.name), std::string::npos) << e.what();
  }
}

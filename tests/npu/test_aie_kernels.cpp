// The core kernel sources (aie_kernels/*.cc, built into xdna_npu for the host) against plain C++
// references of their documented numerics, written here without the xk / aie_numerics layer:
// f32 lanes summed in the stated order, the stated reductions, bf16 stores through
// core/numeric.h, and the exp / reciprocal tables rebuilt from their definitions
// (aie_numerics.h). npu-sim runs exactly these sources, so a change of their numerics fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "aie_kernels/kernels.h"
#include "core/numeric.h"

using namespace xdna;
using xk::bf16;

namespace {

// ---- references -----------------------------------------------------------------------------

float f(bf16 x) { return bf16_to_f32(x.bits); }
bf16 rne(float x) { return {f32_to_bf16(x)}; }
bf16 flo(float x) { return {f32_to_bf16_floor(x)}; }

// exp: 2^floor(t) * 2^((j + 0.5) / 256), j the top 8 bits of frac(t), t = x * log2(e) in f32.
float ref_exp(float x) {
  if (std::isnan(x)) return x;
  const float t = x * 1.44269504f;
  if (t >= 128.0f) return std::numeric_limits<float>::infinity();
  if (t < -126.0f) return 0.0f;
  const float i = std::floor(t);
  const int j = std::min(255, int((t - i) * 256));
  return std::ldexp(float(std::exp2((j + 0.5) / 256)), int(i));
}

// reciprocal: 2 / (m_lo + m_hi) of the mantissa interval of the top 8 mantissa bits, times 2^-e.
float ref_recip(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  const int e = int((b >> 23) & 0xFF), j = int((b >> 15) & 0xFF);
  if (e == 0 || e == 255) return e == 0 ? std::copysign(INFINITY, x) : (b & 0x7FFFFF ? x : std::copysign(0.0f, x));
  const float r = std::ldexp(float(2.0 / ((1.0 + j / 256.0) + (1.0 + (j + 1) / 256.0))), 127 - e);
  return std::signbit(x) ? -r : r;
}

// Sum of products in L f32 lanes (lane l takes i = l mod L, i increasing), halved pairwise.
float ref_lanes(const std::vector<float>& prod, int L) {
  std::vector<float> lane(static_cast<size_t>(L), 0.0f);
  for (size_t i = 0; i < prod.size(); ++i) lane[i % size_t(L)] += prod[i];
  for (int half = L / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) lane[size_t(i)] += lane[size_t(i + half)];
  return lane[0];
}

float ref_dot(const bf16* a, const bf16* b, int n) {
  std::vector<float> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[size_t(i)] = f(a[i]) * f(b[i]);
  return ref_lanes(p, 16);
}

std::vector<bf16> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16> v(n);
  for (auto& x : v) x = rne(d(g));
  return v;
}

void expect_bits(const std::vector<bf16>& got, const std::vector<bf16>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i].bits != want[i].bits;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " values differ";
}

}  // namespace

TEST(AieKernels, GemvBf16IsLaneOrderedF32WithTheStoreRounding) {
  const int32_t K = 192, rows = 12;
  const auto W = random_bf16(size_t(K) * rows, 1), x = random_bf16(size_t(K), 2);
  std::vector<bf16> y(rows), want(rows), want_floor(rows), y_floor(rows);
  std::vector<float> y32(rows);
  gemv_bf16(W.data(), x.data(), y.data(), K, rows);
  gemv_bf16_f32(W.data(), x.data(), y32.data(), K, rows);
  xk_impl::gemv_bf16(W.data(), x.data(), y_floor.data(), K, rows, xk::Rounding::Floor);
  for (int32_t r = 0; r < rows; ++r) {
    const float s = ref_dot(W.data() + r * K, x.data(), K);
    want[size_t(r)] = rne(s), want_floor[size_t(r)] = flo(s);
    EXPECT_EQ(y32[size_t(r)], s) << r;
  }
  expect_bits(y, want, "gemv_bf16");
  expect_bits(y_floor, want_floor, "gemv_bf16 floor");
  EXPECT_NE(std::memcmp(y.data(), y_floor.data(), y.size() * 2), 0) << "the two roundings never differed";
}

TEST(AieKernels, GemvInt8WrapsAndShiftRoundsToNearestEven) {
  const int32_t K = 96, rows = 8;
  std::mt19937 g(3);
  std::vector<int8_t> W(size_t(K) * rows), x(static_cast<size_t>(K)), y(rows);
  for (auto& v : W) v = int8_t(int(g() % 256) - 128);
  for (auto& v : x) v = int8_t(int(g() % 256) - 128);
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  for (int shift : {0, 5, 9, 14}) {
    gemv_int8(W.data(), x.data(), y.data(), K, rows, shift);
    for (int32_t r = 0; r < rows; ++r) {
      int64_t s = 0;  // |s| < 2^21: no wrap at this size, so the exact sum is the lanes' sum
      for (int32_t k = 0; k < K; ++k) s += int64_t(W[size_t(r * K + k)]) * x[size_t(k)];
      const double q = std::nearbyint(std::ldexp(double(s), -shift));  // ties to even
      EXPECT_EQ(y[size_t(r)], int8_t(std::clamp(q, -128.0, 127.0))) << "row " << r << " shift " << shift;
    }
  }
}

TEST(AieKernels, RmsNormTakesEpsAndOffsetAtRunTime) {
  const int32_t n = 200;  // a tail shorter than 16
  const auto x = random_bf16(size_t(n), 4, 2.0f), gamma = random_bf16(size_t(n), 5, 0.5f);
  for (auto [eps, offset] : {std::pair{1e-6f, 0.0f}, std::pair{1e-5f, 1.0f}}) {
    std::vector<float> sq(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) sq[size_t(i)] = f(x[size_t(i)]) * f(x[size_t(i)]);
    const float inv = 1.0f / std::sqrt(ref_lanes(sq, 16) / float(n) + eps);
    std::vector<bf16> want(n), y(n);
    for (int32_t i = 0; i < n; ++i) want[size_t(i)] = rne(f(x[size_t(i)]) * inv * (f(gamma[size_t(i)]) + offset));
    rmsnorm_bf16(x.data(), gamma.data(), y.data(), n, xk::f32_bits(eps), xk::f32_bits(offset));
    expect_bits(y, want, offset == 0.0f ? "rmsnorm" : "rmsnorm offset 1");
  }
}

TEST(AieKernels, ElementwiseKernelsAreOneF32OpPerValue) {
  const int32_t n = 300;
  const auto a = random_bf16(size_t(n), 6, 3.0f), b = random_bf16(size_t(n), 7, 3.0f);
  std::vector<bf16> y(n), want(n);
  const auto each = [&](auto op) {
    for (int32_t i = 0; i < n; ++i) want[size_t(i)] = rne(op(f(a[size_t(i)]), f(b[size_t(i)])));
  };
  eltwise_add_bf16(a.data(), b.data(), y.data(), n);
  each([](float u, float v) { return u + v; });
  expect_bits(y, want, "add");
  eltwise_mul_bf16(a.data(), b.data(), y.data(), n);
  each([](float u, float v) { return u * v; });
  expect_bits(y, want, "mul");
  const float s = 0.3f;
  uint8_t s_bytes[4];
  std::memcpy(s_bytes, &s, 4);
  eltwise_scale_bf16(a.data(), s_bytes, y.data(), n);
  each([&](float u, float) { return u * s; });
  expect_bits(y, want, "scale");
  eltwise_exp_bf16(a.data(), y.data(), n);
  each([](float u, float) { return ref_exp(u); });
  expect_bits(y, want, "exp");
  eltwise_silu_bf16(a.data(), y.data(), n);
  each([](float u, float) { return u * ref_recip(1.0f + ref_exp(-u)); });
  expect_bits(y, want, "silu");
  eltwise_gelu_bf16(a.data(), y.data(), n);
  each([](float u, float) {
    const float t = 0.7978845608f * (u + 0.044715f * u * u * u);
    return u * ref_recip(1.0f + ref_exp(-2.0f * t));
  });
  expect_bits(y, want, "gelu");
  // The table functions are close to the real ones (the kernels are not just self-consistent).
  eltwise_silu_bf16(a.data(), y.data(), n);
  for (int32_t i = 0; i < n; ++i) {
    const double u = f(a[size_t(i)]);
    EXPECT_NEAR(f(y[size_t(i)]), u / (1.0 + std::exp(-u)), 0.01 * std::abs(u) + 1e-3) << u;
  }
}

TEST(AieKernels, LayerNormAndSoftmaxRows) {
  const int32_t n = 176;
  const auto x = random_bf16(size_t(n), 8, 2.0f), gb = random_bf16(size_t(2 * n), 9, 1.0f);
  float sum = 0.0f;
  for (int32_t i = 0; i < n; ++i) sum += f(x[size_t(i)]);
  const float mean = sum / float(n);
  float sq = 0.0f;
  for (int32_t i = 0; i < n; ++i) sq += (f(x[size_t(i)]) - mean) * (f(x[size_t(i)]) - mean);
  const float eps = 1e-5f, inv = 1.0f / std::sqrt(sq / float(n) + eps);
  std::vector<bf16> want(n), y(n);
  for (int32_t i = 0; i < n; ++i)
    want[size_t(i)] = rne((f(x[size_t(i)]) - mean) * inv * f(gb[size_t(i)]) + f(gb[size_t(n + i)]));
  layernorm_bf16(x.data(), gb.data(), y.data(), n, xk::f32_bits(eps));
  expect_bits(y, want, "layernorm");

  float mx = -INFINITY, total = 0.0f;
  for (int32_t i = 0; i < n; ++i) mx = std::max(mx, f(x[size_t(i)]));
  for (int32_t i = 0; i < n; ++i) total += ref_exp(f(x[size_t(i)]) - mx);
  for (int32_t i = 0; i < n; ++i) want[size_t(i)] = rne(ref_exp(f(x[size_t(i)]) - mx) * ref_recip(total));
  softmax_bf16(x.data(), y.data(), n);
  expect_bits(y, want, "softmax");
  float s = 0.0f;
  for (bf16 v : y) s += f(v);
  EXPECT_NEAR(s, 1.0f, 0.02f);
}

TEST(AieKernels, RopeRotatesHalfSplitAndInterleavedPairs) {
  const int32_t heads = 3, D = 32;
  const auto x0 = random_bf16(size_t(heads * D), 10);
  std::vector<float> cs(static_cast<size_t>(D));
  for (int i = 0; i < D / 2; ++i) cs[size_t(i)] = std::cos(0.3f * float(i + 1)), cs[size_t(D / 2 + i)] = std::sin(0.3f * float(i + 1));
  for (int interleaved : {0, 1}) {
    std::vector<bf16> x = x0, want = x0;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < D / 2; ++i) {
        const int lo = h * D + (interleaved ? 2 * i : i), hi = h * D + (interleaved ? 2 * i + 1 : i + D / 2);
        const float a = f(x0[size_t(lo)]), b = f(x0[size_t(hi)]), c = cs[size_t(i)], s = cs[size_t(D / 2 + i)];
        want[size_t(lo)] = rne(a * c - b * s), want[size_t(hi)] = rne(b * c + a * s);
      }
    rope_bf16(x.data(), cs.data(), heads, D, interleaved);
    expect_bits(x, want, interleaved ? "rope interleaved" : "rope half-split");
  }
}

TEST(AieKernels, AttentionPartialsCombineToSoftmaxAttention) {
  const int32_t D = 32, T = 37;
  const float scale = 1.0f / std::sqrt(float(D));
  const auto q = random_bf16(size_t(D), 11), K = random_bf16(size_t(T * D), 12), V = random_bf16(size_t(T * D), 13);
  // Three blocks of positions (the last one empty) as three cores would take them.
  const int32_t blocks[][2] = {{0, 16}, {16, T}, {T, T}};
  std::vector<float> ms;
  std::vector<bf16> outs;
  std::vector<float> scores(static_cast<size_t>(T));
  for (auto [t0, t1] : blocks) {
    std::vector<bf16> o(D), want(D);
    float m_s[2];
    attention_partial_bf16(q.data(), K.data() + t0 * D, V.data() + t0 * D, o.data(), m_s, scores.data(), t1 - t0, D,
                           xk::f32_bits(scale));
    // Reference partial: scores, max, bf16 weights, sum in order, lane-wise weighted V sums.
    float m = -INFINITY, l = 0.0f;
    std::vector<float> s(static_cast<size_t>(t1 - t0)), acc(static_cast<size_t>(D), 0.0f);
    for (int32_t t = t0; t < t1; ++t) m = std::max(m, s[size_t(t - t0)] = ref_dot(q.data(), K.data() + t * D, D) * scale);
    for (int32_t t = t0; t < t1; ++t) {
      const float p = f(rne(ref_exp(s[size_t(t - t0)] - m)));
      l += p;
      for (int32_t d = 0; d < D; ++d) acc[size_t(d)] += p * f(V[size_t(t * D + d)]);
    }
    for (int32_t d = 0; d < D; ++d) want[size_t(d)] = t1 > t0 ? rne(acc[size_t(d)] * ref_recip(l)) : bf16{};
    expect_bits(o, want, "attention partial");
    EXPECT_EQ(m_s[0], m);
    EXPECT_EQ(m_s[1], l);
    ms.insert(ms.end(), m_s, m_s + 2);
    outs.insert(outs.end(), o.begin(), o.end());
  }
  std::vector<bf16> out(D), want(D);
  attention_combine_bf16(ms.data(), outs.data(), out.data(), 3, D);
  const float M = std::max(ms[0], ms[2]);
  const float w0 = ref_exp(ms[0] - M) * ms[1], w1 = ref_exp(ms[2] - M) * ms[3];
  for (int32_t d = 0; d < D; ++d)
    want[size_t(d)] = rne((0.0f + w0 * f(outs[size_t(d)]) + w1 * f(outs[size_t(D + d)])) * ref_recip(w0 + w1));
  expect_bits(out, want, "attention combine");
  // And it is attention: softmax(q K^T scale) V in double, within the tables' and bf16's error.
  std::vector<double> p(static_cast<size_t>(T));
  double mx = -INFINITY, z = 0.0;
  for (int32_t t = 0; t < T; ++t) {
    double s = 0.0;
    for (int32_t d = 0; d < D; ++d) s += double(f(q[size_t(d)])) * f(K[size_t(t * D + d)]);
    mx = std::max(mx, p[size_t(t)] = s * scale);
  }
  for (double& v : p) z += v = std::exp(v - mx);
  for (int32_t d = 0; d < D; ++d) {
    double o = 0.0;
    for (int32_t t = 0; t < T; ++t) o += p[size_t(t)] / z * f(V[size_t(t * D + d)]);
    EXPECT_NEAR(f(out[size_t(d)]), o, 0.02) << d;
  }
}

// ---- fused-stage entry points, run through the design's core programs ---------------------------

#include "npu/design_families.h"
#include "npu/sim_exec.h"
#include "npu/sim_program.h"

namespace {

// Every core's program (design.h CoreStep) of an mlp_fused design over the mlp_fused_bf16 entry
// points (src/npu/sim_program.h, the shared interpreter). Returns the drained result.
std::vector<bf16> run_mlp_programs(const xdna::npu::Design& d, const std::vector<std::vector<bf16>>& streams) {
  using namespace xdna::npu;
  std::vector<std::vector<uint8_t>> bytes;
  for (const std::vector<bf16>& s : streams) {
    bytes.emplace_back(s.size() * 2);
    std::memcpy(bytes.back().data(), s.data(), s.size() * 2);
  }
  const std::vector<uint8_t> result =
      run_core_programs(d, stage_kernel("mlp_fused_bf16"), bytes, runtime_scalars({})).at("result");
  std::vector<bf16> out(result.size() / 2);
  std::memcpy(out.data(), result.data(), result.size());
  return out;
}

}  // namespace

TEST(AieKernels, MlpFusedStageEntryPointsRunTheProgramAndMatchTheSimulator) {
  using namespace xdna::npu;
  for (bool gelu : {false, true}) {
    DecodeLayerShape s;
    // hidden 240: the gate/up rows end inside an object (2 x 68 x 240 values), so the down
    // rows' first values come with the last gate/up object (the carry).
    s.hidden = 240, s.intermediate = 272, s.heads = 1, s.kv_heads = 1, s.head_dim = 16, s.gelu = gelu;
    const Design d = mlp_fused_design(DType::BF16, s, 1);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    const auto vals = [&](int64_t n) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = f(rne(u(rng)));  // bf16 values: packing them is exact
      return v;
    };
    SimLayerWeights w;
    w.gate = vals(s.intermediate * s.hidden), w.up = vals(s.intermediate * s.hidden), w.down = vals(s.hidden * s.intermediate);
    const std::vector<float> xf = vals(s.hidden);
    std::vector<bf16> x;
    for (float v : xf) x.push_back(rne(v));
    HostArgs a = pack_mlp_fused(d, w, x);
    run_design(d, a);
    const std::vector<bf16> sim = arg_bf16(d, a, "result", s.hidden);

    // Each core's DDR stream: x (one padded object), then its gate, up and down rows, padded.
    const int64_t P = 4, Ri = (s.intermediate + P - 1) / P, Rh = (s.hidden + P - 1) / P;
    std::vector<std::vector<bf16>> streams(static_cast<size_t>(P));
    for (int64_t p = 0; p < P; ++p) {
      std::vector<bf16>& st = streams[size_t(p)];
      st = x;
      st.resize(1024);
      const auto rows = [&](const std::vector<float>& m, int64_t n, int64_t k, int64_t R) {
        for (int64_t r = p * R; r < p * R + R; ++r)
          for (int64_t i = 0; i < k; ++i) st.push_back(r < n ? rne(m[size_t(r * k + i)]) : bf16{});
      };
      rows(w.gate, s.intermediate, s.hidden, Ri);
      rows(w.up, s.intermediate, s.hidden, Ri);
      rows(w.down, s.hidden, s.intermediate, Rh);
      st.resize((st.size() + 1023) / 1024 * 1024);
    }
    const std::vector<bf16> cores = run_mlp_programs(d, streams);
    ASSERT_EQ(cores.size(), sim.size());
    int nonzero = 0;
    for (size_t i = 0; i < sim.size(); ++i) {
      EXPECT_EQ(cores[i].bits, sim[i].bits) << "value " << i << " gelu " << gelu;
      nonzero += sim[i].bits != 0;
    }
    EXPECT_GT(nonzero, int(sim.size()) / 2);
  }
}

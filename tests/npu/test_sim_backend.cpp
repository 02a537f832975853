// npu-sim: matmul numerics against direct reimplementations (bit-exact) and against f32 (bf16
// tolerance), refusal of ops it has no design for, and dispatch / configure counting.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/graph.h"
#include "core/numeric.h"
#include "npu/aie_kernels.h"
#include "npu/planner.h"
#include "npu/sim_backend.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

Tensor random_tensor(const Shape& s, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(size_t(shape_numel(s)));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector(s, v);
}

float bf16r(float x) { return bf16_to_f32(f32_to_bf16(x)); }

Node matmul_node() { return Node{OpKind::MatMul, {}, {0, 1, 2}, 3, "mm"}; }

// Runs one node on the backend after checking it is accepted.
Tensor run(NpuSimBackend& sim, const Node& n, std::vector<Tensor> in) {
  EXPECT_TRUE(sim.supports(n, in)) << sim.refusals().begin()->second;
  return sim.compute(n, in);
}

}  // namespace

TEST(NpuSim, GemmBf16IsBitExactWithDirectNumericsAndCloseToF32) {
  const int64_t M = 5, K = 128, N = 24;
  const Tensor x = random_tensor({M, K}, 1), w = random_tensor({N, K}, 2, 0.1f), b = random_tensor({N}, 3);
  NpuSimBackend sim;
  const Tensor y = run(sim, matmul_node(), {x, w, b});
  ASSERT_EQ(y.shape(), (Shape{M, N}));
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  double max_rel = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      // Same numerics by hand: bf16 operands, f32 sum in increasing k, bf16 store (nearest
      // even), f32 bias.
      float acc = 0.0f;
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        acc += bf16r(xp[i * K + k]) * bf16r(wp[j * K + k]);
        ref += double(xp[i * K + k]) * wp[j * K + k];
        mag += std::abs(double(xp[i * K + k]) * wp[j * K + k]);
      }
      const float expect = bf16r(acc) + b.data<float>()[j];
      EXPECT_EQ(y.data<float>()[i * N + j], expect) << i << "," << j;
      ref += b.data<float>()[j];
      max_rel = std::max(max_rel, std::abs(y.data<float>()[i * N + j] - ref) / (mag + 1.0));
    }
  // bf16 operands (2^-9 relative each) and a bf16 store: a few 2^-8 of the magnitude at most.
  EXPECT_LT(max_rel, 3.0 / 256);
}

TEST(NpuSim, GemvBf16MatchesTheKernelAndPadsK) {
  const int64_t K = 40, N = 9;  // K padded to 48 for the 16-lane kernel
  const Tensor x = random_tensor({1, K}, 4), w = random_tensor({N, K}, 5);
  NpuSimBackend sim;
  Node n{OpKind::MatMul, {}, {0, 1}, 2, "gemv"};
  const Tensor y = run(sim, n, {x, w});
  std::vector<aie::bf16> W(size_t(N * 48)), X(48), Y(static_cast<size_t>(N));
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) W[size_t(j * 48 + k)] = {f32_to_bf16(w.data<float>()[j * K + k])};
  for (int64_t k = 0; k < K; ++k) X[size_t(k)] = {f32_to_bf16(x.data<float>()[k])};
  aie::gemv_bf16(W.data(), X.data(), Y.data(), N, 48, aie::Rounding::NearestEven);
  for (int64_t j = 0; j < N; ++j) EXPECT_EQ(y.data<float>()[j], aie::to_float(Y[size_t(j)]));
  EXPECT_NE(sim.cost().designs.begin()->first.find("gemv_bf16"), std::string::npos);
}

TEST(NpuSim, Bfp16AndInt8Weights) {
  const int64_t M = 8, K = 64, N = 16;
  const Tensor x = random_tensor({M, K}, 6), wf = random_tensor({N, K}, 7, 0.2f);
  // bfp16 weights: the sim equals gemm_bfp16 on the packed operands.
  Tensor wb = Tensor::empty({N, K}, DType::BFP16);
  bfp16_encode(wf.data<float>(), N * K, wb.data<uint8_t>());
  NpuSimBackend sim;
  Node n{OpKind::MatMul, {}, {0, 1}, 2, "mm"};
  const Tensor yb = run(sim, n, {x, wb});
  std::vector<float> wbt(size_t(K * N)), wdec(size_t(N * K));
  bfp16_decode(wb.data<uint8_t>(), N * K, wdec.data());
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) wbt[size_t(k * N + j)] = wdec[size_t(j * K + k)];
  std::vector<uint8_t> A(size_t(M * K / 8 * 9)), B(size_t(K * N / 8 * 9));
  aie::pack_bfp16_a(x.data<float>(), M, K, A.data());
  aie::pack_bfp16_b(wbt.data(), K, N, B.data());
  std::vector<float> C(size_t(M * N), 0.0f);
  aie::gemm_bfp16(A.data(), B.data(), C.data(), M, K, N);
  for (int64_t i = 0; i < M * N; ++i) EXPECT_EQ(yb.data<float>()[i], bf16r(C[size_t(i)])) << i;

  // int8 weights with per-channel scales: close to f32 (8-bit operands and an 8-bit output).
  Tensor wq = Tensor::empty({N, K}, DType::I8);
  Tensor sc = Tensor::empty({N, 1});
  quantize_int8(wf.data<float>(), N, K, K, wq.data<int8_t>(), sc.data<float>());
  wq.set_scales(sc, K);
  const Tensor yq = run(sim, n, {x, wq});
  double err = 0, mag = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(x.data<float>()[i * K + k]) * wf.data<float>()[j * K + k];
      err = std::max(err, std::abs(yq.data<float>()[i * N + j] - ref));
      mag = std::max(mag, std::abs(ref));
    }
  EXPECT_LT(err, 0.03 * mag);
  // Per-group int8 scales have no design: refused with the reason.
  wq.set_scales(Tensor::zeros({N, 2}), 32);
  EXPECT_FALSE(sim.supports(n, std::vector<Tensor>{x, wq}));
  EXPECT_NE(sim.refusals().at("matmul").find("scale groups"), std::string::npos);
}

TEST(NpuSim, ElementwiseAndNormsAreCloseToF32) {
  const Tensor x = random_tensor({4, 64}, 8), y = random_tensor({4, 64}, 9);
  const Tensor g = random_tensor({64}, 10), be = random_tensor({64}, 11);
  NpuSimBackend sim;
  const Tensor add = run(sim, Node{OpKind::Add, {}, {0, 1}, 2, "add"}, {x, y});
  const Tensor gelu = run(sim, Node{OpKind::Gelu, {}, {0}, 1, "gelu"}, {x});
  const Tensor ln = run(sim, Node{OpKind::LayerNorm, {}, {0, 1, 2}, 3, "ln"}, {x, g, be});
  const Tensor sm = run(sim, Node{OpKind::Softmax, {}, {0}, 1, "sm"}, {x});
  const float* xp = x.data<float>();
  for (int64_t r = 0; r < 4; ++r) {
    double mean = 0, var = 0, mx = -1e30, sum = 0;
    for (int64_t j = 0; j < 64; ++j) mean += xp[r * 64 + j] / 64.0, mx = std::max(mx, double(xp[r * 64 + j]));
    for (int64_t j = 0; j < 64; ++j) var += std::pow(xp[r * 64 + j] - mean, 2) / 64.0, sum += std::exp(xp[r * 64 + j] - mx);
    for (int64_t j = 0; j < 64; ++j) {
      const int64_t i = r * 64 + j;
      const double v = xp[i];
      EXPECT_NEAR(add.data<float>()[i], v + y.data<float>()[i], 0.02 * (std::abs(v) + std::abs(y.data<float>()[i])) + 1e-6);
      EXPECT_NEAR(gelu.data<float>()[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 0.01 * std::abs(v) + 2e-3);
      const double lref = (v - mean) / std::sqrt(var + 1e-5) * g.data<float>()[j] + be.data<float>()[j];
      EXPECT_NEAR(ln.data<float>()[i], lref, 0.02 * std::abs(lref) + 0.02);
      const double sref = std::exp(v - mx) / sum;
      EXPECT_NEAR(sm.data<float>()[i], sref, 0.01 * sref + 1e-4);
    }
  }
}

TEST(NpuSim, RefusesWhatNoDesignCovers) {
  NpuSimBackend sim;
  // Attention with head_dim 8 (the encoder attention design wants multiples of 16).
  const Tensor q = random_tensor({8, 2, 8}, 12);
  EXPECT_FALSE(sim.supports(Node{OpKind::Attention, {}, {0, 1, 2}, 3, "attn"}, std::vector<Tensor>{q, q, q}));
  EXPECT_NE(sim.refusals().at("attention").find("head_dim 8"), std::string::npos);
  EXPECT_FALSE(sim.supports(Node{OpKind::Relu, {}, {0}, 1, "relu"}, std::vector<Tensor>{q}));
  // Broadcasting add ([T, D] + [D]) has no design; a norm over 8 values is not 16-aligned.
  const Tensor x = random_tensor({4, 24}, 13), b = random_tensor({24}, 14);
  EXPECT_FALSE(sim.supports(Node{OpKind::Add, {}, {0, 1}, 2, "add"}, std::vector<Tensor>{x, b}));
  const Tensor x8 = random_tensor({4, 8}, 15), g8 = random_tensor({8}, 16);
  EXPECT_FALSE(sim.supports(Node{OpKind::RMSNorm, {}, {0, 1}, 2, "rms"}, std::vector<Tensor>{x8, g8}));
  EXPECT_NE(sim.refusals().at("rms_norm").find("no valid design"), std::string::npos);
  // GGML blocks: no design.
  Tensor q8 = Tensor::zeros({32, 32}, DType::Q8_0);
  EXPECT_FALSE(sim.supports(Node{OpKind::MatMul, {}, {0, 1}, 2, "mm"}, std::vector<Tensor>{random_tensor({2, 32}, 17), q8}));
  EXPECT_THROW(sim.compute(Node{OpKind::Relu, {}, {0}, 1, "relu"}, std::vector<Tensor>{q}), std::invalid_argument);
  EXPECT_EQ(sim.dispatches(), 0u);
}

TEST(NpuSim, CostCountsDispatchesAndConfigures) {
  const Tensor x = random_tensor({16, 64}, 18);
  const Tensor w1 = random_tensor({32, 64}, 19), w2 = random_tensor({48, 64}, 20);
  const Node n{OpKind::MatMul, {}, {0, 1}, 2, "mm"};
  // The same design twice: two dispatches, no configure.
  NpuSimBackend same;
  run(same, n, {x, w1});
  run(same, n, {x, w1});
  CostReport a = same.cost();
  EXPECT_EQ(a.run.dispatches, 2);
  EXPECT_EQ(a.run.configures, 0);
  EXPECT_EQ(a.run.xclbin_switches, 0);
  EXPECT_EQ(a.designs.size(), 1u);
  EXPECT_EQ(a.label, "npu-sim (modelled)");
  EXPECT_GT(a.compute_s, 0);
  EXPECT_NEAR(a.run.total_s, a.compute_s + a.exposed_dma_s + a.run.dispatch_s + a.reconfig_s, 1e-12);
  // Two different designs: one configure (single xclbin) or one xclbin switch (per design).
  NpuSimBackend diff;
  run(diff, n, {x, w1});
  run(diff, n, {x, w2});
  CostReport b = diff.cost();
  EXPECT_EQ(b.run.dispatches, 2);
  EXPECT_EQ(b.run.configures, 1);
  EXPECT_EQ(b.run.xclbin_switches, 0);
  EXPECT_NEAR(b.reconfig_s, cost_param("configure_s"), 1e-12);
  NpuSimBackend per(XclbinPolicy::PerDesign);
  run(per, n, {x, w1});
  run(per, n, {x, w2});
  run(per, n, {x, w2});
  EXPECT_EQ(per.cost().run.xclbin_switches, 1);
  EXPECT_EQ(per.cost().run.configures, 0);
  EXPECT_EQ(per.cost().run.dispatches, 3);
}

TEST(NpuPlanner, PlansWithoutComputingAndReusesDesigns) {
  // Two identical "layers": matmul, gelu, matmul, attention (the encoder attention design).
  Graph g;
  ValueId x = g.input("x", Tensor::zeros({16, 64}));
  const Tensor w1 = Tensor::zeros({128, 64}), w2 = Tensor::zeros({64, 128});
  for (int l = 0; l < 2; ++l) {
    ValueId h = g.add(OpKind::MatMul, {x, g.input("w1", w1)});
    h = g.add(OpKind::Gelu, {h});
    x = g.add(OpKind::MatMul, {h, g.input("w2", w2)});
    ValueId r = g.add(OpKind::Reshape, {x}, [] { OpAttrs a; a.shape = {16, 4, 16}; return a; }());
    ValueId at = g.add(OpKind::Attention, {r, r, r});
    x = g.add(OpKind::Reshape, {at}, [] { OpAttrs a; a.shape = {16, -1}; return a; }());
  }
  const Plan p = plan_graph(g);
  EXPECT_EQ(p.npu_ops(), 8);
  EXPECT_EQ(p.host_ops(), 4);  // the reshapes
  EXPECT_EQ(p.ops[4].out_shape, (Shape{16, 4, 16}));
  EXPECT_EQ(p.cost.run.dispatches, 8);
  EXPECT_EQ(p.cost.designs.size(), 4u);
  EXPECT_EQ(p.cost.run.configures, 7);  // every NPU op differs from the previous NPU op
  EXPECT_GT(p.cost.run.ddr_bytes, 0);
  EXPECT_NE(p.text().find("modelled"), std::string::npos);
  EXPECT_EQ(p.ops[4].design.rfind("encoder_attention_", 0), 0u) << p.ops[4].reason;
  // Same-design repeats cost no reconfiguration: a chain of equal matmuls configures never.
  Graph g2;
  ValueId y = g2.input("x", Tensor::zeros({16, 64}));
  const Tensor sq = Tensor::zeros({64, 64});
  for (int l = 0; l < 4; ++l) y = g2.add(OpKind::MatMul, {y, g2.input("w", sq)});
  const Plan p2 = plan_graph(g2);
  EXPECT_EQ(p2.cost.run.dispatches, 4);
  EXPECT_EQ(p2.cost.run.configures, 0);
}

// Graphs run on the host backend, alone and behind the (still empty) NPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "host/host_backend.h"
#include "npu/npu_backend.h"

using namespace xdna;

namespace {

// y = silu(x · wᵀ + b) for x [2, 3], w [2, 3], b [2], computed by hand below.
struct SmallMlp {
  Graph g;
  ValueId x, w, b, y;
  SmallMlp() {
    x = g.input("x", Tensor::from_vector({2, 3}, {1, 2, 3, -1, 0, 1}));
    w = g.input("w", Tensor::from_vector({2, 3}, {0.5f, -1, 0.25f, 1, 1, 1}));
    b = g.input("b", Tensor::from_vector({2}, {0.5f, -2}));
    const ValueId mm = g.add(OpKind::MatMul, {x, w}, {}, "proj");
    const ValueId sum = g.add(OpKind::Add, {mm, b}, {}, "bias");
    y = g.add(OpKind::Silu, {sum}, {}, "act");
  }
  static std::vector<float> expected() {
    // x · wᵀ = [[0.5-2+0.75, 6], [-0.5+0.25, 0]] = [[-0.75, 6], [-0.25, 0]]; + b
    std::vector<float> v = {-0.25f, 4.0f, 0.25f, -2.0f};
    for (float& z : v) z = z / (1.0f + std::exp(-z));
    return v;
  }
};

TEST(HostGraph, MatmulAddSiluRuns) {
  SmallMlp m;
  HostBackend host;
  Executor ex({&host});
  const RunReport r = ex.run(m.g);
  const auto y = m.g.get(m.y).to_vector();
  const auto want = SmallMlp::expected();
  ASSERT_EQ(y.size(), want.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6);
  ASSERT_EQ(r.ops.size(), 3u);
  EXPECT_EQ(r.fallbacks(), 0);
  for (const auto& op : r.ops) EXPECT_EQ(op.backend, "host");
}

TEST(HostGraph, EmptyNpuBackendFallsBackForEveryOp) {
  SmallMlp m;
  NpuBackend npu;
  HostBackend host;
  Executor ex({&npu, &host});
  const RunReport r = ex.run(m.g);
  ASSERT_EQ(r.ops.size(), 3u);
  EXPECT_EQ(r.fallbacks(), 3);
  for (const auto& op : r.ops) {
    EXPECT_EQ(op.backend, "host");
    EXPECT_TRUE(op.fallback);
  }
  EXPECT_NE(r.summary().find("3 op(s) fell back"), std::string::npos);
  EXPECT_EQ(r.to_json()[0]["backend"], "host");
  const auto y = m.g.get(m.y).to_vector();
  const auto want = SmallMlp::expected();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6);
}

TEST(HostGraph, NpuBackendRunsNothingOnItsOwn) {
  SmallMlp m;
  NpuBackend npu;
  EXPECT_EQ(npu.name(), "npu");
  const Tensor in[] = {Tensor::zeros({2, 3}), Tensor::zeros({2, 3})};
  EXPECT_FALSE(npu.supports(m.g.nodes()[0], in));
  EXPECT_THROW(npu.compute(m.g.nodes()[0], in), std::logic_error);
  Executor only_npu({&npu});
  EXPECT_THROW(only_npu.run(m.g), std::runtime_error);
}

// Views (transpose, reshape) flow into ops that need packed data.
TEST(HostGraph, ViewsFeedLaterOps) {
  Graph g;
  const ValueId x = g.input("x", Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6}));
  OpAttrs t;
  t.dim0 = 0;
  t.dim1 = 1;
  const ValueId xt = g.add(OpKind::Transpose, {x}, t);  // [3, 2], strided
  const ValueId w = g.input("w", Tensor::from_vector({1, 2}, {1, 10}));
  const ValueId mm = g.add(OpKind::MatMul, {xt, w});  // rows (1,4),(2,5),(3,6) · (1,10)
  OpAttrs r;
  r.shape = {-1};
  const ValueId flat = g.add(OpKind::Reshape, {mm}, r);
  OpAttrs s;
  s.scale = 0.5f;
  const ValueId y = g.add(OpKind::Scale, {flat}, s);
  HostBackend host;
  Executor({&host}).run(g);
  EXPECT_EQ(g.get(y).to_vector(), (std::vector<float>{20.5f, 26, 31.5f}));
}

}  // namespace

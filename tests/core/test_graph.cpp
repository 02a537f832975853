// Graph building and the executor's placement, with small fake backends (this test links only
// xdna_core; tests/host/test_ops_graph.cpp runs graphs on the real host backend).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/graph.h"

using namespace xdna;

namespace {

// Naive f32 versions of the three ops the test graph uses.
Tensor naive(const Node& n, std::span<const Tensor> in) {
  const auto a = in[0].to_vector();
  switch (n.op) {
    case OpKind::MatMul: {  // [M, K] · [N, K]ᵀ
      const int64_t M = in[0].dim(0), K = in[0].dim(1), N = in[1].dim(0);
      const auto w = in[1].to_vector();
      std::vector<float> y(M * N, 0.0f);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t o = 0; o < N; ++o)
          for (int64_t k = 0; k < K; ++k) y[m * N + o] += a[m * K + k] * w[o * K + k];
      return Tensor::from_vector({M, N}, y);
    }
    case OpKind::Add: {
      const auto b = in[1].to_vector();
      std::vector<float> y(a.size());
      for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i % b.size()];
      return Tensor::from_vector(in[0].shape(), y);
    }
    case OpKind::Silu: {
      std::vector<float> y(a.size());
      for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] / (1.0f + std::exp(-a[i]));
      return Tensor::from_vector(in[0].shape(), y);
    }
    default:
      throw std::logic_error("fake backend: unexpected op");
  }
}

// Runs the ops in `ops` and counts what it ran.
class FakeBackend : public Backend {
 public:
  FakeBackend(std::string name, std::set<OpKind> ops) : name_(std::move(name)), ops_(std::move(ops)) {}
  std::string_view name() const override { return name_; }
  bool supports(const Node& n, std::span<const Tensor>) const override { return ops_.count(n.op) > 0; }
  Tensor compute(const Node& n, std::span<const Tensor> in) override {
    ++calls;
    return naive(n, in);
  }
  int calls = 0;

 private:
  std::string name_;
  std::set<OpKind> ops_;
};

const std::set<OpKind> kAll = {OpKind::MatMul, OpKind::Add, OpKind::Silu};

struct Mlp {
  Graph g;
  ValueId x, y;
  Mlp(bool bind_x = true) {
    x = g.input("x", bind_x ? Tensor::from_vector({1, 2}, {1, -2}) : Tensor());
    const ValueId w = g.input("w", Tensor::from_vector({3, 2}, {1, 0, 0, 1, 1, 1}));
    const ValueId b = g.input("b", Tensor::from_vector({3}, {0.5f, 0, 1}));
    const ValueId mm = g.add(OpKind::MatMul, {x, w}, {}, "proj");
    const ValueId sum = g.add(OpKind::Add, {mm, b});
    y = g.add(OpKind::Silu, {sum}, {}, "act");
  }
};

float silu(float v) { return v / (1.0f + std::exp(-v)); }

TEST(Graph, MatmulAddSiluRunsInOrder) {
  Mlp m;
  FakeBackend cpu("cpu", kAll);
  const RunReport r = Executor({&cpu}).run(m.g);
  // x · wᵀ = [1, -2, -1]; + b = [1.5, -2, 0]
  const auto y = m.g.get(m.y).to_vector();
  ASSERT_EQ(y.size(), 3u);
  EXPECT_FLOAT_EQ(y[0], silu(1.5f));
  EXPECT_FLOAT_EQ(y[1], silu(-2.0f));
  EXPECT_FLOAT_EQ(y[2], 0.0f);
  ASSERT_EQ(r.ops.size(), 3u);
  EXPECT_EQ(r.ops[0].node, "proj");
  EXPECT_EQ(r.ops[1].node, "add.1");  // unnamed nodes are named after op and index
  EXPECT_EQ(r.ops[2].op, OpKind::Silu);
  EXPECT_EQ(r.fallbacks(), 0);
  EXPECT_EQ(cpu.calls, 3);
  // Re-binding the input and re-running recomputes everything.
  m.g.set(m.x, Tensor::from_vector({1, 2}, {0, 0}));
  Executor({&cpu}).run(m.g);
  EXPECT_FLOAT_EQ(m.g.get(m.y).to_vector()[0], silu(0.5f));
}

TEST(Graph, PlacementReportShowsBackendAndFallback) {
  Mlp m;
  FakeBackend accel("accel", {OpKind::Add});
  FakeBackend cpu("cpu", kAll);
  const RunReport r = Executor({&accel, &cpu}).run(m.g);
  ASSERT_EQ(r.ops.size(), 3u);
  EXPECT_EQ(r.ops[0].backend, "cpu");
  EXPECT_TRUE(r.ops[0].fallback);
  EXPECT_EQ(r.ops[1].backend, "accel");
  EXPECT_FALSE(r.ops[1].fallback);
  EXPECT_EQ(r.ops[2].backend, "cpu");
  EXPECT_TRUE(r.ops[2].fallback);
  EXPECT_EQ(r.fallbacks(), 2);
  EXPECT_EQ(accel.calls, 1);
  EXPECT_EQ(cpu.calls, 2);
  const std::string s = r.summary();
  EXPECT_NE(s.find("accel"), std::string::npos);
  EXPECT_NE(s.find("2 op(s) fell back"), std::string::npos);
  const auto j = r.to_json();
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[1]["backend"], "accel");
  EXPECT_EQ(j[0]["fallback"], true);
  EXPECT_EQ(j[2]["op"], "silu");
  // The values do not depend on placement.
  EXPECT_FLOAT_EQ(m.g.get(m.y).to_vector()[0], silu(1.5f));
}

TEST(Graph, UndefinedInputsThrow) {
  Graph g;
  const ValueId x = g.input("x");
  EXPECT_THROW(g.add(OpKind::Silu, {x + 5}), std::out_of_range);
  EXPECT_THROW(g.add(OpKind::Silu, {-1}), std::out_of_range);
  const ValueId y = g.add(OpKind::Silu, {x});
  EXPECT_THROW(g.set(y, Tensor::zeros({1})), std::invalid_argument);  // outputs are not inputs

  Mlp unbound(false);
  FakeBackend cpu("cpu", kAll);
  try {
    Executor({&cpu}).run(unbound.g);
    ADD_FAILURE() << "run with an unbound input did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cpu.calls, 0);
}

TEST(Graph, NoCapableBackendThrows) {
  Mlp m;
  FakeBackend accel("accel", {OpKind::Add});
  EXPECT_THROW(Executor({&accel}).run(m.g), std::runtime_error);
  EXPECT_THROW(Executor({}), std::invalid_argument);
}

}  // namespace

TEST(Graph, MarkedOutputsFreeIntermediatesAfterTheirLastUse) {
  Mlp m;
  const ValueId sum = m.g.nodes()[1].output, proj = m.g.nodes()[0].output;
  FakeBackend cpu("cpu", kAll);
  Executor({&cpu}).run(m.g);  // nothing marked: every value is kept
  EXPECT_TRUE(m.g.get(proj).defined());
  EXPECT_TRUE(m.g.get(sum).defined());
  m.g.mark_output(m.y);
  Executor({&cpu}).run(m.g);
  EXPECT_FALSE(m.g.get(proj).defined());
  EXPECT_FALSE(m.g.get(sum).defined());
  EXPECT_TRUE(m.g.get(m.x).defined());  // inputs and constants stay bound for the next run
  EXPECT_FLOAT_EQ(m.g.get(m.y).to_vector()[0], silu(1.5f));
  // A marked intermediate is kept even though a later node consumed it.
  m.g.mark_output(sum);
  Executor({&cpu}).run(m.g);
  EXPECT_FALSE(m.g.get(proj).defined());
  EXPECT_FLOAT_EQ(m.g.get(sum).to_vector()[0], 1.5f);
  EXPECT_THROW(m.g.mark_output(99), std::out_of_range);
}

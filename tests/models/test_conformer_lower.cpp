// ConformerModel::lower_encoder: the chain of graphs encode() runs, built without running (what
// `npu plan` places). Checked on the tiny archives of tests/fixtures/conformer/archives: per-layer
// op counts, the graph boundaries, and that encode() runs exactly these nodes in this order.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/conformer.h"

using namespace xdna;

namespace {

const std::string kArchives = std::string(XDNA_FIXTURE_DIR) + "/conformer/archives/";

std::map<OpKind, int> op_counts(const Graph& g) {
  std::map<OpKind, int> n;
  for (const Node& node : g.nodes()) ++n[node.op];
  return n;
}

bool has_input(Graph& g, const std::string& name, const Shape& shape) {
  for (const Value& v : g.values())
    if (v.producer < 0 && v.name == name) return v.tensor.defined() && v.tensor.shape() == shape;
  return false;
}

void check_chain(const ConformerModel& m, int64_t frames) {
  const ConformerConfig& c = m.config();
  ConformerEncoderGraphs eg = m.lower_encoder(frames);
  const int64_t T = c.encoded_frames(frames), L = c.n_layers, H = c.n_heads;
  ASSERT_EQ(eg.frames, frames);
  ASSERT_EQ(eg.encoded_frames, T);
  ASSERT_EQ(int64_t(eg.graphs.size()), L + 1);
  ASSERT_EQ(int64_t(eg.host_steps.size()), L);
  const bool rel = c.self_attention == "rel_pos";
  // Graph 0: subsampling + the first half of layer 0. Conv2d: dw_striding has a conv, then a
  // depthwise + pointwise pair per further halving; striding one conv per halving.
  const int64_t halvings = int64_t(std::log2(double(c.subsampling_factor)));
  const int64_t convs = c.subsampling == "dw_striding" ? 1 + 2 * (halvings - 1) : halvings;
  EXPECT_EQ(op_counts(eg.graphs[0])[OpKind::Conv2d], convs);
  // First half of a layer: ff1 (2) + q, k, v, out (4) + pointwise_conv1 (1) [+ 2 per head for
  // linear_pos and matrix_bd]; second half: pointwise_conv2 (1) + ff2 (2).
  const int first_mm = 7 + (rel ? 2 * int(H) : 0), second_mm = 3;
  for (int64_t i = 0; i <= L; ++i) {
    SCOPED_TRACE("graph " + std::to_string(i));
    std::map<OpKind, int> n = op_counts(eg.graphs[size_t(i)]);
    const bool first = i < L, second = i > 0;
    EXPECT_EQ(n[OpKind::MatMul], (first ? first_mm : 0) + (second ? second_mm : 0) + (i == 0 ? 1 : 0));
    EXPECT_EQ(n[OpKind::Attention], first ? (rel ? H : 1) : 0);
    EXPECT_EQ(n[OpKind::Rope], first && !rel ? 1 : 0);
    EXPECT_EQ(n[OpKind::LayerNorm], (first ? 3 : 0) + (second ? 2 : 0));
    EXPECT_EQ(n[OpKind::Silu], (first ? 1 : 0) + (second ? 1 : 0));
    if (i > 0) {
      EXPECT_EQ(n[OpKind::Conv2d], 0);
    }
    EXPECT_EQ(eg.graphs[size_t(i)].outputs().size(), first ? 2u : 1u);
    if (second) {
      const std::string P = "layers." + std::to_string(i - 1) + ".conv.";
      EXPECT_TRUE(has_input(eg.graphs[size_t(i)], P + "residual_in", {T, c.d_model}));
      EXPECT_TRUE(has_input(eg.graphs[size_t(i)], P + "depthwise_out", {T, c.d_model}));
      EXPECT_EQ(eg.host_steps[size_t(i - 1)], P + "glu_depthwise_silu");
    }
  }

  // encode() runs exactly these nodes, in this order, with the host-direct steps between graphs.
  std::vector<std::string> want;
  for (size_t i = 0; i < eg.graphs.size(); ++i) {
    for (const Node& node : eg.graphs[i].nodes()) want.push_back(node.name);
    if (i < eg.host_steps.size()) want.push_back(eg.host_steps[i]);
  }
  Tensor features = Tensor::zeros({c.n_mels, frames});
  for (int64_t k = 0; k < features.numel(); ++k) features.data<float>()[k] = std::sin(0.1f * float(k));
  RunReport report;
  const Tensor y = m.encode(features, {}, &report);
  EXPECT_EQ(y.shape(), (Shape{T, c.d_model}));
  std::vector<std::string> ran;
  for (const OpRecord& r : report.ops) ran.push_back(r.node);
  EXPECT_EQ(ran, want);
}

TEST(ConformerLower, ParakeetRelPosChain) {
  const auto m = load_conformer(kArchives + "parakeet_tdt_bpe.nemo");
  ASSERT_EQ(m->config().self_attention, "rel_pos");
  check_chain(*m, 237);
  check_chain(*m, 9);
}

TEST(ConformerLower, GigaamRotaryChain) {
  const auto m = load_conformer(kArchives + "gigaam_ctc.ckpt");
  ASSERT_EQ(m->config().self_attention, "rotary");
  check_chain(*m, 100);
}

TEST(ConformerLower, FrameCountScalesShapesAndBadCountsThrow) {
  const auto m = load_conformer(kArchives + "parakeet_tdt_bpe.nemo");
  const ConformerEncoderGraphs a = m->lower_encoder(1000), b = m->lower_encoder(2000);
  EXPECT_EQ(a.encoded_frames, 125);
  EXPECT_EQ(b.encoded_frames, 250);
  EXPECT_THROW(m->lower_encoder(0), std::invalid_argument);
  EXPECT_THROW(m->lower_encoder(-5), std::invalid_argument);
}

}  // namespace

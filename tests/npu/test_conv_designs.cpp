// Conv designs (design_families_conv.cpp) and the conv-model planner: the shapes EfficientNet-Lite0
// and the upscalers need validate, a band that does not fit is refused naming the resource, the
// invocations cover the output, and dispatches end at host ops.
#include <gtest/gtest.h>

#include <string>

#include "npu/cost_model.h"
#include "npu/design_families.h"
#include "npu/planner_conv.h"

using namespace xdna::npu;

namespace {

ConvShape shape(int64_t h, int64_t w, int64_t cin, int64_t cout, int64_t k, int64_t s, bool dw) {
  ConvShape c;
  c.height = h, c.width = w, c.c_in = cin, c.c_out = cout, c.kernel = k, c.stride = s, c.depthwise = dw;
  const int64_t pad = k / 2;
  c.out_height = (h + 2 * pad - k) / s + 1;
  c.out_width = (w + 2 * pad - k) / s + 1;
  return c;
}

}  // namespace

TEST(ConvDesigns, ModelShapesValidateAndCoverTheOutput) {
  const ConvShape shapes[] = {
      shape(224, 224, 3, 32, 3, 2, false),    // Lite0 stem (stride 2, c_in padded to 8)
      shape(112, 112, 96, 96, 3, 2, true),    // depthwise stride 2
      shape(28, 28, 240, 240, 5, 1, true),    // depthwise 5x5
      shape(7, 7, 320, 1280, 1, 1, false),    // pointwise head (weights need channel tiles)
      shape(128, 128, 64, 64, 3, 1, false),   // an SR body conv
      shape(128, 128, 64, 12, 3, 1, false),   // an SR tail (12 outputs padded to 16)
  };
  for (const ConvShape& s : shapes) {
    const ConvTile t = choose_conv_tile(s);
    EXPECT_LE(conv_tile_l1_bytes(s, t), kAie2p.l1_bytes);
    EXPECT_EQ(t.channels % 16, 0);
    const Design d = conv_design(s, t);  // validates
    EXPECT_EQ(d.family, "conv");
    // The invocations cover every output row, column and channel.
    const int64_t inv = conv_invocations(s, t);
    const int64_t bands = (s.out_height + 32 * t.rows - 1) / (32 * t.rows);
    const int64_t col_tiles = (s.out_width + t.cols - 1) / t.cols;
    const int64_t ch_tiles = (conv_padded_c_out(s) + t.channels - 1) / t.channels;
    EXPECT_EQ(inv, bands * col_tiles * ch_tiles);
    EXPECT_GE(bands * 32 * t.rows, s.out_height);
    EXPECT_GE(col_tiles * t.cols, s.out_width);
    EXPECT_GT(model_design(d).total_s, 0);
  }
}

TEST(ConvDesigns, BandThatDoesNotFitIsRefusedNamingL1) {
  const ConvShape s = shape(112, 112, 96, 96, 3, 1, false);
  const ConvTile too_big{1, 40, 96};  // 3 x 3 x 96 x 96 bf16 weights alone are 166 KB (the memtile fits)
  EXPECT_GT(conv_tile_l1_bytes(s, too_big), kAie2p.l1_bytes);
  try {
    conv_design(s, too_big);
    FAIL() << "an oversized band validated";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("compute tile"), std::string::npos) << m;
    EXPECT_NE(m.find("L1"), std::string::npos) << m;
  }
  // A shape no tile fits: a 1x1 dense conv with 4096 inputs needs 4096 x 16 x 2 B of weights alone.
  EXPECT_THROW(choose_conv_tile(shape(8, 8, 4096, 64, 1, 1, false)), std::invalid_argument);
  EXPECT_THROW(conv_design(s, ConvTile{1, 1, 8}), std::invalid_argument);  // channels not a multiple of 16
  ConvShape bad = s;
  bad.c_out = 48;
  bad.depthwise = true;
  EXPECT_THROW(choose_conv_tile(bad), std::invalid_argument);  // depthwise needs c_in == c_out
}

TEST(ConvPlanner, DispatchesEndAtHostOpsAndConfiguresAtDesignChanges) {
  ConvPlanInput in;
  in.name = "tiny";
  in.family = "test";
  in.height = in.width = 32;
  ConvModelOp c1{"c1", "conv", shape(32, 32, 3, 16, 3, 1, false), "", "", "16x32x32"};
  ConvModelOp c2{"c2", "conv", shape(32, 32, 16, 16, 3, 1, false), "", "", "16x32x32"};
  ConvModelOp add{"add", "add", {}, "", "no second input stream", "16x32x32"};
  ConvModelOp c3{"c3", "conv", shape(32, 32, 16, 16, 3, 1, false), "", "", "16x32x32"};
  ConvModelOp dil{"dil", "conv", shape(32, 32, 16, 16, 3, 1, false), "a dilated conv", "", "16x32x32"};
  in.ops = {c1, c2, add, c3, dil};
  const ConvPlan p = plan_conv_model(in);
  EXPECT_EQ(p.npu_ops(), 3);
  EXPECT_EQ(p.host_ops(), 2);
  EXPECT_EQ(p.cost.run.dispatches, 2);  // c1 c2 | add | c3
  EXPECT_EQ(p.ops[4].reason, "a dilated conv");
  EXPECT_GE(p.cost.run.configures, 1) << p.text();  // c1 (c_in 8) and c2 (c_in 16) are different designs
  EXPECT_NEAR(p.cost.run.total_s,
              p.cost.compute_s + p.cost.exposed_dma_s + p.cost.run.dispatch_s + p.cost.reconfig_s, 1e-9);
  EXPECT_NE(p.text().find("npu-sim (modelled)"), std::string::npos);
  ConvModelOp nameless{"x", "concat", {}, "", "", ""};
  in.ops.push_back(nameless);
  EXPECT_THROW(plan_conv_model(in), std::invalid_argument);  // a host op must say why
}

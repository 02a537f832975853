// The SR precision gate and the upscalers on npu-sim's conv numerics: the tiny EDSR / ESPCN
// fixtures (always present) and, when `npu model pull esrgan-slim` has been run, the real
// esrgan-slim x2 on its shipped fixture image.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "pipeline/conv_npu_sim.h"
#include "pipeline/upscale.h"
#include "pipeline/upscale_precision.h"

#include "upscale_test_util.h"

namespace fs = std::filesystem;
using namespace xdna;

namespace {

const std::string kFixtures = XDNA_FIXTURE_DIR;

// Little noise: the bf16 vs f32 comparison runs on mostly smooth content.
Image smooth_image(int w, int h, unsigned seed) { return uptest::gradient_image(w, h, seed, 12); }

}  // namespace

TEST(UpscalePrecision, TinyFixturesRunOnNpuSimCloseToF32) {
  for (const char* f : {"edsr_x2.pt", "espcn_x2.pt"}) {
    SCOPED_TRACE(f);
    Upscaler up;
    up.net = load_upscaler(kFixtures + "/sr/" + f);
    const Image img = smooth_image(19, 13, 5);
    ConvSimRun sim;
    UpscaleOptions o;
    o.precision = "bf16";
    o.sim_run = &sim;
    const Tensor bf = upscale_raw(up, img, o);
    const Tensor f32 = upscale_raw(up, img);
    ASSERT_EQ(bf.shape(), f32.shape());
    double max_err = 0;
    for (int64_t i = 0; i < bf.numel(); ++i)
      max_err = std::max(max_err, double(std::fabs(bf.data<float>()[i] - f32.data<float>()[i])));
    EXPECT_LT(max_err, 2.0) << "bf16 vs f32 on [0, 255] pixels";
    EXPECT_GT(max_err, 0.0) << "bf16 numerics should differ from f32 somewhere";
    int convs = 0;
    for (const UpLayer& u : up.net.layers) convs += u.kind == UpLayerKind::Conv;
    EXPECT_EQ(sim.stats.convs, convs);  // every conv of these models is placed
    EXPECT_EQ(sim.host_ops.count("pixel_shuffle"), 1u);  // the shuffle stays on the host, with a reason
  }
}

TEST(UpscalePrecision, GateOnTinyEdsrReportsDropsAndChoosesByThreshold) {
  Upscaler up;
  up.net = load_upscaler(kFixtures + "/sr/edsr_x2.pt");
  const Image hr = smooth_image(30, 22, 9);
  const PrecisionGate g = gate_upscale_precision(up, hr);
  ASSERT_EQ(g.probes.size(), 2u);
  EXPECT_EQ(g.probes[0].precision, "f32");
  EXPECT_EQ(g.probes[0].drop_db, 0.0);
  EXPECT_TRUE(std::isinf(g.probes[0].psnr_vs_f32_db));
  EXPECT_EQ(g.probes[1].precision, "bf16");
  EXPECT_NEAR(g.probes[1].drop_db, g.probes[0].psnr_db - g.probes[1].psnr_db, 1e-12);
  EXPECT_EQ(g.width, 30);
  EXPECT_EQ(g.height, 22);
  EXPECT_EQ(g.chosen, g.probes[1].drop_db <= kMaxPsnrDropDb ? "bf16" : "f32");
  std::printf("tiny EDSR x2: f32 %.3f dB, bf16 %.3f dB (drop %+.4f dB) -> %s\n", g.probes[0].psnr_db,
              g.probes[1].psnr_db, g.probes[1].drop_db, g.chosen.c_str());
  // A limit below the measured drop refuses bf16; a limit above it accepts it.
  const double d = g.probes[1].drop_db;
  EXPECT_EQ(gate_upscale_precision(up, hr, d - 1e-3).chosen, "f32");
  EXPECT_EQ(gate_upscale_precision(up, hr, d + 1e-3).chosen, "bf16");
  EXPECT_THROW(downscale_box(smooth_image(1, 1, 1), 2), std::invalid_argument);
}

TEST(UpscalePrecision, EsrganSlimGateOnFixture) {
  const std::string dir = uptest::esrgan_slim_dir();
  if (!fs::is_regular_file(dir + "/x2/model.json"))
    GTEST_SKIP() << "esrgan-slim is not in the store (`npu model pull esrgan-slim`): real-model gate not run";
  Upscaler up;
  up.net = load_upscaler(dir + "/x2/model.json");
  const Image fixture = load_image(dir + "/fixture.png");
  const PrecisionGate g = gate_upscale_precision(up, fixture);
  std::printf("esrgan-slim x2 on fixture.png:\n%s", g.text().c_str());
  ASSERT_EQ(g.probes.size(), 2u);
  EXPECT_GT(g.probes[0].psnr_db, 20.0);  // the model does upscale the downscaled fixture
  EXPECT_GT(g.probes[1].psnr_vs_f32_db, 35.0);  // bf16 stays close to f32
  EXPECT_EQ(g.chosen, g.probes[1].drop_db <= kMaxPsnrDropDb ? "bf16" : "f32");
}

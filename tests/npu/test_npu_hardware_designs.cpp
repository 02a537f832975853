// Designs on the real NPU. Each test skips with the reason when the machine has no /dev/accel
// node or the artifacts directory ($XDNA_NPU_ARTIFACTS, else artifacts::default_artifacts_dir())
// lacks the compiled design; docs/npu-runtime.md "First run on real hardware" says how to get
// both. Nothing here has run on hardware yet.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

#include "npu/aie_numerics.h"
#include "npu/artifacts/manifest.h"
#include "npu/design_families.h"
#include "npu/device_lock.h"
#include "npu/runtime/device_runtime.h"
#include "npu/sim_exec.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

std::string artifacts_dir() {
  const char* e = std::getenv("XDNA_NPU_ARTIFACTS");
  return e && *e ? e : artifacts::default_artifacts_dir();
}

// The device and the runtime for `design`, or a skip reason.
struct Hardware {
  std::optional<DeviceLock> lock;
  std::unique_ptr<DeviceRuntime> rt;
  std::string skip;
};

Hardware open_for(const Design& d) {
  Hardware h;
  const std::optional<std::string> node = find_accel_node();
  if (!node) {
    h.skip = "no /dev/accel: no /dev/accel/accel* node (no NPU, or the amdxdna driver is not loaded)";
    return h;
  }
  const std::string dir = artifacts_dir();
  artifacts::Manifest m;
  try {
    m = artifacts::load_manifest(dir);
  } catch (const std::exception& e) {
    h.skip = "no compiled artifact for " + d.name + " in " + dir + " (" + e.what() + ")";
    return h;
  }
  if (!m.find(d.name)) {
    h.skip = "no compiled artifact for " + d.name + " in " + dir;
    return h;
  }
  h.lock.emplace(DeviceLock::acquire(*node));
  h.rt = std::make_unique<DeviceRuntime>(driver::open_kernel_io(*node), std::move(m));
  return h;
}

int arg_index(const Design& d, const std::string& name) {
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == name) return int(i);
  throw std::runtime_error(d.name + " has no argument " + name);
}

}  // namespace

// bf16 GEMV against the host: |npu - host| < max(abs_tol, rel_tol * (|npu| + |host|)) with
// rel_tol 0.04, the tolerance AMD's IRON operator library uses for its bf16 GEMV (aie2p.md,
// "How the open toolchain is organised"); abs_tol 1e-2 is ours, for outputs near zero.
TEST(NpuHardware, GemvBf16MatchesHost) {
  const Design d = gemv_design(DType::BF16, 1024, 1024, 8);
  Hardware h = open_for(d);
  if (!h.rt) GTEST_SKIP() << h.skip;
  const int wi = arg_index(d, "weights"), xi = arg_index(d, "x"), yi = arg_index(d, "y");
  const int64_t K = d.args[size_t(xi)].bytes / 2, n_pad = d.args[size_t(yi)].bytes / 2;
  ASSERT_EQ(d.args[size_t(wi)].bytes, n_pad * K * 2);
  const int64_t N = d.params.at("N");
  // DDR layouts (docs/npu-designs.md): W row-major N_pad x K bf16 (padded rows zero), x bf16, y bf16.
  std::vector<std::vector<uint8_t>> bufs(d.args.size());
  for (size_t i = 0; i < d.args.size(); ++i) bufs[i].assign(size_t(d.args[i].bytes), 0);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> W(static_cast<size_t>(N * K)), x(static_cast<size_t>(K));
  auto put = [](std::vector<uint8_t>& b, int64_t at, float v) {
    const aie::bf16 q = aie::to_bf16(v, aie::Rounding::NearestEven);
    std::memcpy(b.data() + 2 * at, &q.bits, 2);
    return aie::to_float(q);
  };
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 0; k < K; ++k) W[size_t(r * K + k)] = put(bufs[size_t(wi)], r * K + k, u(rng));
  for (int64_t k = 0; k < K; ++k) x[size_t(k)] = put(bufs[size_t(xi)], k, u(rng));
  std::vector<std::span<uint8_t>> spans(bufs.begin(), bufs.end());
  h.rt->run(d, spans);
  int bad = 0;
  for (int64_t r = 0; r < N; ++r) {
    double want = 0;
    for (int64_t k = 0; k < K; ++k) want += double(W[size_t(r * K + k)]) * x[size_t(k)];
    aie::bf16 q;
    std::memcpy(&q.bits, bufs[size_t(yi)].data() + 2 * r, 2);
    const double got = aie::to_float(q);
    if (!(std::fabs(got - want) < std::max(1e-2, 0.04 * (std::fabs(got) + std::fabs(want)))) && bad++ < 5)
      ADD_FAILURE() << "row " << r << ": npu " << got << ", host " << want;
  }
  EXPECT_EQ(bad, 0);
}

// One fused decode layer against npu-sim bit for bit. The same host arguments (random bf16
// weights in the bake layout, x, the RoPE row of position 7, a KV cache of 7 positions) go to the
// device and to npu-sim's functional model of the design (sim_exec.h); the drained result and
// K/V row must be equal byte for byte. The kernels' scalar arguments are npu-sim's defaults
// (RMSNorm eps 1e-6, half-split RoPE, scale 1/sqrt(head_dim)): the compiled kernels must use
// the same. Never run: no machine here has the NPU.
TEST(NpuHardware, FusedDecodeLayerMatchesNpuSim) {
  const DecodeLayerShape s{1024, 16, 8, 128, 3072, 8, true, false};
  const Design d = decode_layer_design(DType::BF16, s, 8);
  Hardware h = open_for(d);
  if (!h.rt) GTEST_SKIP() << h.skip;
  std::mt19937 rng(13);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const auto rnd = [&](int64_t count, float scale, float offset = 0.0f) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = offset + scale * n(rng);
    return v;
  };
  const int64_t H = s.hidden, Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim, I = s.intermediate;
  SimLayerWeights w;
  w.attn_norm = rnd(H, 0.1f, 1.0f), w.ffn_norm = rnd(H, 0.1f, 1.0f);
  w.q_norm = rnd(s.head_dim, 0.1f, 1.0f), w.k_norm = rnd(s.head_dim, 0.1f, 1.0f);
  w.q = rnd(Q * H, 0.03f), w.k = rnd(KV * H, 0.03f), w.v = rnd(KV * H, 0.03f), w.o = rnd(H * Q, 0.03f);
  w.gate = rnd(I * H, 0.03f), w.up = rnd(I * H, 0.03f), w.down = rnd(H * I, 0.02f);
  SimKvCache kv(s.kv_heads, s.head_dim, 16);
  for (int64_t t = 0; t + 1 < s.context; ++t) kv.append(to_bf16(rnd(2 * KV, 1.0f)));
  std::vector<float> freq;
  for (int64_t i = 0; i < s.head_dim / 2; ++i) freq.push_back(1.0f / std::pow(1e6f, float(2 * i) / float(s.head_dim)));
  HostArgs device = pack_decode_layer(d, w, to_bf16(rnd(H, 1.0f)), rope_row(freq, s.context - 1), kv);
  HostArgs sim = device;
  run_design(d, sim);
  std::vector<std::span<uint8_t>> spans(device.begin(), device.end());
  h.rt->run(d, spans);
  for (const char* out : {"result", "kv_row"}) {  // kv_row: the cache from the new row on, drained into
    const int i = arg_index(d, out);
    int64_t diff = 0, first = -1;
    for (size_t b = 0; b < sim[size_t(i)].size(); ++b)
      if (sim[size_t(i)][b] != device[size_t(i)][b] && diff++ == 0) first = int64_t(b);
    EXPECT_EQ(diff, 0) << out << ": " << diff << " bytes differ from npu-sim, the first at byte " << first;
  }
}

// NpuBackend over the dry-run driver: where ops are placed and why not, the host arguments it
// packs, and the calls it issues. The dry run computes nothing, so no test reads its outputs as
// results.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/numeric.h"
#include "npu/design_families.h"
#include "npu/npu_backend.h"
#include "npu/runtime/decode_dry_run.h"
#include "npu/runtime/device_runtime.h"

using namespace xdna;
using namespace xdna::npu;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("xdna_npu_backend_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// x + y over [1, 64] then rms_norm: two ops the design cache places on the NPU.
struct AddNorm {
  Graph g;
  ValueId x, y, sum, out;
  AddNorm() {
    std::vector<float> a(64), b(64), w(64);
    for (int i = 0; i < 64; ++i) a[i] = 0.5f * i, b[i] = 1.0f - i, w[i] = 1.0f + 0.01f * i;
    x = g.input("x", Tensor::from_vector({1, 64}, a));
    y = g.input("y", Tensor::from_vector({1, 64}, b));
    const ValueId wv = g.input("w", Tensor::from_vector({64}, w));
    sum = g.add(OpKind::Add, {x, y}, {}, "sum");
    OpAttrs n;
    n.eps = 1e-6f;
    out = g.add(OpKind::RMSNorm, {sum, wv}, n, "norm");
  }
};

// A runtime over DryRunIo whose artifacts hold `designs` (placeholder PDIs: no toolchain here).
std::unique_ptr<DeviceRuntime> dry_runtime(const std::vector<Design>& designs, const fs::path& dir,
                                           driver::DryRunIo** io_out) {
  artifacts::Manifest m;
  if (designs.empty()) {
    fs::create_directories(dir);
    m.dir = dir.string();
  } else {
    m = write_placeholder_artifacts(designs, dir.string(), "test");
  }
  auto io = std::make_unique<driver::DryRunIo>();
  *io_out = io.get();
  return std::make_unique<DeviceRuntime>(std::move(io), std::move(m));
}

// Stands in for the host backend (tests/npu do not link xdna_host): takes every op, and its
// result (a copy of the first input) only gives later ops a tensor of the right shape.
struct HostBackend final : Backend {
  std::string_view name() const override { return "host"; }
  bool supports(const Node&, std::span<const Tensor>) const override { return true; }
  Tensor compute(const Node&, std::span<const Tensor> in) override { return in[0].clone(); }
};

int count_calls(const driver::DryRunIo& io, const std::string& call) {
  int n = 0;
  for (const auto& r : io.records()) n += r.call == call;
  return n;
}

}  // namespace

TEST(NpuBackend, WithoutRuntimeEveryOpIsAHostFallbackSayingSo) {
  AddNorm m;
  NpuBackend npu;
  HostBackend host;
  const RunReport r = Executor({&npu, &host}).run(m.g);
  ASSERT_EQ(r.ops.size(), 2u);
  for (const OpRecord& op : r.ops) {
    EXPECT_EQ(op.backend, "host");
    EXPECT_TRUE(op.fallback);
  }
  EXPECT_EQ(npu.refusals().at("add"), "no NPU runtime");
  EXPECT_THROW(npu.compute(m.g.nodes()[0], std::vector<Tensor>{m.g.get(m.x), m.g.get(m.y)}), std::logic_error);
}

TEST(NpuBackend, MissingArtifactFallsBackNamingDesignAndDirectory) {
  TempDir dir("missing");
  driver::DryRunIo* io = nullptr;
  NpuBackend npu(dry_runtime({}, dir.path, &io));
  HostBackend host;
  AddNorm m;
  const RunReport r = Executor({&npu, &host}).run(m.g);
  for (const OpRecord& op : r.ops) {
    EXPECT_EQ(op.backend, "host");
    EXPECT_TRUE(op.fallback);
  }
  const std::string add = elementwise_design("add", 64).name;
  EXPECT_EQ(npu.refusals().at("add"), "no compiled artifact for design " + add + " in " + dir.path.string());
  EXPECT_NE(npu.refusals().at("rms_norm").find("no compiled artifact for design rmsnorm"), std::string::npos)
      << npu.refusals().at("rms_norm");
  EXPECT_EQ(count_calls(*io, "EXEC_CMD"), 0);  // nothing was submitted
  EXPECT_TRUE(npu.dispatches().empty());
}

// The op with a compiled design runs on the device (one EXEC_CMD), the other falls back.
TEST(NpuBackend, OpWithArtifactIsSubmittedOthersFallBack) {
  TempDir dir("add");
  const Design add = elementwise_design("add", 64);
  driver::DryRunIo* io = nullptr;
  NpuBackend npu(dry_runtime({add}, dir.path, &io));
  HostBackend host;
  AddNorm m;
  const RunReport r = Executor({&npu, &host}).run(m.g);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].backend, "npu");
  EXPECT_FALSE(r.ops[0].fallback);
  EXPECT_EQ(r.ops[1].backend, "host");
  EXPECT_TRUE(r.ops[1].fallback);
  EXPECT_EQ(npu.refusals().count("add"), 0u);
  EXPECT_EQ(npu.dispatches().at(add.name), 1);
  EXPECT_EQ(count_calls(*io, "EXEC_CMD"), 1);
  EXPECT_EQ(io->submitted().size(), 1u);
  EXPECT_EQ(m.g.get(m.sum).shape(), (Shape{1, 64}));  // shape only: a dry run computes nothing
}

// Ops the cache refuses keep npu-sim's reason; GEMM has a design but no packing yet.
TEST(NpuBackend, RefusalsKeepTheDesignCacheReasonAndUnpackedPaths) {
  TempDir dir("gemm");
  driver::DryRunIo* io = nullptr;
  const Design gemm = gemm_design(DType::BF16, 4, 64, 64);
  NpuBackend npu(dry_runtime({gemm}, dir.path, &io));
  Graph g;
  const ValueId x = g.input("x", Tensor::zeros({4, 64}));
  const ValueId w = g.input("w", Tensor::zeros({64, 64}));
  g.add(OpKind::MatMul, {x, w}, {}, "mm");
  g.add(OpKind::Relu, {x}, {}, "relu");
  const Tensor mm_in[] = {g.get(x), g.get(w)};
  EXPECT_NE(npu.refusal(g.nodes()[0], mm_in).find("does not yet lay out GEMM"), std::string::npos)
      << npu.refusal(g.nodes()[0], mm_in);
  const Tensor relu_in[] = {g.get(x)};
  EXPECT_EQ(npu.refusal(g.nodes()[1], relu_in), "no design family for relu");
}

// The host arguments: flat bf16, zero-padded to the design's sizes; GEMV weights as K_pad rows.
TEST(NpuBackend, PacksHostArgumentsAsTheDesignLaysThemOut) {
  DesignCache cache;
  Graph g;
  std::vector<float> xv(40), wv(3 * 40);
  for (int i = 0; i < 40; ++i) xv[i] = float(i) - 7.5f;
  for (int i = 0; i < 120; ++i) wv[i] = 0.25f * float(i);
  const ValueId x = g.input("x", Tensor::from_vector({1, 40}, xv));
  const ValueId w = g.input("w", Tensor::from_vector({3, 40}, wv));
  g.add(OpKind::MatMul, {x, w}, {}, "gemv");
  const Tensor in[] = {g.get(x), g.get(w)};
  const ValueInfo info[] = {value_info(in[0]), value_info(in[1])};
  const OpChoice c = cache.choose(g.nodes()[0], info);
  ASSERT_TRUE(c.on_npu) << c.reason;
  ASSERT_EQ(c.path, SimPath::GemvBf16);
  ASSERT_EQ(c.k_pad, 48);

  std::vector<std::vector<uint8_t>> args;
  ASSERT_EQ(pack_args(g.nodes()[0], in, c, args), "");
  ASSERT_EQ(args.size(), c.design->args.size());
  for (size_t i = 0; i < args.size(); ++i) EXPECT_EQ(int64_t(args[i].size()), c.design->args[i].bytes);
  auto bf16_at = [](const std::vector<uint8_t>& a, int64_t i) {
    uint16_t b;
    std::memcpy(&b, a.data() + i * 2, 2);
    return b;
  };
  const auto& weights = args[0];
  const auto& xs = args[1];
  ASSERT_EQ(c.design->args[0].name, "weights");
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t k = 0; k < 48; ++k)
      EXPECT_EQ(bf16_at(weights, j * 48 + k), k < 40 ? f32_to_bf16(wv[size_t(j * 40 + k)]) : 0) << j << "," << k;
  EXPECT_EQ(bf16_at(weights, 3 * 48), 0);  // padded rows are zero
  for (int64_t k = 0; k < 48; ++k) EXPECT_EQ(bf16_at(xs, k), k < 40 ? f32_to_bf16(xv[size_t(k)]) : 0);
}

// DeviceRuntime over the dry-run driver: the ioctl sequence of XRT's XDNA shim (DEV_HEAP first,
// one context per xclbin with its PDIs configured, BOs per design, one packet per run), the
// mlir-aie kernel register map in the command, caching, and errors that name the design.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "npu/artifacts/insts.h"
#include "dry_run_test_util.h"
#include "npu/design_families.h"
#include "npu/driver/amdxdna_uapi.h"
#include "npu/driver/ert.h"
#include "npu/runtime/decode_dry_run.h"
#include "npu/runtime/device_runtime.h"

using namespace xdna;
using namespace xdna::npu;
namespace uapi = xdna::npu::driver::uapi;
namespace fs = std::filesystem;

namespace {

using test::as;

struct Fixture {
  fs::path dir;
  Design d = gemv_design(DType::BF16, 256, 128, 2);
  driver::DryRunIo* io = nullptr;
  std::unique_ptr<DeviceRuntime> rt;
  std::vector<std::vector<uint8_t>> bufs;

  explicit Fixture(const std::string& name, DeviceRuntimeOptions o = {}) {
    dir = fs::temp_directory_path() / ("xdna_device_runtime_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    manifest_and_runtime(o);
  }
  void manifest_and_runtime(DeviceRuntimeOptions o) {
    artifacts::Manifest m = write_placeholder_artifacts({d}, dir.string(), "test", 2);
    auto p = std::make_unique<driver::DryRunIo>();
    io = p.get();
    rt = std::make_unique<DeviceRuntime>(std::move(p), std::move(m), o);
    for (const HostArg& a : d.args) {
      bufs.emplace_back(size_t(a.bytes));
      for (size_t i = 0; i < bufs.back().size(); ++i) bufs.back()[i] = uint8_t(i * 7 + bufs.size());
    }
  }
  ~Fixture() {
    rt.reset();
    fs::remove_all(dir);
  }
  void run() {
    std::vector<std::span<uint8_t>> spans(bufs.begin(), bufs.end());
    rt->run(d, spans);
  }
  std::vector<const driver::IoctlRecord*> calls(const std::string& call) const {
    std::vector<const driver::IoctlRecord*> out;
    for (const auto& r : io->records())
      if (r.call == call) out.push_back(&r);
    return out;
  }
  // handle -> xdna_addr from GET_BO_INFO replies.
  std::map<uint32_t, uint64_t> addresses() const {
    std::map<uint32_t, uint64_t> m;
    for (const auto* r : calls("GET_BO_INFO")) {
      const auto a = as<uapi::get_bo_info>(r->out);
      m[a.handle] = a.xdna_addr;
    }
    return m;
  }
};

}  // namespace

TEST(DeviceRuntime, OpensWithTheDevHeapFirst) {
  Fixture f("heap");
  ASSERT_GE(f.io->records().size(), 2u);
  const auto& first = f.io->records()[0];
  EXPECT_EQ(first.call, "CREATE_BO");
  const auto bo = as<uapi::create_bo>(first.in);
  EXPECT_EQ(bo.type, uapi::BO_DEV_HEAP);
  EXPECT_EQ(bo.size, 64ull << 20);
  EXPECT_EQ(f.io->records()[1].call, "GET_BO_INFO");
  EXPECT_TRUE(f.calls("CREATE_HWCTX").empty());  // contexts are made on first use
}

TEST(DeviceRuntime, FirstRunFollowsTheShimSequence) {
  Fixture f("sequence");
  f.run();
  // Context: num_tiles = partition columns x core rows (4 on npu2), then the PDI in a DEV BO
  // and CONFIG_CU naming it.
  const auto ctx = f.calls("CREATE_HWCTX");
  ASSERT_EQ(ctx.size(), 1u);
  EXPECT_EQ(as<uapi::create_hwctx>(ctx[0]->in).num_tiles, 2u * 4u);
  const auto cfg = f.calls("CONFIG_HWCTX");
  ASSERT_EQ(cfg.size(), 1u);
  EXPECT_EQ(as<uapi::config_hwctx>(cfg[0]->in).param_type, uapi::CONFIG_CU);
  ASSERT_GE(cfg[0]->payload.size(), 16u);
  const auto head = as<uapi::hwctx_param_config_cu>(cfg[0]->payload);
  EXPECT_EQ(head.num_cus, 1);
  uapi::cu_config cu{};
  std::memcpy(&cu, cfg[0]->payload.data() + 8, sizeof cu);
  const std::vector<uint8_t>& pdi = f.io->bo_bytes(cu.cu_bo);
  EXPECT_NE(std::string(pdi.begin(), pdi.end()).find("PLACEHOLDER PDI"), std::string::npos);
  // The PDI BO is a DEV BO created after the context.
  size_t ctx_at = 0, pdi_at = 0, cfg_at = 0;
  for (size_t i = 0; i < f.io->records().size(); ++i) {
    const auto& r = f.io->records()[i];
    if (r.call == "CREATE_HWCTX") ctx_at = i;
    if (r.call == "CREATE_BO" && as<uapi::create_bo>(r.out).handle == cu.cu_bo) {
      pdi_at = i;
      EXPECT_EQ(as<uapi::create_bo>(r.in).type, uapi::BO_DEV);
    }
    if (r.call == "CONFIG_HWCTX") cfg_at = i;
  }
  EXPECT_LT(ctx_at, pdi_at);
  EXPECT_LT(pdi_at, cfg_at);

  // One command: START_CU with the mlir-aie register map.
  ASSERT_EQ(f.io->submitted().size(), 1u);
  const std::vector<uint32_t>& w = f.io->submitted()[0].words;
  const ert::Header h = ert::decode_header(w[0]);
  EXPECT_EQ(h.opcode, ert::Opcode::StartCu);
  const size_t n = f.d.args.size();
  EXPECT_EQ(h.count, 1 + 5 + 2 * n);
  EXPECT_EQ(w[1], 1u);                  // cu mask: the first (only) CU
  EXPECT_EQ(w[2], kKernelOpTransaction);  // opcode 3
  EXPECT_EQ(w[3], 0u);
  const auto addr = f.addresses();
  const std::vector<uint32_t> ours = insts::encode(insts::lower_sequence(f.d));
  EXPECT_EQ(w[6], ours.size());  // ninstr: words
  const uint64_t instr = uint64_t(w[4]) | uint64_t(w[5]) << 32;
  // EXEC_CMD references the instruction BO and every argument BO, in kernel argument order.
  const auto exec = f.calls("EXEC_CMD");
  ASSERT_EQ(exec.size(), 1u);
  const auto e = as<uapi::exec_cmd>(exec[0]->in);
  EXPECT_EQ(e.cmd_count, 1u);
  EXPECT_EQ(e.arg_count, n + 1);
  EXPECT_EQ(e.cmd_handles, f.io->submitted()[0].bo_handle);
  std::vector<uint32_t> handles(e.arg_count);
  std::memcpy(handles.data(), exec[0]->payload.data(), handles.size() * 4);
  EXPECT_EQ(addr.at(handles[0]), instr);
  const std::vector<uint8_t>& ib = f.io->bo_bytes(handles[0]);
  ASSERT_GE(ib.size(), ours.size() * 4);
  EXPECT_EQ(std::memcmp(ib.data(), ours.data(), ours.size() * 4), 0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = uint64_t(w[7 + 2 * i]) | uint64_t(w[8 + 2 * i]) << 32;
    EXPECT_EQ(addr.at(handles[1 + i]), a) << "argument " << i;
    const std::vector<uint8_t>& bo = f.io->bo_bytes(handles[1 + i]);
    ASSERT_GE(bo.size(), f.bufs[i].size());
    EXPECT_EQ(std::memcmp(bo.data(), f.bufs[i].data(), f.bufs[i].size()), 0) << "argument " << i;
  }
  // Arguments synced to the device before EXEC_CMD and back after.
  int to = 0, from = 0;
  bool after_exec = false;
  for (const auto& r : f.io->records()) {
    if (r.call == "EXEC_CMD") after_exec = true;
    if (r.call != "SYNC_BO") continue;
    const auto s = as<uapi::sync_bo>(r.in);
    if (s.direction == uapi::SYNC_FROM_DEVICE) {
      EXPECT_TRUE(after_exec);
      ++from;
    } else if (after_exec) {
      ADD_FAILURE() << "sync to device after EXEC_CMD";
    } else {
      ++to;
    }
  }
  EXPECT_EQ(from, int(n));
  EXPECT_EQ(to, int(n) + 2);  // + the PDI and the instruction stream
}

TEST(DeviceRuntime, SecondRunReusesContextAndBuffers) {
  Fixture f("reuse");
  f.run();
  const size_t bos = f.calls("CREATE_BO").size();
  f.run();
  EXPECT_EQ(f.calls("CREATE_HWCTX").size(), 1u);
  EXPECT_EQ(f.calls("CREATE_BO").size(), bos);
  const auto exec = f.calls("EXEC_CMD");
  ASSERT_EQ(exec.size(), 2u);
  EXPECT_EQ(as<uapi::exec_cmd>(exec[0]->out).seq + 1, as<uapi::exec_cmd>(exec[1]->out).seq);
}

TEST(DeviceRuntime, StartNpuPacketCarriesTheInstructionBuffer) {
  DeviceRuntimeOptions o;
  o.packet = CommandPacket::StartNpu;
  Fixture f("startnpu", o);
  f.run();
  ASSERT_EQ(f.io->submitted().size(), 1u);
  const std::vector<uint32_t>& w = f.io->submitted()[0].words;
  EXPECT_EQ(ert::decode_header(w[0]).opcode, ert::Opcode::StartNpu);
  EXPECT_EQ((w[0] >> 23) & 0x1F, 20u);
  const nlohmann::json j = describe_command(w);
  EXPECT_EQ(j["instruction_buffer"], j["kernel_args"]["instr"]);
  EXPECT_EQ(j["instruction_buffer_size"].get<uint32_t>(), 4 * j["kernel_args"]["ninstr"].get<uint32_t>());
  EXPECT_EQ(j["kernel_args"]["bo"].size(), f.d.args.size());
}

TEST(DeviceRuntime, PrefersTheArtifactsInstructionStream) {
  Fixture f("artifact_insts");
  // Replace the artifact's stream (and its manifest hash) with a recognisable one.
  const std::vector<uint32_t> words = {0xA11CE, 1, 2, 3};
  {
    std::ofstream out(f.dir / f.d.name / "insts.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(words.data()), std::streamsize(words.size() * 4));
  }
  artifacts::Manifest m = f.rt->manifest();
  artifacts::save_manifest(m, f.dir.string());
  auto p = std::make_unique<driver::DryRunIo>();
  driver::DryRunIo* io = p.get();
  DeviceRuntime rt(std::move(p), artifacts::load_manifest(f.dir.string()));
  std::vector<std::span<uint8_t>> spans(f.bufs.begin(), f.bufs.end());
  rt.run(f.d, spans);
  const std::vector<uint32_t>& w = io->submitted().at(0).words;
  EXPECT_EQ(w[6], 4u);
  // A design with another runtime sequence under the same name gets our lowering instead.
  Design other = f.d;
  other.sequence.pop_back();
  rt.run(other, spans);
  EXPECT_EQ(io->submitted().at(1).words[6], insts::encode(insts::lower_sequence(other)).size());
}

TEST(DeviceRuntime, ErrorsNameTheDesign) {
  Fixture f("errors");
  Design unknown = f.d;
  unknown.name = "no_such_design";
  std::vector<std::span<uint8_t>> spans(f.bufs.begin(), f.bufs.end());
  try {
    f.rt->run(unknown, spans);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_design"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no compiled artifact"), std::string::npos) << e.what();
  }
  std::vector<std::span<uint8_t>> short_spans = spans;
  short_spans[0] = short_spans[0].subspan(1);
  try {
    f.rt->run(f.d, short_spans);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(f.d.name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(f.d.args[0].name), std::string::npos) << e.what();
  }
  f.io->fail_next("EXEC_CMD", EBUSY);
  try {
    f.run();
    FAIL();
  } catch (const driver::DriverError& e) {
    EXPECT_EQ(e.call(), "EXEC_CMD");
    EXPECT_EQ(e.error(), EBUSY);
    EXPECT_NE(std::string(e.what()).find(f.d.name), std::string::npos) << e.what();
  }
  f.io->fail_next("SYNCOBJ_WAIT", ETIME);
  try {
    f.run();
    FAIL();
  } catch (const driver::DriverError& e) {
    EXPECT_EQ(e.error(), ETIME);
    EXPECT_NE(std::string(e.what()).find(f.d.name), std::string::npos) << e.what();
  }
  f.run();  // the runtime is still usable
}

TEST(DeviceRuntime, RegisterMapLayout) {
  const uint64_t bos[] = {0x1122334455667788ull, 0x10};
  const std::vector<uint32_t> r = kernel_register_map(0xAABBCCDD00112233ull, 42, bos);
  const std::vector<uint32_t> want = {3, 0, 0x00112233, 0xAABBCCDD, 42, 0x55667788, 0x11223344, 0x10, 0};
  EXPECT_EQ(r, want);
  const std::vector<uint32_t> p = encode_start_cu(1, r);
  // Header: state NEW (1) in [3:0], count 1 + 9 = 10 in [22:12], opcode START_CU (0) in [27:23].
  EXPECT_EQ(p[0], 1u | (10u << 12));
  EXPECT_EQ(p[1], 1u);
  EXPECT_EQ(p.size(), 11u);
}

// DeviceRuntime::run_sequence over the dry-run driver: a sequence of designs goes as CMD_CHAIN
// packets (one EXEC_CMD per chain of <= 64 commands), buffers shared between invocations share
// one BO, repeated designs get their own command BOs, and errors name the sequence.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

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

// Two designs: y = W x (gemv 64 x 32) and elementwise SiLU over 64 values.
struct Fixture {
  fs::path dir;
  Design gemv = gemv_design(DType::BF16, 64, 32, 1);
  Design silu = elementwise_design("silu", 64, 1);
  driver::DryRunIo* io = nullptr;
  std::unique_ptr<DeviceRuntime> rt;

  explicit Fixture(const std::string& name, DeviceRuntimeOptions o = {}) {
    dir = fs::temp_directory_path() / ("xdna_rt_chain_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    artifacts::Manifest m = write_placeholder_artifacts({gemv, silu}, dir.string(), "chain", 1);
    auto p = std::make_unique<driver::DryRunIo>();
    io = p.get();
    rt = std::make_unique<DeviceRuntime>(std::move(p), std::move(m), o);
  }
  ~Fixture() {
    rt.reset();
    fs::remove_all(dir);
  }
  size_t count(const std::string& call) const {
    size_t n = 0;
    for (const auto& r : io->records()) n += r.call == call;
    return n;
  }
  std::map<uint32_t, uint64_t> addresses() const {
    std::map<uint32_t, uint64_t> m;
    for (const auto& r : io->records())
      if (r.call == "GET_BO_INFO") m[as<uapi::get_bo_info>(r.out).handle] = as<uapi::get_bo_info>(r.out).xdna_addr;
    return m;
  }
};

std::vector<std::vector<uint8_t>> buffers_for(const Design& d, uint8_t seed) {
  std::vector<std::vector<uint8_t>> b;
  for (const HostArg& a : d.args) {
    b.emplace_back(size_t(a.bytes));
    for (size_t i = 0; i < b.back().size(); ++i) b.back()[i] = uint8_t(i * 13 + seed);
  }
  return b;
}

std::vector<std::span<uint8_t>> spans(std::vector<std::vector<uint8_t>>& b) { return {b.begin(), b.end()}; }

// The BO address a START_CU packet passes for design argument k (register map bo<k>).
uint64_t arg_address(const std::vector<uint32_t>& w, size_t k) { return w[7 + 2 * k] | uint64_t(w[8 + 2 * k]) << 32; }

}  // namespace

TEST(DeviceRuntimeChain, OneExecForASequenceWithSharedBuffers) {
  Fixture f("shared");
  ASSERT_EQ(f.gemv.args.back().bytes, f.silu.args.front().bytes) << "gemv output feeds silu input";
  auto g = buffers_for(f.gemv, 1);
  auto s = buffers_for(f.silu, 2);
  std::vector<std::span<uint8_t>> gs = spans(g), ss = spans(s);
  ss.front() = gs.back();  // SiLU reads the GEMV's output buffer
  const std::vector<uint8_t> before = g.back();
  const std::vector<DesignCall> calls = {{&f.gemv, gs}, {&f.silu, ss}, {&f.gemv, gs}};
  f.rt->run_sequence(calls);

  EXPECT_EQ(f.count("EXEC_CMD"), 1u);
  ASSERT_EQ(f.io->submitted().size(), 1u);
  const ert::ChainStatus c = ert::decode_cmd_chain(f.io->submitted()[0].words);
  ASSERT_EQ(c.command_bo_handles.size(), 3u);
  EXPECT_EQ(std::set<uint32_t>(c.command_bo_handles.begin(), c.command_bo_handles.end()).size(), 3u)
      << "the repeated GEMV needs its own command BO";
  const auto p0 = f.io->bo_bytes(c.command_bo_handles[0]), p1 = f.io->bo_bytes(c.command_bo_handles[1]),
             p2 = f.io->bo_bytes(c.command_bo_handles[2]);
  auto words = [](const std::vector<uint8_t>& b) {
    std::vector<uint32_t> w(b.size() / 4);
    std::memcpy(w.data(), b.data(), w.size() * 4);
    return w;
  };
  const auto w0 = words(p0), w1 = words(p1), w2 = words(p2);
  // One BO for the shared buffer: the GEMV's output address is SiLU's input address, and the
  // repeated GEMV uses the same argument BOs as the first.
  EXPECT_EQ(arg_address(w0, f.gemv.args.size() - 1), arg_address(w1, 0));
  for (size_t k = 0; k < f.gemv.args.size(); ++k) EXPECT_EQ(arg_address(w0, k), arg_address(w2, k)) << k;
  EXPECT_NE(arg_address(w1, 1), arg_address(w0, 0));
  // The EXEC_CMD lists each referenced BO once: 2 instruction BOs + gemv args + silu's own output.
  const auto& exec = *std::find_if(f.io->records().begin(), f.io->records().end(),
                                   [](const driver::IoctlRecord& r) { return r.call == "EXEC_CMD"; });
  EXPECT_EQ(as<uapi::exec_cmd>(exec.in).arg_count, 2 + f.gemv.args.size() + f.silu.args.size() - 1);
  // Copy in once per distinct buffer and back once (the dry-run device leaves the bytes as they were).
  EXPECT_EQ(g.back(), before);
  EXPECT_EQ(ert::decode_header(f.io->submitted()[0].words[0]).state, ert::State::New);  // as submitted
}

TEST(DeviceRuntimeChain, SplitsAtSixtyFourCommands) {
  Fixture f("split");
  auto g = buffers_for(f.gemv, 3);
  std::vector<DesignCall> calls(65, DesignCall{&f.gemv, spans(g)});
  f.rt->run_sequence(calls);
  ASSERT_EQ(f.io->submitted().size(), 2u);
  EXPECT_EQ(ert::decode_cmd_chain(f.io->submitted()[0].words).command_bo_handles.size(), 64u);
  EXPECT_EQ(ert::decode_cmd_chain(f.io->submitted()[1].words).command_bo_handles.size(), 1u);
  // A second token reuses every BO: no CREATE_BO the second time.
  const size_t bos = f.count("CREATE_BO");
  f.rt->run_sequence(calls);
  EXPECT_EQ(f.count("CREATE_BO"), bos);
  EXPECT_EQ(f.count("EXEC_CMD"), 4u);
}

TEST(DeviceRuntimeChain, PerCommandOption) {
  DeviceRuntimeOptions o;
  o.submission = Submission::PerCommand;
  Fixture f("percmd", o);
  auto g = buffers_for(f.gemv, 4);
  auto s = buffers_for(f.silu, 5);
  const std::vector<DesignCall> calls = {{&f.gemv, spans(g)}, {&f.silu, spans(s)}};
  f.rt->run_sequence(calls);
  EXPECT_EQ(f.count("EXEC_CMD"), 2u);
  for (const auto& sub : f.io->submitted())
    EXPECT_EQ(ert::decode_header(sub.words[0]).opcode, ert::Opcode::StartCu);
}

TEST(DeviceRuntimeChain, Errors) {
  Fixture f("errors");
  auto g = buffers_for(f.gemv, 6);
  auto s = buffers_for(f.silu, 7);
  // Overlapping but different buffers cannot share a BO.
  std::vector<std::span<uint8_t>> ss = spans(s);
  std::vector<uint8_t> big(size_t(f.silu.args[0].bytes) + 4);
  ss[0] = std::span<uint8_t>(big).subspan(0, ss[0].size());
  std::vector<std::span<uint8_t>> ss2 = spans(s);
  ss2[0] = std::span<uint8_t>(big).subspan(4, ss2[0].size());
  std::vector<DesignCall> calls = {{&f.silu, ss}, {&f.silu, ss2}};
  try {
    f.rt->run_sequence(calls);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("invocation 1"), std::string::npos) << e.what();
  }
  // A wrong size names the design and the invocation.
  std::vector<std::span<uint8_t>> short_args = spans(g);
  short_args[0] = short_args[0].subspan(1);
  calls = {{&f.gemv, short_args}};
  try {
    f.rt->run_sequence(calls);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(f.gemv.name), std::string::npos) << e.what();
  }
  calls = {{nullptr, {}}};
  EXPECT_THROW(f.rt->run_sequence(calls), std::invalid_argument);
  // A timed-out chain keeps the driver's call and errno and names the sequence.
  calls = {{&f.gemv, spans(g)}, {&f.silu, spans(s)}};
  f.io->fail_next("SYNCOBJ_WAIT", ETIME);
  try {
    f.rt->run_sequence(calls);
    FAIL();
  } catch (const driver::DriverError& e) {
    EXPECT_EQ(e.error(), ETIME);
    EXPECT_NE(std::string(e.what()).find("sequence of 2 invocations"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(f.rt->run_sequence(calls));  // still usable
  EXPECT_NO_THROW(f.rt->run_sequence({}));
}

// The driver layer over DryRunIo: the exact argument structures a full lifecycle produces
// (DEV_HEAP, context, CONFIG_CU, BOs, EXEC_CMD, wait), decoded back into the uapi structs,
// and the error paths (DriverError messages), move semantics and destructor calls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "npu/driver/amdxdna_uapi.h"
#include "npu/driver/device.h"

namespace xdna::npu::driver {
namespace {

namespace u = uapi;

template <class T>
T decode(const std::vector<uint8_t>& bytes) {
  EXPECT_EQ(bytes.size(), sizeof(T));
  T v{};
  std::memcpy(&v, bytes.data(), std::min(bytes.size(), sizeof(T)));
  return v;
}

struct DryRun {
  Device dev{std::make_unique<DryRunIo>()};
  DryRunIo& io() { return static_cast<DryRunIo&>(dev.io()); }
  std::vector<std::string> calls() {
    std::vector<std::string> out;
    for (const auto& r : io().records()) out.push_back(r.call);
    return out;
  }
};

constexpr uint64_t kHeapBytes = 4 << 20;

// A START_NPU packet by hand (ert.h layout: state [3:0], count [22:12], opcode [27:23]).
uint32_t start_npu_header(uint32_t count) { return 1u | (count << 12) | (20u << 23); }

TEST(DriverDryRun, FullLifecycleProducesTheDriverStructures) {
  DryRun d;
  std::vector<uint32_t> cmd_words;
  {
    BufferObject heap(d.dev, BoType::DevHeap, kHeapBytes);
    HwContext ctx(d.dev, HwContextParams{.num_tiles = 8, .max_opc = 0, .gops = 7, .priority = 3});
    BufferObject pdi(d.dev, BoType::Dev, 5000);
    const CuConfig cus[] = {{pdi.handle(), 0}};
    ctx.configure_cus(cus);
    BufferObject instr(d.dev, BoType::Dev, 256);
    BufferObject input(d.dev, BoType::Shmem, 1000);
    BufferObject cmd(d.dev, BoType::Cmd, 64);

    // Handles from 1 in creation order; addresses: heap at the AIE2 device memory base, DEV BOs
    // carved from it page by page, other BOs from the dry run's base.
    EXPECT_EQ(heap.handle(), 1u);
    EXPECT_EQ(pdi.handle(), 2u);
    EXPECT_EQ(cmd.handle(), 5u);
    EXPECT_EQ(heap.device_address(), 0x4000000u);
    EXPECT_EQ(pdi.device_address(), 0x4000000u);
    EXPECT_EQ(instr.device_address(), 0x4000000u + 8192);  // 5000 bytes take two pages
    EXPECT_EQ(input.device_address(), 0x200000000u);
    EXPECT_EQ(cmd.device_address(), 0x200000000u + 4096);
    EXPECT_EQ(ctx.handle(), 1u);
    EXPECT_EQ(ctx.syncobj(), 1u);

    std::vector<uint32_t> words = {start_npu_header(5), 1, uint32_t(instr.device_address()), 0, 256, 0};
    std::memcpy(cmd.bytes().data(), words.data(), words.size() * 4);
    input.bytes()[999] = 0xAB;
    input.sync_to_device();
    const uint32_t args[] = {instr.handle(), input.handle()};
    const uint64_t seq = ctx.submit(cmd, args);
    EXPECT_EQ(seq, 1u);
    EXPECT_EQ(ctx.submit(cmd, args), 2u);
    ctx.wait(seq, std::chrono::milliseconds(100));
    uint32_t header;
    std::memcpy(&header, cmd.bytes().data(), 4);
    EXPECT_EQ(header & 0xF, 4u);  // COMPLETED
    EXPECT_EQ(header & ~0xFu, words[0] & ~0xFu);
    EXPECT_EQ(d.io().bo_bytes(input.handle())[999], 0xAB);  // written through the mapping
    cmd_words = d.io().submitted().at(0).words;
    ASSERT_EQ(cmd_words.size(), 16u);
    EXPECT_EQ(std::vector<uint32_t>(cmd_words.begin(), cmd_words.begin() + 6), words);
    EXPECT_EQ(d.io().submitted().at(0).bo_handle, cmd.handle());
    input.sync_from_device(8, 16);
  }
  const std::vector<std::string> expected = {
      "CREATE_BO", "GET_BO_INFO", "CREATE_HWCTX", "CREATE_BO", "GET_BO_INFO", "CONFIG_HWCTX",
      "CREATE_BO", "GET_BO_INFO", "CREATE_BO", "GET_BO_INFO", "CREATE_BO", "GET_BO_INFO",
      "SYNC_BO", "EXEC_CMD", "EXEC_CMD", "SYNC_BO",
      "GEM_CLOSE", "GEM_CLOSE", "GEM_CLOSE", "GEM_CLOSE", "DESTROY_HWCTX", "GEM_CLOSE"};
  ASSERT_EQ(d.calls(), expected);
  const auto& r = d.io().records();

  auto heap_in = decode<u::create_bo>(r[0].in);
  EXPECT_EQ(heap_in.type, u::BO_DEV_HEAP);
  EXPECT_EQ(heap_in.size, kHeapBytes);
  EXPECT_EQ(heap_in.flags, 0u);
  EXPECT_EQ(heap_in.handle, 0u);
  EXPECT_EQ(decode<u::create_bo>(r[0].out).handle, 1u);
  EXPECT_EQ(r[0].request, u::kIoctlCreateBo);

  auto info = decode<u::get_bo_info>(r[1].out);
  EXPECT_EQ(info.handle, 1u);
  EXPECT_EQ(info.map_offset, 0x100000000u);
  EXPECT_EQ(info.xdna_addr, 0x4000000u);
  EXPECT_EQ(decode<u::get_bo_info>(r[4].out).map_offset, 0x100000000u + kHeapBytes);

  auto hw_in = decode<u::create_hwctx>(r[2].in);
  EXPECT_EQ(hw_in.num_tiles, 8u);
  EXPECT_EQ(hw_in.max_opc, 0u);
  EXPECT_NE(hw_in.qos_p, 0u);
  EXPECT_EQ(hw_in.handle, 0u);
  auto hw_out = decode<u::create_hwctx>(r[2].out);
  EXPECT_EQ(hw_out.handle, 1u);
  EXPECT_EQ(hw_out.syncobj_handle, 1u);
  auto qos = decode<u::qos_info>(r[2].payload);
  EXPECT_EQ(qos.gops, 7u);
  EXPECT_EQ(qos.priority, 3u);
  EXPECT_EQ(qos.fps, 0u);

  auto cfg = decode<u::config_hwctx>(r[5].in);
  EXPECT_EQ(cfg.handle, 1u);
  EXPECT_EQ(cfg.param_type, u::CONFIG_CU);
  EXPECT_EQ(cfg.param_val_size, 16u);
  ASSERT_EQ(r[5].payload.size(), 16u);
  u::hwctx_param_config_cu head;
  std::memcpy(&head, r[5].payload.data(), 8);
  EXPECT_EQ(head.num_cus, 1);
  u::cu_config cu;
  std::memcpy(&cu, r[5].payload.data() + 8, 8);
  EXPECT_EQ(cu.cu_bo, 2u);
  EXPECT_EQ(cu.cu_func, 0);

  auto sync = decode<u::sync_bo>(r[12].in);
  EXPECT_EQ(sync.handle, 4u);
  EXPECT_EQ(sync.direction, u::SYNC_TO_DEVICE);
  EXPECT_EQ(sync.offset, 0u);
  EXPECT_EQ(sync.size, 1000u);
  auto sync_back = decode<u::sync_bo>(r[15].in);
  EXPECT_EQ(sync_back.direction, u::SYNC_FROM_DEVICE);
  EXPECT_EQ(sync_back.offset, 8u);
  EXPECT_EQ(sync_back.size, 16u);

  auto exec_in = decode<u::exec_cmd>(r[13].in);
  EXPECT_EQ(exec_in.hwctx, 1u);
  EXPECT_EQ(exec_in.type, u::CMD_SUBMIT_EXEC_BUF);
  EXPECT_EQ(exec_in.cmd_handles, 5u);
  EXPECT_EQ(exec_in.cmd_count, 1u);
  EXPECT_EQ(exec_in.arg_count, 2u);
  EXPECT_EQ(exec_in.seq, 0u);
  EXPECT_EQ(decode<u::exec_cmd>(r[13].out).seq, 1u);
  EXPECT_EQ(decode<u::exec_cmd>(r[14].out).seq, 2u);
  ASSERT_EQ(r[13].payload.size(), 8u);
  uint32_t arg_handles[2];
  std::memcpy(arg_handles, r[13].payload.data(), 8);
  EXPECT_EQ(arg_handles[0], 3u);
  EXPECT_EQ(arg_handles[1], 4u);

  // Destructors: the BOs in reverse order, the context, then the heap.
  EXPECT_EQ(decode<u::gem_close>(r[16].in).handle, 5u);
  EXPECT_EQ(decode<u::gem_close>(r[19].in).handle, 2u);
  EXPECT_EQ(decode<u::destroy_hwctx>(r[20].in).handle, 1u);
  EXPECT_EQ(decode<u::gem_close>(r[21].in).handle, 1u);
  EXPECT_EQ(d.io().live_bos(), 0u);
  EXPECT_EQ(d.io().live_contexts(), 0u);
}

TEST(DriverDryRun, AddressesAreDeterministic) {
  auto run = [] {
    DryRun d;
    BufferObject heap(d.dev, BoType::DevHeap, kHeapBytes);
    BufferObject a(d.dev, BoType::Shmem, 1);
    BufferObject b(d.dev, BoType::Dev, 4097);
    BufferObject c(d.dev, BoType::Dev, 10);
    std::vector<uint64_t> out = {a.device_address(), b.device_address(), c.device_address()};
    for (const auto& r : d.io().records())
      if (r.call == "GET_BO_INFO") out.push_back(decode<u::get_bo_info>(r.out).map_offset);
    return out;
  };
  const auto first = run();
  EXPECT_EQ(first, run());
  const std::vector<uint64_t> expected = {0x200000000u, 0x4000000u, 0x4000000u + 8192,
                                          0x100000000u, 0x100000000u + kHeapBytes,
                                          0x100000000u + kHeapBytes + 4096,
                                          0x100000000u + kHeapBytes + 4096 + 8192};
  EXPECT_EQ(first, expected);
  for (uint64_t v : first) EXPECT_EQ(v % 4096, 0u);
}

TEST(DriverDryRun, ContextWithoutDevHeapFailsNamingTheCall) {
  DryRun d;
  try {
    HwContext ctx(d.dev, HwContextParams{.num_tiles = 4});
    FAIL() << "CREATE_HWCTX without a DEV_HEAP succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.call(), "CREATE_HWCTX");
    EXPECT_EQ(e.error(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("amdxdna CREATE_HWCTX failed: ENOENT"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("DEV_HEAP"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.io().live_contexts(), 0u);
}

TEST(DriverDryRun, PartitionLimitsAndColumnsInUse) {
  DryRun d;
  BufferObject heap(d.dev, BoType::DevHeap, kHeapBytes);
  EXPECT_THROW(HwContext(d.dev, HwContextParams{.num_tiles = 33}), DriverError);  // over 32 tiles
  HwContext a(d.dev, HwContextParams{.num_tiles = 16});  // 4 columns
  HwContext b(d.dev, HwContextParams{.num_tiles = 13});  // 4 columns (rounded up)
  try {
    HwContext c(d.dev, HwContextParams{.num_tiles = 1});
    FAIL() << "a ninth column was given out";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.error(), EBUSY);
    EXPECT_NE(std::string(e.what()).find("all columns are in use by other contexts"), std::string::npos);
  }
  const auto ctxs = d.dev.hw_contexts();
  ASSERT_EQ(ctxs.size(), 2u);
  EXPECT_EQ(ctxs[0].context_id, a.handle());
  EXPECT_EQ(ctxs[0].start_col, 0u);
  EXPECT_EQ(ctxs[0].num_col, 4u);
  EXPECT_EQ(ctxs[1].start_col, 4u);
  EXPECT_EQ(ctxs[1].pid, int64_t(::getpid()));
}

TEST(DriverDryRun, UnmappedHeapIsRejectedLikeTheDriver) {
  DryRun d;
  // A heap created by hand and never mapped: the driver has no user address for it.
  u::create_bo c{};
  c.size = kHeapBytes;
  c.type = u::BO_DEV_HEAP;
  ASSERT_EQ(d.io().ioctl(u::kIoctlCreateBo, &c), 0);
  try {
    HwContext ctx(d.dev, HwContextParams{.num_tiles = 4});
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.error(), EINVAL);
  }
  BufferObject second(d.dev, BoType::Shmem, 16);
  EXPECT_THROW(BufferObject(d.dev, BoType::DevHeap, kHeapBytes), DriverError);  // one per client
  EXPECT_THROW(BufferObject(d.dev, BoType::Shmem, 0), std::invalid_argument);
}

TEST(DriverDryRun, FailNextGivesMessagesNamingCallErrnoAndMeaning) {
  DryRun d;
  d.io().fail_next("CREATE_BO", ENOMEM);
  try {
    BufferObject bo(d.dev, BoType::Shmem, 64);
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.call(), "CREATE_BO");
    EXPECT_EQ(std::string(e.what()), "amdxdna CREATE_BO failed: ENOMEM (Cannot allocate memory): "
                                     "out of memory (a DEV BO: the DEV_HEAP is full)");
  }
  // A GET_BO_INFO failure closes the BO it just created.
  d.io().fail_next("GET_BO_INFO", ENOENT);
  EXPECT_THROW(BufferObject(d.dev, BoType::Shmem, 64), DriverError);
  EXPECT_EQ(d.io().live_bos(), 0u);
  EXPECT_EQ(d.io().records().back().call, "GEM_CLOSE");

  BufferObject heap(d.dev, BoType::DevHeap, kHeapBytes);
  d.io().fail_next("CREATE_HWCTX", EBUSY);
  try {
    HwContext ctx(d.dev, HwContextParams{.num_tiles = 4});
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(std::string(e.what()),
              "amdxdna CREATE_HWCTX failed: EBUSY (Device or resource busy): all columns are in use by other contexts");
  }
  d.io().fail_next("CREATE_HWCTX", EINVAL);
  try {
    HwContext ctx(d.dev, HwContextParams{.num_tiles = 4});
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("EINVAL (Invalid argument): no DEV_HEAP buffer object yet"),
              std::string::npos)
        << e.what();
  }
  HwContext ctx(d.dev, HwContextParams{.num_tiles = 4});
  BufferObject cmd(d.dev, BoType::Cmd, 64);
  const uint64_t seq = ctx.submit(cmd, {});
  d.io().fail_next("SYNCOBJ_WAIT", ETIME);
  try {
    ctx.wait(seq, std::chrono::milliseconds(250));
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.call(), "syncobj wait");
    EXPECT_EQ(e.error(), ETIME);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("seq 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("250 ms"), std::string::npos) << msg;
  }
  // A point never submitted times out too, instead of completing.
  EXPECT_THROW(ctx.wait(seq + 5, std::chrono::milliseconds(1)), DriverError);
  d.io().fail_next("EXEC_CMD", EINVAL);
  EXPECT_THROW(ctx.submit(cmd, {}), DriverError);
  d.io().fail_next("SYNC_BO", EIO);
  EXPECT_THROW(cmd.sync_to_device(), DriverError);
  EXPECT_THROW(cmd.sync_to_device(60, 8), std::invalid_argument);
}

TEST(DriverDryRun, DriverChecksArgumentsItself) {
  DryRun d;
  BufferObject heap(d.dev, BoType::DevHeap, kHeapBytes);
  HwContext ctx(d.dev, HwContextParams{.num_tiles = 4});
  BufferObject data(d.dev, BoType::Shmem, 64);
  // A SHMEM BO is not a command BO: refused before the ioctl.
  EXPECT_THROW(ctx.submit(data, {}), std::invalid_argument);
  BufferObject cmd(d.dev, BoType::Cmd, 64);
  const uint32_t unknown[] = {999};
  try {
    ctx.submit(cmd, unknown);
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.error(), ENOENT);
  }
  const CuConfig bad[] = {{999, 0}};
  EXPECT_THROW(ctx.configure_cus(bad), DriverError);
  std::vector<CuConfig> too_many(600, CuConfig{data.handle(), 0});
  EXPECT_THROW(ctx.configure_cus(too_many), std::invalid_argument);
  // Unknown requests and unknown queries.
  int dummy = 0;
  EXPECT_EQ(d.io().ioctl(0x1234, &dummy), -ENOTTY);
  EXPECT_EQ(d.io().records().back().call, "UNKNOWN");
  u::get_info g{};
  g.param = u::QUERY_SENSORS;
  uint8_t buf[64];
  g.buffer = reinterpret_cast<uintptr_t>(buf);
  g.buffer_size = sizeof buf;
  EXPECT_EQ(d.io().ioctl(u::kIoctlGetInfo, &g), -EOPNOTSUPP);
  u::gem_close close{};
  close.handle = 777;
  EXPECT_EQ(d.io().ioctl(u::kIoctlGemClose, &close), -EINVAL);
}

TEST(DriverDryRun, BufferObjectMoves) {
  DryRun d;
  BufferObject a(d.dev, BoType::Shmem, 100);
  a.bytes()[0] = 42;
  const uint32_t h = a.handle();
  BufferObject b(std::move(a));
  EXPECT_EQ(a.handle(), 0u);
  EXPECT_EQ(a.bytes().size(), 0u);
  EXPECT_EQ(b.handle(), h);
  EXPECT_EQ(b.bytes()[0], 42);
  BufferObject c(d.dev, BoType::Shmem, 8);
  const uint32_t hc = c.handle();
  c = std::move(b);  // closes c's own BO
  EXPECT_EQ(c.handle(), h);
  EXPECT_EQ(d.io().records().back().call, "GEM_CLOSE");
  EXPECT_EQ(decode<u::gem_close>(d.io().records().back().in).handle, hc);
  EXPECT_EQ(d.io().live_bos(), 1u);
  {
    BufferObject moved_from(std::move(c));
  }
  const size_t n = d.io().records().size();
  EXPECT_EQ(d.io().live_bos(), 0u);
  // Destroying the moved-from objects records nothing more.
  {
    BufferObject e(std::move(a));
  }
  EXPECT_EQ(d.io().records().size(), n);

  BufferObject heap(d.dev, BoType::DevHeap, kHeapBytes);
  HwContext x(d.dev, HwContextParams{.num_tiles = 4});
  {
    HwContext y(std::move(x));
    EXPECT_EQ(x.handle(), 0u);
  }
  EXPECT_EQ(d.io().records().back().call, "DESTROY_HWCTX");
  EXPECT_EQ(d.io().live_contexts(), 0u);
}

TEST(DriverDryRun, GetInfoDecodesNpu2Answers) {
  DryRun d;
  const AieMetadata m = d.dev.aie_metadata();
  EXPECT_EQ(m.cols, 8);
  EXPECT_EQ(m.rows, 6);
  EXPECT_EQ(m.col_size, 1u << 25);
  EXPECT_EQ(m.shim.row_start, 0);
  EXPECT_EQ(m.shim.row_count, 1);
  EXPECT_EQ(m.mem.row_start, 1);
  EXPECT_EQ(m.mem.row_count, 1);
  EXPECT_EQ(m.mem.locks, 64);
  EXPECT_EQ(m.core.row_start, 2);
  EXPECT_EQ(m.core.row_count, 4);
  EXPECT_EQ(m.core.locks, 16);
  const auto clocks = d.dev.clocks();
  ASSERT_EQ(clocks.size(), 2u);
  EXPECT_EQ(clocks[0].name, "MP-NPU Clock");
  EXPECT_EQ(clocks[0].freq_mhz, 1267u);
  EXPECT_EQ(clocks[1].name, "H Clock");
  EXPECT_EQ(clocks[1].freq_mhz, 1800u);
  EXPECT_EQ(d.dev.firmware_version().text(), "1.5.2.380");
  EXPECT_TRUE(d.dev.hw_contexts().empty());
  // The query went out with the documented param and buffer size.
  const auto& r = d.io().records();
  ASSERT_EQ(r.size(), 4u);
  auto g = decode<u::get_info>(r[0].in);
  EXPECT_EQ(g.param, u::QUERY_AIE_METADATA);
  EXPECT_EQ(g.buffer_size, 64u);
  EXPECT_EQ(r[0].payload.size(), 64u);
  EXPECT_EQ(decode<u::get_info>(r[1].in).param, u::QUERY_CLOCK_METADATA);
  EXPECT_EQ(decode<u::get_info>(r[2].in).param, u::QUERY_FIRMWARE_VERSION);
  EXPECT_EQ(decode<u::get_info>(r[3].in).param, u::QUERY_HW_CONTEXTS);
  d.io().fail_next("GET_INFO", EOPNOTSUPP);
  try {
    d.dev.firmware_version();
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.call(), "GET_INFO");
    EXPECT_NE(std::string(e.what()).find("query FIRMWARE_VERSION"), std::string::npos) << e.what();
  }
}

TEST(DriverDryRun, ErrnoNamesAndOpenErrors) {
  EXPECT_EQ(errno_name(EINVAL), "EINVAL");
  EXPECT_EQ(errno_name(ETIME), "ETIME");
  EXPECT_EQ(errno_name(123456), "errno 123456");
  try {
    open_kernel_io("/nonexistent/accel/accel0");
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.call(), "open");
    EXPECT_EQ(e.error(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/accel/accel0"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("driver loaded"), std::string::npos);
  }
}

}  // namespace
}  // namespace xdna::npu::driver

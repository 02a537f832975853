// On a machine with an amdxdna device: a BO round trip through the real driver and the GET_INFO
// queries. Skipped, with the reason, where /dev/accel has no node.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "npu/device_lock.h"
#include "npu/driver/device.h"

namespace xdna::npu::driver {
namespace {

std::string accel_node_or_skip_reason() {
  auto node = find_accel_node();
  return node ? *node : std::string();
}

#define SKIP_WITHOUT_DEVICE(node)                                                         \
  const std::string node = accel_node_or_skip_reason();                                    \
  if (node.empty()) GTEST_SKIP() << "no /dev/accel: no accel node found (no NPU on this machine)"

TEST(NpuHardware, BufferObjectRoundTrip) {
  SKIP_WITHOUT_DEVICE(node);
  DeviceLock lock = DeviceLock::acquire(node);
  Device dev = Device::open(node);
  BufferObject heap(dev, BoType::DevHeap, kDevHeapMaxBytes);
  for (BoType type : {BoType::Shmem, BoType::Dev}) {
    BufferObject bo(dev, type, 1 << 20);
    EXPECT_NE(bo.handle(), 0u);
    EXPECT_NE(bo.device_address(), 0u);
    auto bytes = bo.bytes();
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
    bo.sync_to_device();
    bo.sync_from_device();
    for (size_t i = 0; i < bytes.size(); ++i)
      ASSERT_EQ(bytes[i], static_cast<uint8_t>(i * 131 + 7)) << "byte " << i << " of BO type " << int(type);
  }
}

TEST(NpuHardware, GetInfoQueriesAreSane) {
  SKIP_WITHOUT_DEVICE(node);
  DeviceLock lock = DeviceLock::acquire(node);
  Device dev = Device::open(node);
  const AieMetadata m = dev.aie_metadata();
  EXPECT_GE(m.cols, 4);
  EXPECT_LE(m.cols, 64);
  EXPECT_EQ(m.rows, m.shim.row_count + m.mem.row_count + m.core.row_count);
  EXPECT_GT(m.core.row_count, 0);
  EXPECT_GT(m.col_size, 0u);
  const auto clocks = dev.clocks();
  ASSERT_EQ(clocks.size(), 2u);
  for (const auto& c : clocks) {
    EXPECT_FALSE(c.name.empty());
    EXPECT_LT(c.freq_mhz, 10000u) << c.name;
  }
  const FirmwareVersion fw = dev.firmware_version();
  EXPECT_GT(fw.major + fw.minor + fw.patch + fw.build, 0u) << fw.text();
  for (const auto& ctx : dev.hw_contexts()) {
    EXPECT_NE(ctx.context_id, 0u);
    EXPECT_LE(ctx.start_col + ctx.num_col, uint32_t(m.cols));
  }
}

}  // namespace
}  // namespace xdna::npu::driver

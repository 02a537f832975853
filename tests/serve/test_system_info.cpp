// NPU probing against fake /sys and /dev trees: the layouts the amdxdna driver creates.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "serve/system_info.h"

namespace fs = std::filesystem;
using namespace xdna;

namespace {

struct FakeRoot {
  fs::path root;
  FakeRoot() {
    char tmpl[] = "/tmp/xdna-sysfs-XXXXXX";
    root = mkdtemp(tmpl);
  }
  ~FakeRoot() { fs::remove_all(root); }
  void write(const fs::path& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  }
  std::string sys() const { return (root / "sys").string(); }
  std::string dev() const { return (root / "dev").string(); }
};

}  // namespace

TEST(ProbeNpu, NothingPresentSaysHostOnly) {
  FakeRoot f;
  f.write("sys/bus/pci/devices/0000:00:01.0/vendor", "0x8086\n");  // some Intel device
  f.write("sys/bus/pci/devices/0000:00:01.0/device", "0x1234\n");
  const NpuInfo info = probe_npu(f.sys(), f.dev());
  EXPECT_FALSE(info.found());
  EXPECT_FALSE(info.usable());
  EXPECT_FALSE(info.driver_loaded);
  EXPECT_TRUE(info.devices.empty());
  const auto j = npu_json(info);
  EXPECT_EQ(j["message"], kNoNpuMessage);
  EXPECT_EQ(j["found"], false);
}

TEST(ProbeNpu, FindsXdna2BoundToAmdxdna) {
  FakeRoot f;
  const std::string slot = "0000:c5:00.1";
  f.write("sys/bus/pci/devices/" + slot + "/vendor", "0x1022\n");
  f.write("sys/bus/pci/devices/" + slot + "/device", "0x17f0\n");
  f.write("sys/bus/pci/devices/" + slot + "/fw_version", "1.5.2.380\n");
  f.write("sys/module/amdxdna/version", "2.19.0\n");
  f.write("dev/accel/accel0", "");
  fs::create_directories(f.root / "sys/class/accel/accel0");
  fs::create_symlink(f.root / "sys/bus/pci/devices" / slot, f.root / "sys/class/accel/accel0/device");

  const NpuInfo info = probe_npu(f.sys(), f.dev());
  EXPECT_TRUE(info.found());
  EXPECT_TRUE(info.usable());
  EXPECT_EQ(info.driver_version, "2.19.0");
  ASSERT_EQ(info.device_nodes.size(), 1u);
  ASSERT_EQ(info.devices.size(), 1u);
  const NpuDevice& d = info.devices[0];
  EXPECT_EQ(d.pci_slot, slot);
  EXPECT_EQ(d.generation, "XDNA2");
  EXPECT_EQ(d.firmware_version, "1.5.2.380");
  EXPECT_EQ(d.accel_node, f.dev() + "/accel/accel0");
  EXPECT_EQ(npu_json(info)["devices"][0]["device_id"], "0x17f0");
}

TEST(ProbeNpu, DeviceWithoutDriverIsFoundButNotUsable) {
  FakeRoot f;
  f.write("sys/bus/pci/devices/0000:c4:00.1/vendor", "0x1022\n");
  f.write("sys/bus/pci/devices/0000:c4:00.1/device", "0x1502\n");
  const NpuInfo info = probe_npu(f.sys(), f.dev());
  EXPECT_TRUE(info.found());
  EXPECT_FALSE(info.usable());
  ASSERT_EQ(info.devices.size(), 1u);
  EXPECT_EQ(info.devices[0].generation, "XDNA");
  EXPECT_TRUE(npu_json(info)["devices"][0]["firmware_version"].is_null());
}

TEST(ProbeMemory, ReadsMeminfo) {
  FakeRoot f;
  f.write("meminfo", "MemTotal:       16384 kB\nMemFree:  100 kB\nMemAvailable:    8192 kB\n");
  const MemoryInfo m = probe_memory((f.root / "meminfo").string());
  EXPECT_EQ(m.total_bytes, 16384u * 1024);
  EXPECT_EQ(m.available_bytes, 8192u * 1024);
}

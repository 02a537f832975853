// NPU probing against fake /sys and /dev trees: the layouts the amdxdna driver creates.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>

#include "npu/driver/device.h"
#include "npu/driver/driver_io.h"
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

TEST(ProbeNpu, NoNpuMessageNamesHostAndNpuSim) {
  const std::string m = kNoNpuMessage;
  EXPECT_NE(m.find("no NPU found, running on host"), std::string::npos);
  EXPECT_NE(m.find("npu-sim"), std::string::npos);
  EXPECT_EQ(m.find("later"), std::string::npos);  // npu-sim exists now
}

namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

}  // namespace

// The doctor's device report over the dry-run driver: what GET_INFO answers lands in the JSON
// and in the text, with the same numbers a Device reads directly.
TEST(NpuDeviceReport, DryRunDeviceMetadataAppearsInJsonAndText) {
  npu::driver::Device direct(std::make_unique<npu::driver::DryRunIo>());
  const npu::driver::AieMetadata m = direct.aie_metadata();
  const std::string fw = direct.firmware_version().text();
  ASSERT_GT(m.cols, 0);

  const nlohmann::json j = npu_device_json(std::make_unique<npu::driver::DryRunIo>(), "/dev/accel/accel0");
  EXPECT_EQ(j["node"], "/dev/accel/accel0");
  EXPECT_NE(j["io"].get<std::string>().find("dry run"), std::string::npos);
  EXPECT_TRUE(j["errors"].empty()) << j.dump(2);
  EXPECT_EQ(j["firmware_version"], fw);
  EXPECT_EQ(j["firmware_source"], "driver");
  EXPECT_EQ(j["aie"]["columns"], m.cols);
  EXPECT_EQ(j["aie"]["rows"], m.rows);
  EXPECT_EQ(j["aie"]["core"]["rows"], m.core.row_count);
  EXPECT_EQ(j["aie"]["core"]["row_start"], m.core.row_start);
  EXPECT_EQ(j["aie"]["mem"]["row_start"], m.mem.row_start);
  EXPECT_EQ(j["aie"]["version"], std::to_string(m.version_major) + "." + std::to_string(m.version_minor));
  ASSERT_TRUE(j["clocks"].is_array());
  EXPECT_EQ(j["clocks"].size(), direct.clocks().size());
  ASSERT_TRUE(j["hw_contexts"].is_object());
  EXPECT_EQ(j["hw_contexts"]["count"], j["hw_contexts"]["contexts"].size());

  const std::string text = joined(npu_device_lines(j));
  EXPECT_NE(text.find("/dev/accel/accel0"), std::string::npos) << text;
  EXPECT_NE(text.find(fw + " (driver)"), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(m.cols) + " columns x " + std::to_string(m.rows) + " rows"), std::string::npos)
      << text;
  if (!j["clocks"].empty()) {
    EXPECT_NE(text.find(j["clocks"][0]["name"].get<std::string>() + " " +
                        std::to_string(j["clocks"][0]["mhz"].get<uint32_t>()) + " MHz"),
              std::string::npos)
        << text;
  }
  EXPECT_NE(text.find("in use"), std::string::npos) << text;
  EXPECT_EQ(text.find("error"), std::string::npos) << text;
}

// A GET_INFO the driver refuses is one error line with the fix; the other queries still report,
// and the firmware version falls back to sysfs.
TEST(NpuDeviceReport, FailingGetInfoIsAnErrorLineNotACrash) {
  auto io = std::make_unique<npu::driver::DryRunIo>();
  io->fail_next("GET_INFO", EACCES);  // the first query: the firmware version
  nlohmann::json j;
  ASSERT_NO_THROW(j = npu_device_json(std::move(io), "/dev/accel/accel0", "1.5.2.380"));
  ASSERT_EQ(j["errors"].size(), 1u) << j.dump(2);
  const std::string err = j["errors"][0];
  EXPECT_NE(err.find("firmware version (GET_INFO)"), std::string::npos) << err;
  EXPECT_NE(err.find("add yourself to the render group"), std::string::npos) << err;
  EXPECT_EQ(j["firmware_version"], "1.5.2.380");
  EXPECT_EQ(j["firmware_source"], "sysfs");
  EXPECT_TRUE(j["aie"].is_object());  // later queries were not affected

  const std::string text = joined(npu_device_lines(j));
  EXPECT_NE(text.find("error"), std::string::npos) << text;
  EXPECT_NE(text.find("1.5.2.380 (sysfs)"), std::string::npos) << text;
}

TEST(NpuDeviceReport, UnopenableNodeIsAnErrorLine) {
  const nlohmann::json j = open_npu_device_json("/nonexistent-xdna/accel/accel7");
  ASSERT_EQ(j["errors"].size(), 1u) << j.dump(2);
  EXPECT_NE(j["errors"][0].get<std::string>().find("/nonexistent-xdna/accel/accel7"), std::string::npos);
  EXPECT_TRUE(j["io"].is_null());
  EXPECT_TRUE(j["aie"].is_null());
  EXPECT_NE(joined(npu_device_lines(j)).find("not opened"), std::string::npos);
}

TEST(NpuDeviceReport, DriverErrorHints) {
  EXPECT_NE(driver_error_hint(EACCES).find("render group"), std::string::npos);
  EXPECT_NE(driver_error_hint(EPERM).find("render group"), std::string::npos);
  EXPECT_EQ(driver_error_hint(0), "");
}

// What this machine offers the engine: CPU and ISA level, threads, memory, and whether an XDNA
// NPU is present (device nodes, amdxdna driver, PCI ids, firmware). Read from /proc and /sys only,
// so it works unprivileged and never fails: missing files just mean "not found".
// Used by `npu doctor` and the server's /health.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xdna {

struct NpuDevice {
  std::string pci_slot;   // e.g. 0000:c5:00.1
  std::string vendor_id;  // "0x1022"
  std::string device_id;  // "0x17f0"
  std::string generation; // "XDNA2", "XDNA", or "" for an AMD accel device we do not know
  std::string accel_node; // /dev/accel/accel0 when the driver bound it, else ""
  std::string firmware_version;  // from sysfs fw_version when the driver exposes it
  std::string vbnv;              // board name from sysfs, when exposed
};

struct NpuInfo {
  std::vector<std::string> device_nodes;  // /dev/accel/accel*
  bool driver_loaded = false;             // /sys/module/amdxdna exists
  std::string driver_version;             // /sys/module/amdxdna/version, when present
  std::vector<NpuDevice> devices;         // AMD NPUs seen on the PCI bus
  bool found() const { return !devices.empty() || !device_nodes.empty(); }
  // Ready for the NPU backend: the device is bound to amdxdna and has a node.
  bool usable() const { return driver_loaded && !device_nodes.empty(); }
};

struct MemoryInfo {
  uint64_t total_bytes = 0, available_bytes = 0;
};

// sysfs_root / dev_root default to the real ones; tests point them at fake trees.
NpuInfo probe_npu(const std::string& sysfs_root = "/sys", const std::string& dev_root = "/dev");
MemoryInfo probe_memory(const std::string& meminfo_path = "/proc/meminfo");

// One line for humans, e.g. "host (avx512, 16 threads); no NPU".
std::string npu_summary(const NpuInfo& npu);
// {"backend":"host","isa":...,"threads":...,"npu":{...}}: the /health and doctor shape.
nlohmann::json backend_json(const NpuInfo& npu);
nlohmann::json npu_json(const NpuInfo& npu);

inline constexpr const char* kNoNpuMessage = "no NPU found: host backend only; npu-sim available later";

}  // namespace xdna

// What this machine offers the engine: CPU and ISA level, threads, memory, and whether an XDNA
// NPU is present (device nodes, amdxdna driver, PCI ids, firmware). Read from /proc and /sys only,
// so it works unprivileged and never fails: missing files just mean "not found".
// Used by `npu doctor` and the server's /health.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xdna::npu::driver {
class DriverIo;
}

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

inline constexpr const char* kNoNpuMessage =
    "no NPU found, running on host: devices host and npu-sim (modelled) are available";

// What the driver says about an open device (driver/device.h over `io`): firmware version,
// AIE array metadata, clocks, hardware contexts in use. Never throws: every query that fails
// becomes one line of "errors" (the call, errno's meaning, and what to do when we know it) and
// its key stays null. `sysfs_firmware` is used when GET_INFO cannot give the firmware version.
// Keys (stable, docs/cli.md): node, io, firmware_version, firmware_source ("driver"|"sysfs"|null),
// aie {columns, rows, col_size, version, core/mem/shim {rows, row_start, dma_channels, locks,
// event_regs}}, clocks [{name, mhz}], hw_contexts {count, contexts [{id, pid, start_col, columns,
// submissions, completions, errors}]}, errors [].
nlohmann::json npu_device_json(std::unique_ptr<npu::driver::DriverIo> io, const std::string& node,
                               const std::string& sysfs_firmware = "");
// The same for a device node: opens it (open_kernel_io) first; a failed open is an error line.
nlohmann::json open_npu_device_json(const std::string& node, const std::string& sysfs_firmware = "");
// npu_device_json as indented text lines ("  firmware   1.5.2.380 (driver)", ...), for doctor.
std::vector<std::string> npu_device_lines(const nlohmann::json& device);
// A DriverError's message plus the fix when errno says what it is (EACCES/EPERM: render group).
std::string driver_error_hint(int err);

}  // namespace xdna

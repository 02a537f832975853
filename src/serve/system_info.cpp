#include "serve/system_info.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/cpu.h"
#include "core/parallel.h"

namespace xdna {

namespace fs = std::filesystem;

namespace {

// First line of a small sysfs file, trimmed; "" when unreadable.
std::string read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  if (!in || !std::getline(in, s)) return "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string generation_of(const std::string& vendor, const std::string& device) {
  if (vendor != "0x1022") return "";
  if (device == "0x17f0") return "XDNA2";  // Strix Point / Krackan Point NPU
  if (device == "0x1502") return "XDNA";   // Phoenix / Hawk Point NPU
  return "";
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

NpuInfo probe_npu(const std::string& sysfs_root, const std::string& dev_root) {
  NpuInfo info;
  const fs::path sys(sysfs_root);
  std::error_code ec;
  for (const fs::path& p : sorted_entries(fs::path(dev_root) / "accel"))
    if (p.filename().string().rfind("accel", 0) == 0) info.device_nodes.push_back(p.string());

  info.driver_loaded = fs::is_directory(sys / "module" / "amdxdna", ec);
  info.driver_version = read_line(sys / "module" / "amdxdna" / "version");

  // Known NPU ids, or anything bound to amdxdna (a newer part we do not have in the table).
  for (const fs::path& dev : sorted_entries(sys / "bus" / "pci" / "devices")) {
    NpuDevice d;
    d.pci_slot = dev.filename().string();
    d.vendor_id = read_line(dev / "vendor");
    d.device_id = read_line(dev / "device");
    d.generation = generation_of(d.vendor_id, d.device_id);
    const bool bound = fs::read_symlink(dev / "driver", ec).filename() == "amdxdna";
    if (d.generation.empty() && !bound) continue;
    d.firmware_version = read_line(dev / "fw_version");  // exposed by AMD's out-of-tree amdxdna
    d.vbnv = read_line(dev / "vbnv");
    info.devices.push_back(d);
  }
  // Which /dev/accel node belongs to which PCI device.
  for (const fs::path& cls : sorted_entries(sys / "class" / "accel")) {
    const std::string slot = fs::read_symlink(cls / "device", ec).filename().string();
    for (NpuDevice& d : info.devices)
      if (!slot.empty() && d.pci_slot == slot)
        d.accel_node = (fs::path(dev_root) / "accel" / cls.filename()).string();
  }
  return info;
}

MemoryInfo probe_memory(const std::string& meminfo_path) {
  MemoryInfo m;
  std::ifstream in(meminfo_path);
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total_bytes = kb * 1024;
    if (key == "MemAvailable:") m.available_bytes = kb * 1024;
  }
  return m;
}

std::string npu_summary(const NpuInfo& npu) {
  std::ostringstream s;
  s << "host (" << isa_name(active_isa()) << ", " << num_threads() << " threads); ";
  if (!npu.found()) {
    s << "no NPU";
  } else {
    const std::string gen = npu.devices.empty() ? "" : npu.devices[0].generation;
    s << (gen.empty() ? "NPU" : gen + " NPU") << (npu.usable() ? " present (backend not built yet)"
                                                              : " present but amdxdna not bound");
  }
  return s.str();
}

nlohmann::json npu_json(const NpuInfo& npu) {
  nlohmann::json devices = nlohmann::json::array();
  for (const NpuDevice& d : npu.devices) {
    auto opt = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
    devices.push_back({{"pci_slot", d.pci_slot},
                       {"vendor_id", d.vendor_id},
                       {"device_id", d.device_id},
                       {"generation", opt(d.generation)},
                       {"accel_node", opt(d.accel_node)},
                       {"firmware_version", opt(d.firmware_version)},
                       {"vbnv", opt(d.vbnv)}});
  }
  return {{"found", npu.found()},
          {"usable", npu.usable()},
          {"device_nodes", npu.device_nodes},
          {"driver", {{"loaded", npu.driver_loaded},
                      {"version", npu.driver_version.empty() ? nlohmann::json(nullptr)
                                                             : nlohmann::json(npu.driver_version)}}},
          {"devices", devices},
          {"message", npu.found() ? "" : kNoNpuMessage}};
}

nlohmann::json backend_json(const NpuInfo& npu) {
  return {{"backend", "host"},  // the only backend until the NPU one lands
          {"isa", isa_name(active_isa())},
          {"threads", num_threads()},
          {"npu_found", npu.found()}};
}

}  // namespace xdna

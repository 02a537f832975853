#include "serve/system_info.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "core/cpu.h"
#include "core/parallel.h"
#include "npu/driver/device.h"

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
    s << (gen.empty() ? "NPU" : gen + " NPU")
      << (npu.usable() ? " present (--device npu runs designs that have compiled artifacts)"
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
  return {{"backend", "host"},  // the default; --device npu-sim / npu are per-run choices
          {"isa", isa_name(active_isa())},
          {"threads", num_threads()},
          {"npu_found", npu.found()}};
}

std::string driver_error_hint(int err) {
  if (err == EACCES || err == EPERM)
    return "add yourself to the render group (sudo usermod -aG render $USER, then log in again)";
  if (err == ENOENT || err == ENODEV) return "the device node is gone: is the amdxdna module loaded?";
  if (err == EBUSY) return "another process holds the device";
  if (err == ENOTTY || err == EINVAL)
    return "the driver does not know this request: an amdxdna older than the engine expects?";
  return "";
}

namespace {

// Runs one query; a failure becomes an error line naming `what` and stays out of the report.
void query(nlohmann::json& errors, const std::string& what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const npu::driver::DriverError& e) {
    std::string line = what + ": " + e.what();
    const std::string hint = driver_error_hint(e.error());
    if (!hint.empty() && line.find(hint) == std::string::npos) line += " (" + hint + ")";
    errors.push_back(line);
  } catch (const std::exception& e) {
    errors.push_back(what + ": " + e.what());
  }
}

nlohmann::json tile_json(const npu::driver::TileMetadata& t) {
  return {{"rows", t.row_count}, {"row_start", t.row_start}, {"dma_channels", t.dma_channels},
          {"locks", t.locks}, {"event_regs", t.event_regs}};
}

nlohmann::json empty_device_json(const std::string& node) {
  return {{"node", node},          {"io", nullptr},     {"firmware_version", nullptr},
          {"firmware_source", nullptr}, {"aie", nullptr}, {"clocks", nullptr},
          {"hw_contexts", nullptr}, {"errors", nlohmann::json::array()}};
}

}  // namespace

nlohmann::json npu_device_json(std::unique_ptr<npu::driver::DriverIo> io, const std::string& node,
                               const std::string& sysfs_firmware) {
  nlohmann::json j = empty_device_json(node);
  j["io"] = io->describe();
  npu::driver::Device dev(std::move(io));
  nlohmann::json& errors = j["errors"];
  query(errors, "firmware version (GET_INFO)", [&] {
    j["firmware_version"] = dev.firmware_version().text();
    j["firmware_source"] = "driver";
  });
  if (j["firmware_version"].is_null() && !sysfs_firmware.empty()) {
    j["firmware_version"] = sysfs_firmware;
    j["firmware_source"] = "sysfs";
  }
  query(errors, "AIE metadata (GET_INFO)", [&] {
    const npu::driver::AieMetadata m = dev.aie_metadata();
    j["aie"] = {{"columns", m.cols},
                {"rows", m.rows},
                {"col_size", m.col_size},
                {"version", std::to_string(m.version_major) + "." + std::to_string(m.version_minor)},
                {"core", tile_json(m.core)},
                {"mem", tile_json(m.mem)},
                {"shim", tile_json(m.shim)}};
  });
  query(errors, "clocks (GET_INFO)", [&] {
    nlohmann::json clocks = nlohmann::json::array();
    for (const npu::driver::ClockInfo& c : dev.clocks()) clocks.push_back({{"name", c.name}, {"mhz", c.freq_mhz}});
    j["clocks"] = clocks;
  });
  query(errors, "hardware contexts (GET_INFO)", [&] {
    nlohmann::json list = nlohmann::json::array();
    for (const npu::driver::HwContextInfo& c : dev.hw_contexts())
      list.push_back({{"id", c.context_id},
                      {"pid", c.pid},
                      {"start_col", c.start_col},
                      {"columns", c.num_col},
                      {"submissions", c.submissions},
                      {"completions", c.completions},
                      {"errors", c.errors}});
    j["hw_contexts"] = {{"count", list.size()}, {"contexts", list}};
  });
  return j;
}

nlohmann::json open_npu_device_json(const std::string& node, const std::string& sysfs_firmware) {
  std::unique_ptr<npu::driver::DriverIo> io;
  nlohmann::json errors = nlohmann::json::array();
  query(errors, "open " + node, [&] { io = npu::driver::open_kernel_io(node); });
  if (io) return npu_device_json(std::move(io), node, sysfs_firmware);
  nlohmann::json j = empty_device_json(node);
  j["errors"] = errors;
  if (!sysfs_firmware.empty()) {
    j["firmware_version"] = sysfs_firmware;
    j["firmware_source"] = "sysfs";
  }
  return j;
}

std::vector<std::string> npu_device_lines(const nlohmann::json& d) {
  std::vector<std::string> out;
  char buf[256];
  auto line = [&](const char* key, const std::string& value) {
    std::snprintf(buf, sizeof buf, "  %-10s ", key);
    out.push_back(buf + value);
  };
  line("device", d["node"].get<std::string>() +
                     (d["io"].is_null() ? std::string(" (not opened)") : " via " + d["io"].get<std::string>()));
  if (!d["firmware_version"].is_null())
    line("firmware", d["firmware_version"].get<std::string>() + " (" + d["firmware_source"].get<std::string>() + ")");
  if (const nlohmann::json& a = d["aie"]; !a.is_null()) {
    auto tiles = [&](const char* name) {
      const nlohmann::json& t = a[name];
      return std::string(name) + " rows " + std::to_string(t["row_start"].get<int>()) + "+" +
             std::to_string(t["rows"].get<int>());
    };
    line("aie", std::to_string(a["columns"].get<int>()) + " columns x " + std::to_string(a["rows"].get<int>()) +
                    " rows (" + tiles("shim") + ", " + tiles("mem") + ", " + tiles("core") + "), version " +
                    a["version"].get<std::string>());
  }
  if (const nlohmann::json& c = d["clocks"]; !c.is_null()) {
    std::string s;
    for (const auto& k : c)
      s += (s.empty() ? "" : ", ") + k["name"].get<std::string>() + " " + std::to_string(k["mhz"].get<uint32_t>()) + " MHz";
    line("clocks", s.empty() ? "(none reported)" : s);
  }
  if (const nlohmann::json& h = d["hw_contexts"]; !h.is_null()) {
    line("contexts", std::to_string(h["count"].get<size_t>()) + " in use");
    for (const auto& c : h["contexts"])
      line("  context", "#" + std::to_string(c["id"].get<uint32_t>()) + " pid " + std::to_string(c["pid"].get<int64_t>()) +
                            ", columns " + std::to_string(c["start_col"].get<uint32_t>()) + "+" +
                            std::to_string(c["columns"].get<uint32_t>()) + ", " +
                            std::to_string(c["submissions"].get<uint64_t>()) + " submissions");
  }
  for (const auto& e : d["errors"]) line("error", e.get<std::string>());
  return out;
}

}  // namespace xdna

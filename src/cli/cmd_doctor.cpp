// `npu doctor`: what this machine offers the engine. It reports and never fails (exit 0); with
// --json the keys are stable so scripts and bug reports can rely on them (docs/cli.md). With an
// NPU bound to amdxdna it opens the device node and reports what the driver says (firmware, AIE
// array, clocks, hardware contexts in use); every failure there is an error line, not a crash.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "core/cpu.h"
#include "core/parallel.h"
#include "models/model_store.h"
#include "npu/artifacts/manifest.h"
#include "serve/server.h"
#include "serve/system_info.h"

namespace xdna::cli {

namespace {

struct DoctorOptions {
  bool json = false;
  std::string store;
};

nlohmann::json features_json(const CpuFeatures& f) {
  return {{"avx2", f.avx2},         {"fma", f.fma},           {"f16c", f.f16c},
          {"avx512f", f.avx512f},   {"avx512bw", f.avx512bw}, {"avx512vl", f.avx512vl},
          {"avx512dq", f.avx512dq}, {"avx512vnni", f.avx512vnni}, {"avx512bf16", f.avx512bf16}};
}

// The compiled NPU designs --device npu can run: {"dir", "designs", "toolchain", "error"}.
nlohmann::json artifacts_json() {
  const std::string dir = resolve_npu_artifacts();
  nlohmann::json j = {{"dir", dir}, {"designs", 0}, {"toolchain", nullptr}, {"error", nullptr}};
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "manifest.json", ec)) return j;  // none built
  try {
    const npu::artifacts::Manifest m = npu::artifacts::load_manifest(dir);
    j["designs"] = m.designs.size();
    j["toolchain"] = m.toolchain;
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  return j;
}

// The device --device npu would use (the first node, as find_accel_node picks), queried through
// the driver; null when no NPU is usable.
nlohmann::json device_json(const NpuInfo& npu) {
  if (!npu.usable()) return nullptr;
  const std::string& node = npu.device_nodes.front();
  std::string sysfs_firmware;
  for (const NpuDevice& d : npu.devices)
    if (d.accel_node == node) sysfs_firmware = d.firmware_version;
  return open_npu_device_json(node, sysfs_firmware);
}

nlohmann::json collect(const DoctorOptions& o) {
  const CpuFeatures& cpu = cpu_features();
  const MemoryInfo mem = probe_memory();
  const NpuInfo npu = probe_npu();

  nlohmann::json store = {{"path", nullptr}, {"models", nlohmann::json::array()}, {"error", nullptr}};
  try {  // a broken store is reported, not fatal: doctor is what you run when things are broken
    ModelStore s(resolve_store(o.store));
    store["path"] = s.root();
    for (const Manifest& m : s.list())
      store["models"].push_back({{"name", m.name},
                                 {"family", m.family},
                                 {"format", m.format},
                                 {"precision", m.precision},
                                 {"size_bytes", m.size_bytes}});
  } catch (const std::exception& e) {
    store["error"] = e.what();
  }
  const Config& cfg = global_config();
  nlohmann::json npu_j = npu_json(npu);
  npu_j["device"] = device_json(npu);
  nlohmann::json backend = backend_json(npu);
  backend["devices"] = npu.usable() ? nlohmann::json{"host", "npu-sim", "npu"} : nlohmann::json{"host", "npu-sim"};
  backend["npu_runtime"] = true;  // built in: the amdxdna driver is driven directly, no XRT
  backend["artifacts"] = artifacts_json();
  return {{"version", serve::kEngineVersion},
          {"cpu", {{"brand", cpu.brand},
                   {"features", features_json(cpu)},
                   {"isa", isa_name(active_isa())},
                   {"logical_cpus", std::thread::hardware_concurrency()}}},
          {"threads", num_threads()},
          {"memory", {{"total_bytes", mem.total_bytes}, {"available_bytes", mem.available_bytes}}},
          {"npu", npu_j},
          {"backend", backend},
          {"store", store},
          {"config", {{"path", cfg.path.empty() ? nlohmann::json(nullptr) : nlohmann::json(cfg.path)}}}};
}

void print_text(const nlohmann::json& d) {
  auto line = [](const char* key, const std::string& value) { std::printf("%-10s %s\n", key, value.c_str()); };
  std::printf("npu %s doctor\n\n", d["version"].get<std::string>().c_str());

  line("cpu", d["cpu"]["brand"].get<std::string>());
  std::string feats;
  for (const auto& [name, on] : d["cpu"]["features"].items())
    if (on.get<bool>()) feats += (feats.empty() ? "" : " ") + name;
  line("features", feats.empty() ? "(none of the SIMD sets the kernels use)" : feats);
  line("kernels", d["cpu"]["isa"].get<std::string>() + " (highest level this CPU supports, or --isa)");
  line("threads", std::to_string(d["threads"].get<int>()) + " of " +
                      std::to_string(d["cpu"]["logical_cpus"].get<unsigned>()) + " logical CPUs");
  line("memory", format_size(d["memory"]["total_bytes"]) + " total, " +
                     format_size(d["memory"]["available_bytes"]) + " available");

  const nlohmann::json& npu = d["npu"];
  if (!npu["found"].get<bool>()) {
    line("npu", kNoNpuMessage);
  } else {
    for (const auto& dev : npu["devices"]) {
      std::string s = dev["pci_slot"].get<std::string>() + " " + dev["vendor_id"].get<std::string>() + ":" +
                      dev["device_id"].get<std::string>();
      if (!dev["generation"].is_null()) s += " " + dev["generation"].get<std::string>();
      if (!dev["accel_node"].is_null()) s += " -> " + dev["accel_node"].get<std::string>();
      if (!dev["firmware_version"].is_null()) s += ", firmware " + dev["firmware_version"].get<std::string>();
      line("npu", s);
    }
    if (npu["devices"].empty()) line("npu", "accel device node(s) present, no known AMD NPU on the PCI bus");
  }
  std::string nodes;
  for (const auto& n : npu["device_nodes"]) nodes += (nodes.empty() ? "" : " ") + n.get<std::string>();
  line("  nodes", nodes.empty() ? "none in /dev/accel" : nodes);
  const nlohmann::json& drv = npu["driver"];
  std::string driver = "kernel module not loaded";
  if (drv["loaded"].get<bool>()) {
    driver = "loaded";
    if (!drv["version"].is_null()) driver += " (version " + drv["version"].get<std::string>() + ")";
  }
  line("  amdxdna", driver);
  if (!npu["device"].is_null())
    for (const std::string& l : npu_device_lines(npu["device"])) std::printf("%s\n", l.c_str());

  const nlohmann::json& art = d["backend"]["artifacts"];
  std::string devices;
  for (const auto& dev : d["backend"]["devices"]) devices += (devices.empty() ? "" : ", ") + dev.get<std::string>();
  line("backend", "host (default); --device " + devices + " available" +
                      (npu["usable"].get<bool>() ? "" : " (npu needs the NPU hardware)"));
  line("  runtime", "npu runtime built in (amdxdna, no XRT); designs need compiled artifacts: " +
                        std::to_string(art["designs"].get<size_t>()) + " found in " + art["dir"].get<std::string>());
  if (!art["error"].is_null()) line("  error", art["error"].get<std::string>());

  const nlohmann::json& store = d["store"];
  line("store", store["path"].is_null() ? "(unknown)" : store["path"].get<std::string>());
  if (!store["error"].is_null()) line("  error", store["error"].get<std::string>());
  if (store["models"].empty()) line("  models", "none (try: npu model pull all-minilm-l6-v2)");
  for (const auto& m : store["models"])
    line("  model", m["name"].get<std::string>() + "  " + m["family"].get<std::string>() + " " +
                        m["precision"].get<std::string>() + "  " + format_size(m["size_bytes"]));
  line("config", d["config"]["path"].is_null() ? "none" : d["config"]["path"].get<std::string>());
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Report CPU, memory, NPU and installed models (always exits 0)");
  auto o = std::make_shared<DoctorOptions>();
  cmd->add_flag("--json", o->json, "Print one JSON object with stable keys");
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->callback([o] {
    const nlohmann::json d = collect(*o);
    if (o->json) std::printf("%s\n", d.dump(2).c_str());
    else print_text(d);
  });
}

}  // namespace xdna::cli

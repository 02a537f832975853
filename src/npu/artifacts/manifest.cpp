// The artifacts manifest: load (with every check the runtime relies on) and save.
#include "npu/artifacts/manifest.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/sha256.h"

namespace xdna::npu::artifacts {

namespace fs = std::filesystem;
using nlohmann::json;

const Entry* Manifest::find(const std::string& design) const {
  for (const Entry& e : designs)
    if (e.design == design) return &e;
  return nullptr;
}

namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::runtime_error(file + ": " + what);
}

const json& field(const json& obj, const std::string& key, json::value_t type, const std::string& file,
                  const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) fail(file, where + ": missing key '" + key + "'");
  const json& v = obj.at(key);
  const bool ok = type == json::value_t::number_integer ? v.is_number_integer() : v.type() == type;
  if (!ok) fail(file, where + "." + key + ": wrong type (" + std::string(v.type_name()) + ")");
  return v;
}

std::string str_field(const json& obj, const std::string& key, const std::string& file, const std::string& where) {
  return field(obj, key, json::value_t::string, file, where).get<std::string>();
}

// `rel` must be a plain relative path that stays inside `dir` once symlinks are resolved.
std::string checked_path(const std::string& dir, const std::string& rel, const std::string& file,
                         const std::string& where) {
  const fs::path p(rel);
  if (rel.empty() || p.is_absolute()) fail(file, where + ": path '" + rel + "' is not relative");
  for (const fs::path& part : p)
    if (part == "..") fail(file, where + ": path '" + rel + "' leaves the directory ('..')");
  const fs::path full = fs::path(dir) / p;
  std::error_code ec;
  if (!fs::is_regular_file(full, ec)) fail(file, where + ": file '" + rel + "' is missing");
  const fs::path real = fs::canonical(full, ec);
  const fs::path root = fs::canonical(dir, ec);
  if (ec) fail(file, where + ": cannot resolve '" + rel + "'");
  const std::string r = real.string(), base = root.string() + "/";
  if (r.compare(0, base.size(), base) != 0) fail(file, where + ": path '" + rel + "' resolves outside the directory");
  return r;
}

}  // namespace

Manifest load_manifest(const std::string& dir) {
  const std::string file = (fs::path(dir) / "manifest.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    fail(file, std::string("not JSON: ") + e.what());
  }
  Manifest m;
  std::error_code ec;
  m.dir = fs::absolute(dir, ec).lexically_normal().string();
  m.version = int(field(j, "version", json::value_t::number_integer, file, "manifest").get<int64_t>());
  if (m.version != 1) fail(file, "version: " + std::to_string(m.version) + " is not 1");
  m.toolchain = str_field(j, "toolchain", file, "manifest");
  const json& designs = field(j, "designs", json::value_t::array, file, "manifest");
  std::set<std::string> names;
  for (size_t i = 0; i < designs.size(); ++i) {
    const json& d = designs[i];
    const std::string where = "designs[" + std::to_string(i) + "]";
    Entry e;
    e.design = str_field(d, "design", file, where);
    if (!names.insert(e.design).second) fail(file, where + ".design: '" + e.design + "' appears twice");
    e.family = str_field(d, "family", file, where);
    e.kernel = str_field(d, "kernel", file, where);
    const json& params = field(d, "params", json::value_t::object, file, where);
    for (const auto& [k, v] : params.items()) {
      if (!v.is_number_integer()) fail(file, where + ".params." + k + ": not an integer");
      e.params[k] = v.get<int64_t>();
    }
    e.xclbin = str_field(d, "xclbin", file, where);
    e.insts = str_field(d, "insts", file, where);
    e.xclbin_sha256 = str_field(d, "xclbin_sha256", file, where);
    e.insts_sha256 = str_field(d, "insts_sha256", file, where);
    const std::string x = checked_path(dir, e.xclbin, file, where + ".xclbin");
    const std::string n = checked_path(dir, e.insts, file, where + ".insts");
    if (sha256_file(x) != e.xclbin_sha256)
      fail(file, where + ".xclbin_sha256: " + e.xclbin + " does not have the recorded sha256");
    if (sha256_file(n) != e.insts_sha256)
      fail(file, where + ".insts_sha256: " + e.insts + " does not have the recorded sha256");
    m.designs.push_back(std::move(e));
  }
  return m;
}

void save_manifest(const Manifest& m, const std::string& dir) {
  const std::string file = (fs::path(dir) / "manifest.json").string();
  json designs = json::array();
  std::set<std::string> names;
  for (const Entry& e : m.designs) {
    if (!names.insert(e.design).second) fail(file, "design '" + e.design + "' appears twice");
    const std::string where = "design " + e.design;
    json d;
    d["design"] = e.design;
    d["family"] = e.family;
    d["params"] = e.params;
    d["kernel"] = e.kernel;
    d["xclbin"] = e.xclbin;
    d["insts"] = e.insts;
    // Hashes are always recomputed from the files (what the loader will check).
    d["xclbin_sha256"] = sha256_file(checked_path(dir, e.xclbin, file, where + " xclbin"));
    d["insts_sha256"] = sha256_file(checked_path(dir, e.insts, file, where + " insts"));
    designs.push_back(d);
  }
  const json j = {{"version", 1}, {"toolchain", m.toolchain}, {"designs", designs}};
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << j.dump(2) << "\n";
    if (!out) fail(tmp, "cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) fail(file, "cannot replace: " + ec.message());
}

std::string default_artifacts_dir() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "xdna-engine" / "npu-artifacts").string();
  const char* home = std::getenv("HOME");
  if (!home || !*home) throw std::runtime_error("default_artifacts_dir: neither XDG_DATA_HOME nor HOME is set");
  return (fs::path(home) / ".local" / "share" / "xdna-engine" / "npu-artifacts").string();
}

}  // namespace xdna::npu::artifacts

// The NPU artifacts directory: what the device runtime loads. Layout (docs/npu-toolchain.md):
//   <dir>/manifest.json                 {"version":1,"toolchain":"...","designs":[...]}
//   <dir>/<design>/design.json          the design as data (design_json.cpp)
//   <dir>/<design>/<design>.xclbin      built by the open toolchain (aiecc) from the emitted input
//   <dir>/<design>/insts.bin            the instruction stream (ours, or aiecc's)
// Each manifest entry names the design, its family parameters, its files and their sha256; the
// loader checks every file exists, is inside <dir>, and has the recorded hash.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace xdna::npu::artifacts {

struct Entry {
  std::string design;                     // Design::name
  std::string family;
  std::map<std::string, int64_t> params;  // Design::params
  std::string kernel;                     // the CU name in the xclbin (IP_LAYOUT)
  std::string xclbin, insts;              // paths relative to the directory
  std::string xclbin_sha256, insts_sha256;
};

struct Manifest {
  int version = 1;
  std::string toolchain;  // e.g. "mlir-aie 1.2.0 + llvm-aie (Peano) ..."
  std::string dir;        // absolute directory the manifest was loaded from
  std::vector<Entry> designs;
  const Entry* find(const std::string& design) const;
};

// Loads and verifies <dir>/manifest.json. Throws std::runtime_error naming the file and field
// (missing key, bad type, path escaping the directory, missing file, sha256 mismatch).
Manifest load_manifest(const std::string& dir);
void save_manifest(const Manifest& m, const std::string& dir);  // hashes from core/sha256.h

// $XDG_DATA_HOME/xdna-engine/npu-artifacts (or ~/.local/share/...): where `npu design build`
// puts artifacts and the runtime looks by default (config key npu_artifacts overrides).
std::string default_artifacts_dir();

}  // namespace xdna::npu::artifacts

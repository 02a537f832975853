// The optional JSON config file: defaults for flags (`threads`, `store`, `host`, `port`,
// `python`, `api_key`, `npu_fallback`, ...) and settings (`npu_artifacts`). Looked up at --config PATH, else $XDG_CONFIG_HOME/xdna-engine/config.json
// (~/.config/... without XDG_CONFIG_HOME). Flags always override it. Unknown keys and wrong
// types are errors, so a typo never silently does nothing.
#pragma once
#include <optional>
#include <string>

namespace xdna::cli {

struct Config {
  std::optional<int> threads;
  std::optional<std::string> store;   // model store directory
  std::optional<std::string> host;    // `npu serve` bind address
  std::optional<int> port;            // `npu serve` port
  std::optional<std::string> python;  // interpreter used by `npu model pull` (default python3)
  std::optional<std::string> api_key; // `npu serve --api-key` (keep the file private: chmod 600)
  // `npu serve` limits, as its flags of the same names (sizes as "8GiB", "512MiB", bytes).
  std::optional<std::string> max_memory, max_body, max_audio;
  std::optional<int> max_queue, max_batch;
  std::optional<double> request_timeout;  // seconds
  // --device npu: what runs when the NPU is missing or busy ("none", "host" or "npu-sim"), and
  // the compiled-artifacts directory (default: artifacts::default_artifacts_dir()).
  std::optional<std::string> npu_fallback, npu_artifacts;
  // LLM KV cache element type ("f32", "f16" or "bf16"; unset: f16, default_kv_dtype).
  std::optional<std::string> kv_type;
  std::string path;                   // the file it came from; empty when none was read
};

std::string default_config_path();  // "" when neither XDG_CONFIG_HOME nor HOME is set
// Throws std::runtime_error naming `origin` and the offending key.
Config parse_config(const std::string& text, const std::string& origin);
// `path` given: it must exist. Empty: the default file if it exists, else an empty Config.
Config load_config(const std::string& path);

// The config main() loaded for this run (from --config or the default location).
const Config& global_config();
void set_global_config(Config c);

// flag (when non-empty) > config file > built-in default.
std::string resolve_store(const std::string& flag);
std::string resolve_python();
// --fallback flag (when non-empty) > config npu_fallback > "none".
std::string resolve_npu_fallback(const std::string& flag);
std::string resolve_npu_artifacts();
// --kv-type flag (when non-empty) > config kv_type > unset (the model format's default).
std::optional<std::string> resolve_kv_type(const std::string& flag);

inline constexpr const char* kStoreHelp =
    "Model store directory (default: config `store`, then $XDG_CACHE_HOME/xdna-engine/models)";

}  // namespace xdna::cli

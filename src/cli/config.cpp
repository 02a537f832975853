#include "cli/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "models/model_store.h"
#include "npu/artifacts/manifest.h"

namespace xdna::cli {

namespace fs = std::filesystem;
using nlohmann::json;

std::string default_config_path() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "xdna-engine" / "config.json").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".config" / "xdna-engine" / "config.json").string();
  return "";
}

namespace {

int get_int(const json& v, const std::string& key, const std::string& origin, int lo, int hi) {
  if (!v.is_number_integer())
    throw std::runtime_error(origin + ": \"" + key + "\" must be an integer, not " + v.type_name());
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw std::runtime_error(origin + ": \"" + key + "\" must be in " + std::to_string(lo) + ".." +
                             std::to_string(hi) + ", got " + std::to_string(x));
  return static_cast<int>(x);
}

std::string get_string(const json& v, const std::string& key, const std::string& origin) {
  if (!v.is_string() || v.get<std::string>().empty())
    throw std::runtime_error(origin + ": \"" + key + "\" must be a non-empty string, not " +
                             (v.is_string() ? "an empty one" : v.type_name()));
  return v.get<std::string>();
}

std::string get_size(const json& v, const std::string& key, const std::string& origin) {
  const std::string text = get_string(v, key, origin);
  try {
    parse_byte_size(text);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(origin + ": \"" + key + "\": " + e.what());
  }
  return text;
}

double get_seconds(const json& v, const std::string& key, const std::string& origin) {
  if (!v.is_number() || !(v.get<double>() > 0))
    throw std::runtime_error(origin + ": \"" + key + "\" must be a positive number of seconds, not " + v.dump());
  return v.get<double>();
}

}  // namespace

Config parse_config(const std::string& text, const std::string& origin) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::runtime_error(origin + ": not valid JSON");
  if (!j.is_object()) throw std::runtime_error(origin + ": must be a JSON object");
  Config c;
  c.path = origin;
  for (const auto& [key, v] : j.items()) {
    if (key == "threads") c.threads = get_int(v, key, origin, 0, 4096);
    else if (key == "port") c.port = get_int(v, key, origin, 0, 65535);
    else if (key == "store") c.store = get_string(v, key, origin);
    else if (key == "host") c.host = get_string(v, key, origin);
    else if (key == "python") c.python = get_string(v, key, origin);
    else if (key == "api_key") c.api_key = get_string(v, key, origin);
    else if (key == "max_memory") c.max_memory = get_size(v, key, origin);
    else if (key == "max_body") c.max_body = get_size(v, key, origin);
    else if (key == "max_audio") c.max_audio = get_size(v, key, origin);
    else if (key == "max_queue") c.max_queue = get_int(v, key, origin, 0, 100000);
    else if (key == "max_batch") c.max_batch = get_int(v, key, origin, 1, 256);
    else if (key == "request_timeout") c.request_timeout = get_seconds(v, key, origin);
    else if (key == "npu_artifacts") c.npu_artifacts = get_string(v, key, origin);
    else if (key == "npu_fallback") {
      c.npu_fallback = get_string(v, key, origin);
      if (*c.npu_fallback != "none" && *c.npu_fallback != "host" && *c.npu_fallback != "npu-sim")
        throw std::runtime_error(origin + ": \"npu_fallback\" must be \"none\", \"host\" or \"npu-sim\", not \"" +
                                 *c.npu_fallback + "\"");
    } else if (key == "kv_type") {
      c.kv_type = get_string(v, key, origin);
      if (*c.kv_type != "f32" && *c.kv_type != "f16" && *c.kv_type != "bf16")
        throw std::runtime_error(origin + ": \"kv_type\" must be \"f32\", \"f16\" or \"bf16\", not \"" +
                                 *c.kv_type + "\"");
    } else
      throw std::runtime_error(origin + ": unknown key \"" + key +
                               "\" (known: threads, store, host, port, python, api_key, max_memory, max_queue, "
                               "max_batch, request_timeout, max_body, max_audio, npu_fallback, npu_artifacts, "
                               "kv_type)");
  }
  return c;
}

Config load_config(const std::string& path) {
  const std::string p = path.empty() ? default_config_path() : path;
  std::error_code ec;
  if (p.empty() || (path.empty() && !fs::exists(p, ec))) return {};
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read config file " + p);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), p);
}

namespace {
Config& config_slot() {
  static Config c;
  return c;
}
}  // namespace

const Config& global_config() { return config_slot(); }
void set_global_config(Config c) { config_slot() = std::move(c); }

std::string resolve_store(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (global_config().store) return *global_config().store;
  return default_store_dir();
}

std::string resolve_python() { return global_config().python.value_or("python3"); }

std::string resolve_npu_fallback(const std::string& flag) {
  if (!flag.empty()) return flag;
  return global_config().npu_fallback.value_or("none");
}

std::optional<std::string> resolve_kv_type(const std::string& flag) {
  if (!flag.empty()) return flag;
  return global_config().kv_type;
}

std::string resolve_npu_artifacts() {
  if (global_config().npu_artifacts) return *global_config().npu_artifacts;
  return npu::artifacts::default_artifacts_dir();
}

}  // namespace xdna::cli

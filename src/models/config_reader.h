// Typed reads from a Hugging Face config.json, shared by the encoder and decoder specs: every
// error names the file (`origin`) and the key.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace xdna {

struct ConfigReader {
  const nlohmann::json& j;
  const std::string& origin;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(origin + ": " + what);
  }
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t integer(const char* key) const {
    if (!j.contains(key)) fail(std::string("missing \"") + key + "\"");
    if (!j[key].is_number_integer()) fail(std::string("\"") + key + "\" must be an integer");
    return j[key].get<int64_t>();
  }
  int64_t integer(const char* key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) fail(std::string("\"") + key + "\" must be a number");
    return j[key].get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) fail(std::string("\"") + key + "\" must be true or false");
    return j[key].get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_string()) fail(std::string("\"") + key + "\" must be a string");
    return j[key].get<std::string>();
  }
};

}  // namespace xdna

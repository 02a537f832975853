#include "weights/text_file.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace xdna {

std::optional<std::string> read_text_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string read_required_text_file(const std::filesystem::path& p) {
  std::optional<std::string> text = read_text_file(p);
  if (!text) throw std::runtime_error(p.string() + ": cannot read");
  return std::move(*text);
}

nlohmann::json parse_json(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(origin + ": " + e.what());
  }
}

}  // namespace xdna

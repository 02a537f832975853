// Whole-file reads of the small text files that sit beside weights (config.json, tokenizer.json,
// generation_config.json ...), shared by the importers (bake, ctranslate2) and the model loaders.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace xdna {

// The file's bytes; nullopt when it cannot be opened (absent optional files are not errors).
std::optional<std::string> read_text_file(const std::filesystem::path& p);
// The same, for a file that must be there: throws "<path>: cannot read".
std::string read_required_text_file(const std::filesystem::path& p);
// JSON text parsed; a syntax error is a std::runtime_error naming `origin` (usually the path).
nlohmann::json parse_json(const std::string& text, const std::string& origin);

}  // namespace xdna

#include "pipeline/speech_model.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "pipeline/audio.h"

namespace xdna {

namespace fs = std::filesystem;

namespace {

// The "family" of a store directory's manifest.json, or "" when there is none.
std::string manifest_family(const fs::path& dir) {
  std::ifstream f(dir / "manifest.json");
  if (!f) return "";
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return j.is_object() && j.contains("family") && j["family"].is_string() ? j["family"].get<std::string>() : "";
}

bool conformer_file(const fs::path& p) { return p.extension() == ".nemo" || p.extension() == ".ckpt"; }

}  // namespace

bool is_conformer_family(const std::string& family) { return family == "parakeet" || family == "gigaam"; }
bool is_speech_family(const std::string& family) { return family == "whisper" || is_conformer_family(family); }

bool looks_like_conformer(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return conformer_file(p);
  if (!fs::is_directory(p, ec)) return false;
  if (const std::string family = manifest_family(p); !family.empty()) return is_conformer_family(family);
  for (const fs::directory_entry& e : fs::directory_iterator(p, ec))
    if (e.is_regular_file() && conformer_file(e.path())) return true;
  std::ifstream f(p / "config.json");
  if (!f) return false;
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return j.is_object() && j.contains("model_type") && j["model_type"].is_string() &&
         j["model_type"].get<std::string>().rfind("parakeet", 0) == 0;
}

SpeechModel SpeechModel::load(const std::string& path) {
  if (looks_like_conformer(path)) return SpeechModel(ConformerTranscriber::load(path));
  return SpeechModel(Transcriber::load(path));
}

std::string SpeechModel::family() const { return whisper_ ? "whisper" : conformer_->model().config().family; }

int SpeechModel::sample_rate() const {
  return whisper_ ? kWhisperSampleRate : conformer_->model().config().mel.sample_rate;
}

Transcript SpeechModel::transcribe(const std::vector<float>& samples, const TranscribeOptions& options) const {
  return whisper_ ? whisper_->transcribe(samples, options) : conformer_->transcribe(samples, options);
}

}  // namespace xdna

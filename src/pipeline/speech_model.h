// What `npu transcribe` and the server's /v1/audio/* load: a Whisper model (Transcriber) or a
// conformer (ConformerTranscriber), chosen by what the path holds. Both produce a Transcript.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/conformer_transcribe.h"
#include "pipeline/transcribe.h"

namespace xdna {

// Families of speech models the store may hold.
bool is_speech_family(const std::string& family);      // whisper, parakeet, gigaam
bool is_conformer_family(const std::string& family);   // parakeet, gigaam

// True when `path` holds a conformer model: a .nemo archive or GigaAM .ckpt file, a store
// directory whose manifest says parakeet/gigaam, or a directory with a .nemo / .ckpt file or a
// transformers config.json whose model_type starts with "parakeet".
bool looks_like_conformer(const std::string& path);

class SpeechModel {
 public:
  // A store directory or a checkpoint path; conformers by looks_like_conformer, else Whisper.
  static SpeechModel load(const std::string& path);
  explicit SpeechModel(Transcriber whisper) : whisper_(std::move(whisper)) {}
  explicit SpeechModel(ConformerTranscriber conformer) : conformer_(std::move(conformer)) {}

  std::string family() const;  // "whisper", or the conformer's config family
  const Transcriber* whisper() const { return whisper_ ? &*whisper_ : nullptr; }
  const ConformerTranscriber* conformer() const { return conformer_ ? &*conformer_ : nullptr; }
  int sample_rate() const;  // what load_audio must resample to

  Transcript transcribe(const std::vector<float>& samples, const TranscribeOptions& options) const;

 private:
  std::optional<Transcriber> whisper_;
  std::optional<ConformerTranscriber> conformer_;
};

}  // namespace xdna

// Speech to text with a conformer model (Parakeet CTC / RNN-T / TDT, GigaAM): the model's log-mel,
// the encoder over chunks of the audio, the head's greedy decoding over the joined encoder frames,
// and segments with times from the frames where their tokens were emitted.
//
// Long audio: audio up to `chunk_seconds` is encoded in one pass (exactly what the upstream
// implementations do; 60 s by default, where attention is still a small part of an encoder pass:
// 750 frames at 8x subsampling, and every chunk border costs 2 x context_seconds of re-encoding). Longer audio is cut into chunks of `chunk_seconds` that overlap by
// `context_seconds` on each side: each chunk is encoded with its context, and only the frames of
// its own span are kept, so every kept frame saw at least `context_seconds` of audio on both
// sides (or the file's edge). The head then decodes the joined frames in one pass, so RNN-T/TDT
// state carries across chunk borders and no token is cut in two.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/conformer.h"
#include "pipeline/transcribe.h"  // Transcript, TranscribeOptions

namespace xdna {

struct ConformerChunking {
  double chunk_seconds = 60.0;   // kept span of one encoder pass
  double context_seconds = 4.0;  // extra audio each side, encoded and dropped
};

class ConformerTranscriber {
 public:
  explicit ConformerTranscriber(std::shared_ptr<const ConformerModel> model, ConformerChunking chunking = {});
  // load_conformer(path) (a .nemo archive, a GigaAM checkpoint, a transformers Parakeet directory
  // or a store directory holding one of these).
  static ConformerTranscriber load(const std::string& path);

  const ConformerModel& model() const { return *model_; }
  const ConformerChunking& chunking() const { return chunking_; }

  // 16 kHz mono samples -> transcript (language "", no temperature fallback: greedy decoding).
  // The Whisper-only options (translate, a language, a prompt, beam search, temperatures other
  // than 0) are refused with std::invalid_argument naming the option, never ignored.
  Transcript transcribe(const std::vector<float>& samples, const TranscribeOptions& options) const;

 private:
  std::shared_ptr<const ConformerModel> model_;
  ConformerChunking chunking_;
};

// Seconds one encoder frame covers: hop_length * subsampling_factor / sample_rate (80 ms for
// Parakeet and 40 ms for GigaAM).
double conformer_frame_seconds(const ConformerConfig& config);

// Tokens -> segments: a new segment after a sentence end (a token ending in . ? or !) once the
// segment is at least 2 s long, after a pause of 1 s or more between tokens, or at 30 s.
std::vector<TranscriptSegment> conformer_segments(const ConformerModel& model, const std::vector<AsrToken>& tokens);

}  // namespace xdna

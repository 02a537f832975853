// The conformer ASR models' own log-mel frontends (NeMo's AudioToMelSpectrogramPreprocessor for
// Parakeet, GigaAM's torchaudio MelSpectrogram + log clamp), configured by ConformerMelConfig.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "models/conformer.h"

namespace xdna {

// 16 kHz mono samples -> log-mel features [n_mels, frames] f32 as the model's preprocessor
// computes them. std::invalid_argument for an empty input or an unsupported config value.
Tensor conformer_log_mel(const std::vector<float>& samples, const ConformerMelConfig& mel);

}  // namespace xdna

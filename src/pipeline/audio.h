// Audio in: any file libavformat can read (WAV, FLAC, MP3, OGG/Opus, M4A ...), any sample rate and
// channel count, decoded, downmixed to mono and resampled (libswresample) to the rate a model
// wants; and Whisper's log-mel spectrogram, equal to openai-whisper's log_mel_spectrogram.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace xdna {

// Samples in [-1, 1], mono, at sample_rate Hz. Throws std::runtime_error naming the file (or
// "upload") and what is wrong: not found, not audio, no audio stream, corrupt, empty.
std::vector<float> load_audio(const std::string& path, int sample_rate = 16000);
// The same from bytes in memory (an HTTP upload); `name` is used in error messages only.
std::vector<float> decode_audio(std::string_view bytes, int sample_rate = 16000,
                                const std::string& name = "upload");

// openai-whisper's constants (whisper/audio.py).
constexpr int kWhisperSampleRate = 16000;
constexpr int kWhisperNfft = 400;
constexpr int kWhisperHop = 160;
constexpr int kWhisperChunkSeconds = 30;
constexpr int64_t kWhisperChunkSamples = 480000;  // 30 s
constexpr int64_t kWhisperChunkFrames = 3000;     // 30 s of 10 ms frames

// log_mel_spectrogram(audio, n_mels, padding): `padding` zero samples are appended, the STFT
// (periodic Hann window of 400, hop 160, centred with reflect padding) is taken, its last frame
// dropped, power spectrum times the Slaney mel filterbank (80 or 128 bins), log10 clamped at 1e-10,
// floored at (max - 8), then (x + 4) / 4. Returns [n_mels, frames] f32, frames =
// (samples + padding) / 160. Note the max is over the whole result, as upstream.
Tensor log_mel_spectrogram(const std::vector<float>& samples, int n_mels, int64_t padding = 0);

// The Slaney-style mel filterbank librosa.filters.mel(sr, n_fft, n_mels) computes, [n_mels,
// n_fft / 2 + 1] f32 (what openai-whisper ships precomputed in mel_filters.npz).
Tensor mel_filterbank(int sample_rate, int n_fft, int n_mels);

}  // namespace xdna

// GigaAM v3's log-mel frontend as the engine configures it from a v3 checkpoint (n_fft = win = 320,
// hop 160, no centring; tests/fixtures/conformer/gigaam_v3/, scripts/make_gigaam_v3_fixtures.py),
// against torchaudio's MelSpectrogram with those settings + gigaam's log clamp on 0.3 s of a chirp
// with noise. The published v3 checkpoints carry the window and filterbank in bfloat16 and gigaam
// computes with those values ("audio_log_mel_bf16"); the engine takes them from the checkpoint.
// "audio_log_mel_f32" is the same frontend with f32 window and filterbank: the engine's computed
// ones, used when a checkpoint carries none. The two references differ by up to 0.34.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/conformer.h"
#include "pipeline/conformer_features.h"
#include "weights/source.h"

using namespace xdna;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/conformer/gigaam_v3/";

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double m = 0.0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) m = std::max(m, std::abs(double(x[i]) - double(y[i])));
  return m;
}

bool is_bf16(float v) {  // exactly representable in bfloat16: the low 16 bits are zero
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return (bits & 0xffffu) == 0;
}

}  // namespace

TEST(GigaamV3Frontend, LoaderTakesTheCheckpointsBf16WindowAndFilterbank) {
  const ConformerMelConfig mel = read_conformer_checkpoint(kDir + "v3_ctc.ckpt").config.mel;
  ASSERT_EQ(mel.window_values.size(), 320u);
  ASSERT_EQ(mel.filterbank.size(), 64u * 161u);
  EXPECT_TRUE(std::all_of(mel.window_values.begin(), mel.window_values.end(), is_bf16));
  EXPECT_TRUE(std::all_of(mel.filterbank.begin(), mel.filterbank.end(), is_bf16));
  // Periodic Hann: w[80] = 0.5 - 0.5 cos(pi / 2) = 0.5 (exact in bf16); w[1] = 9.6e-5 rounds.
  EXPECT_EQ(mel.window_values[80], 0.5f);
  EXPECT_NE(mel.window_values[1], static_cast<float>(0.5 - 0.5 * std::cos(2 * M_PI / 320)));
  EXPECT_NEAR(mel.window_values[1], 0.5 - 0.5 * std::cos(2 * M_PI / 320), 1e-6);
}

TEST(GigaamV3Frontend, MatchesGigaamWithTheCheckpointsBf16Buffers) {
  const ConformerMelConfig mel = read_conformer_checkpoint(kDir + "v3_ctc.ckpt").config.mel;
  const auto ref = open_weights(kDir + "reference.safetensors");
  const std::vector<float> samples = ref->get("audio_samples").to_vector();
  const Tensor ours = conformer_log_mel(samples, mel);
  // 4800 samples, no centring: 1 + (4800 - 320) / 160 = 29 frames.
  ASSERT_EQ(ours.shape(), Shape({64, 29}));
  const double err = max_abs_diff(ours, ref->get("audio_log_mel_bf16"));
  EXPECT_LT(err, 1e-4);  // measured 1.2e-5: torch's f32 STFT against FFTW's double
  std::printf("gigaam v3 log-mel with the checkpoint's bf16 buffers: max |ours - gigaam| %.3g\n", err);
}

TEST(GigaamV3Frontend, WithoutStoredBuffersMatchesTorchaudioF32) {
  ConformerMelConfig mel = read_conformer_checkpoint(kDir + "v3_ctc.ckpt").config.mel;
  mel.window_values.clear();
  mel.filterbank.clear();
  const auto ref = open_weights(kDir + "reference.safetensors");
  const Tensor ours = conformer_log_mel(ref->get("audio_samples").to_vector(), mel);
  EXPECT_LT(max_abs_diff(ours, ref->get("audio_log_mel_f32")), 1e-3);
  EXPECT_GT(max_abs_diff(ours, ref->get("audio_log_mel_bf16")), 0.1);  // the buffers do matter
}

TEST(GigaamV3Frontend, StoredBuffersOfTheWrongSizeThrow) {
  ConformerMelConfig mel = read_conformer_checkpoint(kDir + "v3_ctc.ckpt").config.mel;
  const std::vector<float> samples(4800, 0.1f);
  ConformerMelConfig short_window = mel;
  short_window.window_values.pop_back();
  EXPECT_THROW(conformer_log_mel(samples, short_window), std::invalid_argument);
  ConformerMelConfig short_bank = mel;
  short_bank.filterbank.resize(64 * 160);
  EXPECT_THROW(conformer_log_mel(samples, short_bank), std::invalid_argument);
}

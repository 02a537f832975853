// The conformer frontends against their upstream implementations
// (scripts/make_conformer_frontend_fixtures.py): transformers' ParakeetFeatureExtractor (NeMo's
// preprocessor) at 80 and 128 mels, gigaam 0.1.0's FeatureExtractor at 64 mels, on a tone, a chirp
// of 12345 samples (not a multiple of the hop), a speech clip and a 1000-sample burst.
//
// Tolerance: the references run torch's f32 STFT, ours runs in double. f32 FFT error is relative
// to the whole frame's energy, so quiet mel bins in loud frames (the top mels of speech, e^-13
// below the frame's peak) carry up to ~3e-4 absolute error in their log; the rest agree to ~1e-5.
// We assert: at most 0.5% of values beyond 1e-4 absolute, none beyond 1e-3, and 1e-2 where the
// unnormalised energy sits within e^7 of the guard. Measured (this fixture set): max 3.1e-4,
// 28 of 93,000 values beyond 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "pipeline/conformer_features.h"

using namespace xdna;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/conformer/frontend/";

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("missing fixture " + path);
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> v(bytes / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  return v;
}

nlohmann::json manifest() {
  std::ifstream in(kDir + "frontend.json");
  return nlohmann::json::parse(in);
}

ConformerMelConfig parakeet(int n_mels) {
  ConformerMelConfig c;  // the defaults are NeMo's
  c.n_mels = n_mels;
  return c;
}

ConformerMelConfig gigaam(int n_mels) {
  ConformerMelConfig c;
  c.n_fft = 400;
  c.win_length = 400;
  c.n_mels = n_mels;
  c.preemphasis = 0.0f;
  c.window = "hann_periodic";
  c.pad_mode = "reflect";
  c.mel_norm = "none";
  c.mel_scale = "htk";
  c.log = "clamp";
  c.log_guard = 1e-9f;
  c.normalize = "none";
  c.drop_last_frame = false;
  return c;
}

void expect_matches(const std::string& set, const ConformerMelConfig& cfg) {
  const nlohmann::json m = manifest();
  int checked = 0;
  for (const auto& [name, length] : m.at("cases").items()) {
    SCOPED_TRACE(set + "." + name);
    const std::vector<float> x = read_f32(kDir + name + ".samples.f32");
    ASSERT_EQ(x.size(), length.get<size_t>());
    const std::vector<float> want = read_f32(kDir + set + "." + name + ".f32");
    const Tensor got = conformer_log_mel(x, cfg);
    ASSERT_EQ(got.shape()[0], cfg.n_mels);
    ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
    const int64_t frames = got.shape()[1];
    const int64_t hop_frames = static_cast<int64_t>(x.size()) / cfg.hop_length;
    EXPECT_EQ(frames, cfg.drop_last_frame ? hop_frames : hop_frames + 1);
    double worst = 0;
    size_t beyond = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const float g = got.data<float>()[i];
      ASSERT_TRUE(std::isfinite(g)) << i;
      const double err = std::fabs(g - want[i]);
      worst = std::max(worst, err);
      beyond += err > 1e-4;
      const bool near_guard = cfg.normalize == "none" && want[i] < std::log(cfg.log_guard) + 7.0;
      EXPECT_LE(err, near_guard ? 1e-2 : 1e-3) << "value " << i << " (mel " << i / frames << ", frame "
                                                << i % frames << "): " << g << " vs " << want[i];
    }
    EXPECT_LE(beyond, want.size() / 200) << beyond << " values beyond 1e-4";
    std::printf("%s.%s: max abs err %.2e, %zu of %zu beyond 1e-4\n", set.c_str(), name.c_str(), worst, beyond,
                want.size());
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

}  // namespace

TEST(ConformerFeatures, MatchesParakeetFeatureExtractor80) { expect_matches("parakeet80", parakeet(80)); }
TEST(ConformerFeatures, MatchesParakeetFeatureExtractor128) { expect_matches("parakeet128", parakeet(128)); }
TEST(ConformerFeatures, MatchesGigaamFeatureExtractor64) { expect_matches("gigaam64", gigaam(64)); }

TEST(ConformerFeatures, PerFeatureNormalisationGivesZeroMeanUnitStd) {
  std::vector<float> x(8000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * std::sin(0.05f * i) + 0.001f * ((i * 7919) % 13);
  const Tensor f = conformer_log_mel(x, parakeet(80));
  const int64_t frames = f.shape()[1];
  for (int m = 0; m < 80; m += 13) {
    double sum = 0, sq = 0;
    for (int64_t t = 0; t < frames; ++t) sum += f.data<float>()[m * frames + t];
    for (int64_t t = 0; t < frames; ++t) sq += std::pow(f.data<float>()[m * frames + t] - sum / frames, 2);
    EXPECT_NEAR(sum / frames, 0.0, 1e-5);
    EXPECT_NEAR(std::sqrt(sq / (frames - 1)), 1.0, 1e-3);  // std / (std + 1e-5)
  }
}

TEST(ConformerFeatures, BadInputThrowsNamingTheProblem) {
  auto throws_with = [](const std::vector<float>& x, const ConformerMelConfig& c, const std::string& what) {
    try {
      conformer_log_mel(x, c);
      ADD_FAILURE() << "no exception for " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const std::vector<float> one_second(16000, 0.1f);
  throws_with({}, parakeet(80), "no samples");
  throws_with(std::vector<float>(200, 0.1f), gigaam(64), "reflect padding needs more than 200");
  throws_with(std::vector<float>(100, 0.1f), parakeet(80), "per-feature normalisation needs 2");
  ConformerMelConfig c = parakeet(80);
  c.window = "kaiser";
  throws_with(one_second, c, "window 'kaiser'");
  c = parakeet(80);
  c.win_length = 600;
  throws_with(one_second, c, "win_length 600");
  c = parakeet(80);
  c.mel_scale = "bark";
  throws_with(one_second, c, "mel_scale 'bark'");
  c = parakeet(80);
  c.normalize = "all_features";
  throws_with(one_second, c, "normalize 'all_features'");
  c = parakeet(80);
  c.hop_length = 0;
  throws_with(one_second, c, "must be positive");
}

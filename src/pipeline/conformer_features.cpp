// The conformer models' log-mel frontends, one function driven by ConformerMelConfig:
// - NeMo's AudioToMelSpectrogramPreprocessor (Parakeet; transformers' ParakeetFeatureExtractor is
//   the reference): preemphasis, zero-padded centred STFT with a symmetric Hann window of
//   win_length inside n_fft, power spectrum, Slaney mel bank, log(x + 2^-24), per-feature
//   mean/std over the valid frames (NeMo's seq_len drops the last centred frame).
// - GigaAM's FeatureExtractor: torchaudio MelSpectrogram (reflect padding, periodic Hann, HTK mel
//   scale without area normalisation) then log(clamp(x, 1e-9, 1e9)); every frame kept.
// The STFT runs in double precision (FFTW); the references are torch's f32 STFTs. A window and
// filterbank the checkpoint stores (c.window_values, c.filterbank) replace the computed ones.
#include "pipeline/conformer_features.h"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "core/parallel.h"

namespace xdna {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("conformer_log_mel: " + what);
}

double hz_to_mel(double hz, bool htk) {
  if (htk) return 2595.0 * std::log10(1.0 + hz / 700.0);
  constexpr double kFsp = 200.0 / 3.0, kMinLogHz = 1000.0;  // Slaney: linear below 1 kHz, log above
  const double log_step = std::log(6.4) / 27.0;
  return hz >= kMinLogHz ? kMinLogHz / kFsp + std::log(hz / kMinLogHz) / log_step : hz / kFsp;
}
double mel_to_hz(double mel, bool htk) {
  if (htk) return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
  constexpr double kFsp = 200.0 / 3.0, kMinLogHz = 1000.0;
  const double log_step = std::log(6.4) / 27.0, min_log_mel = kMinLogHz / kFsp;
  return mel >= min_log_mel ? kMinLogHz * std::exp(log_step * (mel - min_log_mel)) : kFsp * mel;
}

// Triangular filters between n_mels + 2 edges evenly spaced in mel from 0 Hz to Nyquist, over the
// n_fft / 2 + 1 bins (librosa.filters.mel and torchaudio.functional.melscale_fbanks agree on
// this form); Slaney normalisation scales each triangle to area 1.
struct MelRow {
  int first = 0;
  std::vector<double> weights;
};

// A filterbank's row kept from its first to its last nonzero weight.
MelRow trimmed(const std::vector<double>& w) {
  const int bins = static_cast<int>(w.size());
  int lo = 0, hi = bins;
  while (lo < bins && w[lo] == 0.0) ++lo;
  while (hi > lo && w[hi - 1] == 0.0) --hi;
  return {lo, std::vector<double>(w.begin() + lo, w.begin() + hi)};
}

std::vector<MelRow> filterbank(const ConformerMelConfig& c) {
  const bool htk = c.mel_scale == "htk";
  const int bins = c.n_fft / 2 + 1;
  if (!c.filterbank.empty()) {  // the checkpoint's own values
    std::vector<MelRow> rows(c.n_mels);
    for (int m = 0; m < c.n_mels; ++m)
      rows[m] = trimmed(std::vector<double>(c.filterbank.begin() + static_cast<size_t>(m) * bins,
                                            c.filterbank.begin() + static_cast<size_t>(m + 1) * bins));
    return rows;
  }
  const double max_mel = hz_to_mel(c.sample_rate / 2.0, htk);
  std::vector<double> edges(c.n_mels + 2);
  for (int i = 0; i < c.n_mels + 2; ++i) edges[i] = mel_to_hz(max_mel * i / (c.n_mels + 1), htk);
  std::vector<MelRow> rows(c.n_mels);
  for (int m = 0; m < c.n_mels; ++m) {
    const double norm = c.mel_norm == "slaney" ? 2.0 / (edges[m + 2] - edges[m]) : 1.0;
    std::vector<double> w(bins);
    for (int k = 0; k < bins; ++k) {
      const double f = static_cast<double>(k) * c.sample_rate / c.n_fft;
      const double lower = (f - edges[m]) / (edges[m + 1] - edges[m]);
      const double upper = (edges[m + 2] - f) / (edges[m + 2] - edges[m + 1]);
      w[k] = std::max(0.0, std::min(lower, upper)) * norm;
    }
    rows[m] = trimmed(w);
  }
  return rows;
}

// The analysis window, win_length long, zero-padded to n_fft and centred as torch.stft does.
std::vector<double> window(const ConformerMelConfig& c) {
  std::vector<double> w(c.n_fft, 0.0);
  const int left = (c.n_fft - c.win_length) / 2;
  if (!c.window_values.empty()) {  // the checkpoint's own values
    std::copy(c.window_values.begin(), c.window_values.end(), w.begin() + left);
    return w;
  }
  const bool periodic = c.window.ends_with("_periodic");  // torch.hann_window's default
  const std::string kind = periodic ? c.window.substr(0, c.window.size() - 9) : c.window;
  const double denom = periodic ? c.win_length : std::max(1, c.win_length - 1);
  for (int i = 0; i < c.win_length; ++i) {
    const double phase = 2.0 * M_PI * i / denom;
    double v = 1.0;
    if (kind == "hann") v = 0.5 - 0.5 * std::cos(phase);
    else if (kind == "hamming") v = 0.54 - 0.46 * std::cos(phase);
    w[left + i] = v;
  }
  return w;
}

// One FFTW r2c plan per size, made under a mutex (the planner is not thread-safe; executing a
// plan on other fftw_malloc'ed arrays is).
fftw_plan plan_for(int n_fft) {
  static std::mutex mu;
  static auto* plans = new std::map<int, fftw_plan>;  // never destroyed: plans live to exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans->find(n_fft);
  if (it != plans->end()) return it->second;
  double* in = fftw_alloc_real(n_fft);
  fftw_complex* out = fftw_alloc_complex(n_fft / 2 + 1);
  fftw_plan p = fftw_plan_dft_r2c_1d(n_fft, in, out, FFTW_ESTIMATE);
  fftw_free(in);
  fftw_free(out);
  if (!p) bad("FFTW could not plan a " + std::to_string(n_fft) + "-point FFT");
  return plans->emplace(n_fft, p).first->second;
}

struct FftwDeleter {
  void operator()(void* p) const { fftw_free(p); }
};

void check(const ConformerMelConfig& c) {
  if (c.sample_rate <= 0 || c.n_fft <= 1 || c.hop_length <= 0 || c.n_mels <= 0)
    bad("sample_rate, n_fft, hop_length and n_mels must be positive");
  if (c.n_fft > (1 << 16)) bad("n_fft " + std::to_string(c.n_fft) + " is too large");
  if (c.win_length <= 0 || c.win_length > c.n_fft)
    bad("win_length " + std::to_string(c.win_length) + " is not in [1, n_fft = " + std::to_string(c.n_fft) + "]");
  const std::string w = c.window.ends_with("_periodic") ? c.window.substr(0, c.window.size() - 9) : c.window;
  if (w != "hann" && w != "hamming" && c.window != "ones")
    bad("window '" + c.window + "' is not hann, hamming (optionally _periodic) or ones");
  if (c.pad_mode != "constant" && c.pad_mode != "reflect")
    bad("pad_mode '" + c.pad_mode + "' is not constant or reflect");
  if (c.mel_norm != "slaney" && c.mel_norm != "none") bad("mel_norm '" + c.mel_norm + "' is not slaney or none");
  if (c.mel_scale != "slaney" && c.mel_scale != "htk") bad("mel_scale '" + c.mel_scale + "' is not slaney or htk");
  if (!(c.mag_power > 0.0f)) bad("mag_power must be positive");
  if (c.log != "add" && c.log != "clamp" && c.log != "none") bad("log '" + c.log + "' is not add, clamp or none");
  if (c.normalize != "per_feature" && c.normalize != "none")
    bad("normalize '" + c.normalize + "' is not per_feature or none");
  if (!std::isfinite(c.preemphasis) || !std::isfinite(c.log_guard)) bad("preemphasis and log_guard must be finite");
  if (!c.window_values.empty() && c.window_values.size() != static_cast<size_t>(c.win_length))
    bad("the given window has " + std::to_string(c.window_values.size()) + " values, not win_length = " +
        std::to_string(c.win_length));
  const size_t fb_size = static_cast<size_t>(c.n_mels) * (c.n_fft / 2 + 1);
  if (!c.filterbank.empty() && c.filterbank.size() != fb_size)
    bad("the given filterbank has " + std::to_string(c.filterbank.size()) + " values, not n_mels x (n_fft / 2 + 1) = " +
        std::to_string(fb_size));
  for (const std::vector<float>* v : {&c.window_values, &c.filterbank})
    for (float x : *v)
      if (!std::isfinite(x)) bad("the given window or filterbank has a value that is not finite");
}

}  // namespace

Tensor conformer_log_mel(const std::vector<float>& samples, const ConformerMelConfig& c) {
  check(c);
  const int64_t n = static_cast<int64_t>(samples.size());
  if (n == 0) bad("no samples");
  const int64_t half = c.center ? c.n_fft / 2 : 0;
  if (c.center && c.pad_mode == "reflect" && n <= half)  // torch's reflect padding needs more
    bad("reflect padding needs more than " + std::to_string(half) + " samples (got " + std::to_string(n) + ")");
  if (n + 2 * half < c.n_fft) bad("fewer samples than one " + std::to_string(c.n_fft) + "-point frame");
  const int64_t total_frames = 1 + (n + 2 * half - c.n_fft) / c.hop_length;
  // NeMo's seq_len, floor((n + 2 (n_fft / 2) - n_fft) / hop), excludes the last frame, which
  // upstream masks to zero: only the valid frames are returned.
  const int64_t frames = c.drop_last_frame ? total_frames - 1 : total_frames;
  if (frames < 1 || (c.normalize == "per_feature" && frames < 2))
    bad(std::to_string(n) + " samples give " + std::to_string(frames) + " frames; " +
        (c.normalize == "per_feature" ? "per-feature normalisation needs 2" : "need 1"));

  // Preemphasis keeps the first sample: y[0] = x[0], y[t] = x[t] - a x[t - 1].
  std::vector<double> x(samples.begin(), samples.end());
  if (c.preemphasis != 0.0f)
    for (int64_t t = n - 1; t > 0; --t) x[t] = samples[t] - static_cast<double>(c.preemphasis) * samples[t - 1];
  auto sample_at = [&](int64_t j) -> double {  // the padded signal
    if (j >= 0 && j < n) return x[j];
    if (c.pad_mode == "constant") return 0.0;
    if (j < 0) j = -j;
    if (j >= n) j = 2 * (n - 1) - j;
    return j >= 0 && j < n ? x[j] : 0.0;
  };

  const std::vector<MelRow> filters = filterbank(c);
  const std::vector<double> win = window(c);
  const fftw_plan plan = plan_for(c.n_fft);
  const int bins = c.n_fft / 2 + 1;
  const bool clamp = c.log == "clamp";
  const double guard = c.log_guard;

  Tensor mel = Tensor::empty({c.n_mels, frames});
  float* out = mel.data<float>();
  parallel_for(frames, 16, [&](int64_t t0, int64_t t1) {
    std::unique_ptr<double, FftwDeleter> in(fftw_alloc_real(c.n_fft));
    std::unique_ptr<fftw_complex, FftwDeleter> spec(fftw_alloc_complex(bins));
    std::vector<double> power(bins);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = t * c.hop_length - half;
      for (int i = 0; i < c.n_fft; ++i) in.get()[i] = win[i] == 0.0 ? 0.0 : sample_at(start + i) * win[i];
      fftw_execute_dft_r2c(plan, in.get(), spec.get());
      for (int k = 0; k < bins; ++k) {
        const double p = spec.get()[k][0] * spec.get()[k][0] + spec.get()[k][1] * spec.get()[k][1];
        power[k] = c.mag_power == 2.0f ? p : std::pow(std::sqrt(p), static_cast<double>(c.mag_power));
      }
      for (int m = 0; m < c.n_mels; ++m) {
        const MelRow& r = filters[m];
        double acc = 0.0;
        for (size_t k = 0; k < r.weights.size(); ++k) acc += r.weights[k] * power[r.first + k];
        if (c.log == "add") acc = std::log(acc + guard);
        else if (clamp) acc = std::log(std::clamp(acc, guard, 1e9));
        out[m * frames + t] = static_cast<float>(acc);
      }
    }
  });

  if (c.normalize == "per_feature") {  // NeMo: unbiased std over time, (x - mean) / (std + 1e-5)
    for (int m = 0; m < c.n_mels; ++m) {
      float* row = out + m * frames;
      double sum = 0.0;
      for (int64_t t = 0; t < frames; ++t) sum += row[t];
      const double mean = sum / frames;
      double sq = 0.0;
      for (int64_t t = 0; t < frames; ++t) sq += (row[t] - mean) * (row[t] - mean);
      const double denom = std::sqrt(sq / (frames - 1)) + 1e-5;
      for (int64_t t = 0; t < frames; ++t) row[t] = static_cast<float>((row[t] - mean) / denom);
    }
  }
  return mel;
}

}  // namespace xdna

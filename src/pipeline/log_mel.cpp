// Whisper's log-mel spectrogram (openai-whisper whisper/audio.py log_mel_spectrogram) and the
// Slaney mel filterbank of librosa.filters.mel. The STFT runs in double precision (FFTW): the
// reference is torch's f32 STFT, so our own rounding stays far below the 1e-4 we promise.
#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "core/parallel.h"
#include "pipeline/audio.h"

namespace xdna {
namespace {

// Slaney's mel scale as librosa implements it (htk=False): linear below 1 kHz, log above.
constexpr double kMelFsp = 200.0 / 3.0;
constexpr double kMinLogHz = 1000.0;
constexpr double kMinLogMel = kMinLogHz / kMelFsp;
const double kLogStep = std::log(6.4) / 27.0;

double hz_to_mel(double hz) {
  return hz >= kMinLogHz ? kMinLogMel + std::log(hz / kMinLogHz) / kLogStep : hz / kMelFsp;
}
double mel_to_hz(double mel) {
  return mel >= kMinLogMel ? kMinLogHz * std::exp(kLogStep * (mel - kMinLogMel)) : kMelFsp * mel;
}

// The filterbank as rows of non-zero weights: bins [first, first + weights.size()).
struct MelRow {
  int first = 0;
  std::vector<float> weights;
};

std::vector<MelRow> sparse_filterbank(int n_mels) {
  const Tensor fb = mel_filterbank(kWhisperSampleRate, kWhisperNfft, n_mels);
  const int bins = kWhisperNfft / 2 + 1;
  std::vector<MelRow> rows(n_mels);
  for (int m = 0; m < n_mels; ++m) {
    const float* w = fb.data<float>() + static_cast<int64_t>(m) * bins;
    int lo = 0, hi = bins;
    while (lo < bins && w[lo] == 0.0f) ++lo;
    while (hi > lo && w[hi - 1] == 0.0f) --hi;
    rows[m].first = lo;
    rows[m].weights.assign(w + lo, w + hi);
  }
  return rows;
}

const std::vector<MelRow>& cached_filterbank(int n_mels) {
  static std::mutex mu;
  static std::map<int, std::vector<MelRow>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(n_mels);
  if (it == cache.end()) it = cache.emplace(n_mels, sparse_filterbank(n_mels)).first;
  return it->second;  // std::map never moves its nodes
}

// One FFTW plan for the 400-point real FFT, made once under a mutex (the planner is not
// thread-safe); fftw_execute_dft_r2c on other fftw_malloc'ed arrays is.
fftw_plan stft_plan() {
  static std::mutex mu;
  static fftw_plan plan = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!plan) {
    double* in = fftw_alloc_real(kWhisperNfft);
    fftw_complex* out = fftw_alloc_complex(kWhisperNfft / 2 + 1);
    plan = fftw_plan_dft_r2c_1d(kWhisperNfft, in, out, FFTW_ESTIMATE);  // as fast as FFTW_MEASURE for n = 400 here, and deterministic
    fftw_free(in);
    fftw_free(out);
    if (!plan) throw std::runtime_error("log_mel_spectrogram: FFTW could not plan a 400-point FFT");
  }
  return plan;
}

struct FftwDeleter {
  void operator()(void* p) const { fftw_free(p); }
};

}  // namespace

Tensor mel_filterbank(int sample_rate, int n_fft, int n_mels) {
  if (sample_rate <= 0 || n_fft <= 0 || n_mels <= 0)
    throw std::invalid_argument("mel_filterbank: sample_rate, n_fft and n_mels must be positive");
  const int bins = n_fft / 2 + 1;
  // Band edges: n_mels + 2 points evenly spaced in mel from 0 Hz to Nyquist (numpy.linspace).
  const double max_mel = hz_to_mel(sample_rate / 2.0);
  std::vector<double> edges(n_mels + 2);
  for (int i = 0; i < n_mels + 2; ++i)
    edges[i] = mel_to_hz(i == n_mels + 1 ? max_mel : i * (max_mel / (n_mels + 1)));
  const double bin_hz = (sample_rate / 2.0) / (bins - 1);

  Tensor fb = Tensor::zeros({n_mels, bins});
  float* w = fb.data<float>();
  for (int m = 0; m < n_mels; ++m) {
    const double enorm = 2.0 / (edges[m + 2] - edges[m]);  // Slaney: each triangle has area 1
    for (int k = 0; k < bins; ++k) {
      const double f = k == bins - 1 ? sample_rate / 2.0 : k * bin_hz;
      const double lower = (f - edges[m]) / (edges[m + 1] - edges[m]);
      const double upper = (edges[m + 2] - f) / (edges[m + 2] - edges[m + 1]);
      // librosa stores the triangle in f32, then scales it in f64 and rounds again: we do the
      // same, which makes the result bit-identical to whisper's mel_filters.npz.
      const float tri = static_cast<float>(std::max(0.0, std::min(lower, upper)));
      w[static_cast<int64_t>(m) * bins + k] = static_cast<float>(tri * enorm);
    }
  }
  return fb;
}

Tensor log_mel_spectrogram(const std::vector<float>& samples, int n_mels, int64_t padding) {
  if (n_mels <= 0) throw std::invalid_argument("log_mel_spectrogram: n_mels must be positive");
  if (padding < 0) throw std::invalid_argument("log_mel_spectrogram: negative padding");
  constexpr int kHalf = kWhisperNfft / 2;  // centring: frame t covers samples [160 t - 200, 160 t + 200)
  constexpr int kBins = kWhisperNfft / 2 + 1;
  const int64_t n = static_cast<int64_t>(samples.size()) + padding;
  if (n <= kHalf)  // torch's reflect padding needs more than 200 samples
    throw std::invalid_argument("log_mel_spectrogram: need more than 200 samples (got " + std::to_string(n) +
                                ")");
  const int64_t frames = n / kWhisperHop;  // torch.stft gives n / 160 + 1; whisper drops the last
  const std::vector<MelRow>& filters = cached_filterbank(n_mels);
  const fftw_plan plan = stft_plan();

  // Periodic Hann window, as torch.hann_window(400).
  static const std::vector<double> window = [] {
    std::vector<double> w(kWhisperNfft);
    for (int i = 0; i < kWhisperNfft; ++i) w[i] = 0.5 - 0.5 * std::cos(2.0 * M_PI * i / kWhisperNfft);
    return w;
  }();
  const int64_t n_audio = static_cast<int64_t>(samples.size());
  auto sample_at = [&](int64_t j) -> double {  // padded signal, reflected at both ends
    if (j < 0) j = -j;
    if (j >= n) j = 2 * (n - 1) - j;
    return j < n_audio ? samples[j] : 0.0;
  };

  Tensor mel = Tensor::empty({n_mels, frames});
  float* out = mel.data<float>();
  parallel_for(frames, 32, [&](int64_t t0, int64_t t1) {
    std::unique_ptr<double, FftwDeleter> in(fftw_alloc_real(kWhisperNfft));
    std::unique_ptr<fftw_complex, FftwDeleter> spec(fftw_alloc_complex(kBins));
    double power[kBins];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = t * kWhisperHop - kHalf;
      double* x = in.get();
      if (start >= 0 && start + kWhisperNfft <= n_audio) {
        const float* s = samples.data() + start;
        for (int i = 0; i < kWhisperNfft; ++i) x[i] = s[i] * window[i];
      } else {
        for (int i = 0; i < kWhisperNfft; ++i) x[i] = sample_at(start + i) * window[i];
      }
      fftw_execute_dft_r2c(plan, x, spec.get());
      for (int k = 0; k < kBins; ++k) power[k] = spec.get()[k][0] * spec.get()[k][0] + spec.get()[k][1] * spec.get()[k][1];
      for (int m = 0; m < n_mels; ++m) {
        const MelRow& r = filters[m];
        double acc = 0.0;
        for (size_t k = 0; k < r.weights.size(); ++k) acc += r.weights[k] * power[r.first + k];
        out[m * frames + t] = std::log10(std::max(static_cast<float>(acc), 1e-10f));  // f32 log: 3x faster
      }
    }
  });

  const int64_t total = static_cast<int64_t>(n_mels) * frames;
  const float floor = *std::max_element(out, out + total) - 8.0f;
  for (int64_t i = 0; i < total; ++i) out[i] = (std::max(out[i], floor) + 4.0f) / 4.0f;
  return mel;
}

}  // namespace xdna

// The audio decoder entry (what an upload to /v1/audio/* goes through) on arbitrary bytes: it
// must throw (std::exception) or return samples in [-1, 1], never crash, over-read or leak.
// libav* itself is not instrumented; our demux/decode/resample loop around it is.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "pipeline/audio.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const std::vector<float> samples =
        xdna::decode_audio(std::string_view(reinterpret_cast<const char*>(data), size), xdna::kWhisperSampleRate, "fuzz");
    for (float x : samples)
      if (!std::isfinite(x)) {  // a decoder may clip, but NaN/inf would poison the mel spectrogram
        std::fprintf(stderr, "decode_audio returned a non-finite sample\n");
        std::abort();
      }
  } catch (const std::exception&) {
  }
  return 0;
}

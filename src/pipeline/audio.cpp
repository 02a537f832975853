// Audio decoding with FFmpeg's libraries: demux (libavformat) -> decode (libavcodec) -> downmix by
// averaging channels + resample to the wanted rate + convert to f32 (one libswresample context).
// The mel spectrogram lives in log_mel.cpp.
#include "pipeline/audio.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
}

namespace xdna {
namespace {

// Below this libavformat's own probe is guessing (it warns "misdetection possible"): random bytes
// get "mp3 with score 1", so we call such input not audio.
constexpr int kMinProbeScore = AVPROBE_SCORE_RETRY;
// No real audio is sampled this slowly (telephony is 8 kHz); a lower rate is a corrupt or hostile
// header, and resampling it to 16 kHz would turn a small upload into gigabytes of samples
// (a 1 Hz WAV: x16000).
constexpr int kMinSampleRate = 2000;

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw std::runtime_error("audio '" + name + "': " + what);
}

// Bad input is reported by our exceptions, never on stderr; and no single FFmpeg allocation may
// exceed 256 MiB (its default cap is INT_MAX: a malformed header made a demuxer ask for 2 GB), so
// such a file fails to open with an error instead of exhausting memory.
void quiet_ffmpeg() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_level(AV_LOG_QUIET);
    av_max_alloc(size_t{256} << 20);
  });
}

struct FormatCloser {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};
struct CodecCloser {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct SwrCloser {
  void operator()(SwrContext* s) const { swr_free(&s); }
};
struct PacketCloser {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameCloser {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct IoCloser {
  void operator()(AVIOContext* io) const {
    if (io) av_freep(&io->buffer);
    avio_context_free(&io);
  }
};
using FormatPtr = std::unique_ptr<AVFormatContext, FormatCloser>;
using CodecPtr = std::unique_ptr<AVCodecContext, CodecCloser>;
using SwrPtr = std::unique_ptr<SwrContext, SwrCloser>;

// An in-memory file for a custom AVIOContext (uploads): read and seek callbacks.
struct MemoryFile {
  const uint8_t* data;
  int64_t size;
  int64_t pos = 0;

  static int read(void* opaque, uint8_t* buf, int n) {
    auto* m = static_cast<MemoryFile*>(opaque);
    const int64_t left = m->size - m->pos;
    if (left <= 0) return AVERROR_EOF;
    const int take = static_cast<int>(std::min<int64_t>(n, left));
    std::memcpy(buf, m->data + m->pos, take);
    m->pos += take;
    return take;
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* m = static_cast<MemoryFile*>(opaque);
    if (whence & AVSEEK_SIZE) return m->size;
    int64_t to;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET: to = offset; break;
      case SEEK_CUR: to = m->pos + offset; break;
      case SEEK_END: to = m->size + offset; break;
      default: return AVERROR(EINVAL);
    }
    if (to < 0 || to > m->size) return AVERROR(EINVAL);
    m->pos = to;
    return to;
  }
};

// Converter from the decoder's frames to mono f32 at `rate`. Rebuilt when a stream changes its
// sample format, rate or channel layout midway (chained Ogg, some broadcasts).
struct Resampler {
  SwrPtr swr;
  AVSampleFormat in_format = AV_SAMPLE_FMT_NONE;
  int in_rate = 0;
  AVChannelLayout in_layout{};

  ~Resampler() { av_channel_layout_uninit(&in_layout); }

  bool matches(const AVFrame* f) const {
    return swr && f->format == in_format && f->sample_rate == in_rate &&
           av_channel_layout_compare(&f->ch_layout, &in_layout) == 0;
  }

  // soxr (very high quality) when libswresample was built with it (Debian's is), else swr's own
  // engine with a long filter.
  void open(const AVFrame* f, int rate, const std::string& name) {
    av_channel_layout_uninit(&in_layout);
    if (av_channel_layout_copy(&in_layout, &f->ch_layout) < 0) fail(name, "out of memory");
    in_format = static_cast<AVSampleFormat>(f->format);
    in_rate = f->sample_rate;
    const int channels = in_layout.nb_channels;
    if (channels <= 0 || in_rate <= 0) fail(name, "corrupt audio stream (no channels or sample rate)");
    if (in_rate < kMinSampleRate)
      fail(name, "sample rate " + std::to_string(in_rate) + " Hz is too low to be audio (at least " +
                     std::to_string(kMinSampleRate) + " Hz)");
    for (int engine : {SWR_ENGINE_SOXR, SWR_ENGINE_SWR}) {
      SwrContext* raw = nullptr;
      AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
      if (swr_alloc_set_opts2(&raw, &mono, AV_SAMPLE_FMT_FLT, rate, &in_layout, in_format, in_rate, 0,
                              nullptr) < 0)
        fail(name, "unsupported channel layout or sample format");
      SwrPtr s(raw);
      av_opt_set_int(s.get(), "resampler", engine, 0);
      // Mix and resample in f32: libswresample would otherwise work in s16 for s16 input.
      av_opt_set_sample_fmt(s.get(), "internal_sample_fmt", AV_SAMPLE_FMT_FLTP, 0);
      if (engine == SWR_ENGINE_SOXR) {
        av_opt_set_int(s.get(), "precision", 28, 0);  // soxr "very high quality"
      } else {
        av_opt_set_int(s.get(), "filter_size", 64, 0);
        av_opt_set_int(s.get(), "phase_shift", 12, 0);
      }
      // Mono is the plain average of the channels (libswresample's default matrix weights the
      // channels by their position instead).
      std::vector<double> matrix(channels, 1.0 / channels);
      if (swr_set_matrix(s.get(), matrix.data(), channels) < 0) fail(name, "cannot downmix channels");
      if (swr_init(s.get()) >= 0) {
        swr = std::move(s);
        return;
      }
    }
    fail(name, "cannot initialise the resampler");
  }

  // Converts `f` (or flushes the delayed tail when f is null) and appends to `out`.
  void convert(const AVFrame* f, std::vector<float>& out, const std::string& name) {
    const int in_samples = f ? f->nb_samples : 0;
    const int room = swr_get_out_samples(swr.get(), in_samples);
    if (room < 0) fail(name, "resampler error");
    const size_t at = out.size();
    out.resize(at + room);
    uint8_t* dst = reinterpret_cast<uint8_t*>(out.data() + at);
    const int n = swr_convert(swr.get(), &dst, room, f ? const_cast<const uint8_t**>(f->extended_data) : nullptr,
                              in_samples);
    if (n < 0) fail(name, "resampler error: " + av_error(n));
    out.resize(at + n);
  }

  void flush(std::vector<float>& out, const std::string& name) {
    if (swr) convert(nullptr, out, name);
  }
};

// Decodes the best audio stream of an opened container.
std::vector<float> decode_opened(AVFormatContext* fmt, int rate, const std::string& name) {
  if (fmt->probe_score < kMinProbeScore) fail(name, "not an audio file (unrecognised format)");
  int err = avformat_find_stream_info(fmt, nullptr);
  if (err < 0) fail(name, "corrupt or unreadable file: " + av_error(err));
  const AVCodec* codec = nullptr;
  const int stream = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
  if (stream == AVERROR_STREAM_NOT_FOUND) fail(name, "no audio stream");
  if (stream < 0 || !codec) fail(name, "unsupported audio codec");
  for (unsigned i = 0; i < fmt->nb_streams; ++i)  // skip demuxing cover art, video, subtitles
    if (static_cast<int>(i) != stream) fmt->streams[i]->discard = AVDISCARD_ALL;

  CodecPtr dec(avcodec_alloc_context3(codec));
  if (!dec) fail(name, "out of memory");
  if ((err = avcodec_parameters_to_context(dec.get(), fmt->streams[stream]->codecpar)) < 0 ||
      (err = avcodec_open2(dec.get(), codec, nullptr)) < 0)
    fail(name, "cannot open the " + std::string(codec->name) + " decoder: " + av_error(err));

  std::unique_ptr<AVPacket, PacketCloser> pkt(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameCloser> frame(av_frame_alloc());
  if (!pkt || !frame) fail(name, "out of memory");
  Resampler rs;
  std::vector<float> out;
  int bad_packets = 0;
  std::string last_error;

  auto drain = [&] {  // receive every frame the decoder has ready
    while ((err = avcodec_receive_frame(dec.get(), frame.get())) >= 0) {
      if (frame->nb_samples > 0) {
        if (!rs.matches(frame.get())) {
          rs.flush(out, name);
          rs.open(frame.get(), rate, name);
        }
        rs.convert(frame.get(), out, name);
      }
      av_frame_unref(frame.get());
    }
    if (err != AVERROR(EAGAIN) && err != AVERROR_EOF) {  // a corrupt frame: skip it, as ffmpeg does
      ++bad_packets;
      last_error = av_error(err);
    }
  };

  // A read error (truncation, garbage) ends the input like end of file: we keep what decoded.
  while (av_read_frame(fmt, pkt.get()) >= 0) {
    if (pkt->stream_index == stream) {
      err = avcodec_send_packet(dec.get(), pkt.get());
      if (err < 0 && err != AVERROR(EAGAIN)) {
        ++bad_packets;
        last_error = av_error(err);
      }
      drain();
    }
    av_packet_unref(pkt.get());
  }
  avcodec_send_packet(dec.get(), nullptr);  // flush the decoder's delayed frames
  drain();
  rs.flush(out, name);
  if (out.empty()) {
    if (bad_packets > 0) fail(name, "corrupt audio, nothing decodable (" + last_error + ")");
    fail(name, "no audio samples");
  }
  return out;
}

// avformat_open_input failed on bytes that exist: an OS error, or data no demuxer accepts (which
// some report as EINVAL: random bytes probed as MP3 with the lowest score).
[[noreturn]] void open_failed(const std::string& name, int err) {
  if (err == AVERROR(EACCES) || err == AVERROR(EPERM) || err == AVERROR(ENOMEM) || err == AVERROR(EIO))
    fail(name, "cannot open: " + av_error(err));
  fail(name, "not an audio file (unrecognised format: " + av_error(err) + ")");
}

void check_rate(int rate, const std::string& name) {
  if (rate < 1000 || rate > 768000) fail(name, "bad output sample rate " + std::to_string(rate));
}

}  // namespace

std::vector<float> load_audio(const std::string& path, int sample_rate) {
  quiet_ffmpeg();
  check_rate(sample_rate, path);
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) fail(path, "file not found");
  if (std::filesystem::is_directory(status)) fail(path, "is a directory, not an audio file");
  if (std::filesystem::is_regular_file(status) && std::filesystem::file_size(path, ec) == 0)
    fail(path, "empty file");

  AVFormatContext* raw = nullptr;
  // "file:" so that a name with a colon is never taken for a network protocol.
  const int err = avformat_open_input(&raw, ("file:" + path).c_str(), nullptr, nullptr);
  if (err < 0) open_failed(path, err);
  FormatPtr fmt(raw);
  return decode_opened(fmt.get(), sample_rate, path);
}

std::vector<float> decode_audio(std::string_view bytes, int sample_rate, const std::string& name) {
  quiet_ffmpeg();
  check_rate(sample_rate, name);
  if (bytes.empty()) fail(name, "empty file");
  MemoryFile mem{reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int64_t>(bytes.size())};

  constexpr int kIoBuffer = 1 << 16;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBuffer));
  if (!buffer) fail(name, "out of memory");
  std::unique_ptr<AVIOContext, IoCloser> io(
      avio_alloc_context(buffer, kIoBuffer, 0, &mem, &MemoryFile::read, nullptr, &MemoryFile::seek));
  if (!io) {
    av_free(buffer);
    fail(name, "out of memory");
  }
  AVFormatContext* raw = avformat_alloc_context();
  if (!raw) fail(name, "out of memory");
  raw->pb = io.get();
  raw->flags |= AVFMT_FLAG_CUSTOM_IO;
  const int err = avformat_open_input(&raw, nullptr, nullptr, nullptr);  // frees raw on failure
  if (err < 0) open_failed(name, err);
  FormatPtr fmt(raw);  // closed before `io` (declared after it)
  return decode_opened(fmt.get(), sample_rate, name);
}

}  // namespace xdna

#include "pipeline/upscale_video.h"

#include <signal.h>

#include <chrono>
#include <stdexcept>

namespace xdna {

namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int) { g_stop = 1; }

bool stopped(const VideoOptions& o) { return o.stop && *o.stop != 0; }

std::string size_text(VideoFrameSize s) { return std::to_string(s.width) + "x" + std::to_string(s.height); }

}  // namespace

VideoFrameSize parse_frame_size(const std::string& text) {
  const size_t x = text.find('x');
  const auto side = [&](const std::string& s) {
    if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return 0;
    return std::stoi(s);
  };
  VideoFrameSize f;
  if (x != std::string::npos) f = {side(text.substr(0, x)), side(text.substr(x + 1))};
  if (f.width <= 0 || f.height <= 0 || f.width > 16384 || f.height > 16384)
    throw std::invalid_argument("video frame size '" + text + "' is not WIDTHxHEIGHT (e.g. 320x240, sides 1..16384)");
  return f;
}

VideoStats upscale_video(const Upscaler& up, VideoFrameSize size, std::istream& in, std::ostream& out,
                         const VideoOptions& opts) {
  if (size.width <= 0 || size.height <= 0) throw std::invalid_argument("upscale video: empty frame size");
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  VideoStats st;
  Image frame;  // reused: one input frame in memory at a time
  frame.width = size.width;
  frame.height = size.height;
  frame.rgb.resize(size.bytes());
  const auto frame_bytes = static_cast<std::streamsize>(size.bytes());
  while (!stopped(opts)) {
    in.read(reinterpret_cast<char*>(frame.rgb.data()), frame_bytes);
    const std::streamsize got = in.gcount();
    if (stopped(opts)) break;  // Ctrl-C during the read: the partial frame is not an error
    if (got == 0 && in.eof()) break;
    if (got < frame_bytes) {
      if (in.eof())
        throw std::runtime_error("upscale video: the input ends with a partial frame: " + std::to_string(got) + " of " +
                                 std::to_string(frame_bytes) + " bytes (frame " + std::to_string(st.frames + 1) +
                                 " of " + size_text(size) + " rgb24; is --video the size the decoder writes?)");
      throw std::runtime_error("upscale video: reading frame " + std::to_string(st.frames + 1) + " failed after " +
                               std::to_string(got) + " bytes");
    }
    const auto m0 = clock::now();
    const Image big = upscale_image(up, frame, opts.upscale);
    st.model_seconds += std::chrono::duration<double>(clock::now() - m0).count();
    out.write(reinterpret_cast<const char*>(big.rgb.data()), static_cast<std::streamsize>(big.rgb.size()));
    out.flush();  // the next process gets each frame as soon as it is ready
    if (!out)
      throw std::runtime_error("upscale video: writing frame " + std::to_string(st.frames + 1) + " (" +
                               std::to_string(big.rgb.size()) + " bytes) failed: the output was closed?");
    ++st.frames;
    st.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    if (opts.on_frame) opts.on_frame(st);
  }
  st.interrupted = stopped(opts);
  st.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return st;
}

const volatile std::sig_atomic_t* install_stop_on_interrupt() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read blocked on the pipe returns and the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return &g_stop;
}

}  // namespace xdna

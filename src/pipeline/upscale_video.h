// Video super-resolution on raw frames, for a pipe between two ffmpeg processes:
//
//   ffmpeg -i in.mp4 -f rawvideo -pix_fmt rgb24 - |
//     npu upscale --video 320x240 - - |
//     ffmpeg -f rawvideo -pix_fmt rgb24 -s 640x480 -r 25 -i - out.mp4
//
// Frames are packed rgb24 (width * height * 3 bytes, rows top to bottom, no padding), read one at
// a time and upscaled by upscale_image (tiled as the image path is), so memory stays one input
// frame, one output frame and one tile's activations whatever the length of the video. Every output
// frame is byte for byte what upscale_image gives for that frame as an image.
#pragma once
#include <csignal>
#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <string>

#include "pipeline/upscale.h"

namespace xdna {

struct VideoFrameSize {
  int width = 0, height = 0;
  size_t bytes() const { return size_t(width) * height * 3; }  // rgb24
};

// "320x240" -> {320, 240}. Throws std::invalid_argument naming the text when it is not WxH with
// positive sides (at most 16384 each).
VideoFrameSize parse_frame_size(const std::string& text);

struct VideoStats {
  int64_t frames = 0;
  double seconds = 0;        // wall time of the whole run, reads and writes included
  double model_seconds = 0;  // of which in upscale_image
  bool interrupted = false;  // stopped by `stop` (Ctrl-C) before the end of the input
  double fps() const { return seconds > 0 ? double(frames) / seconds : 0.0; }
};

struct VideoOptions {
  UpscaleOptions upscale;  // tile size per frame
  // Checked between frames (and when a read is interrupted): nonzero stops the run cleanly after
  // the frames already written. install_stop_on_interrupt gives one that Ctrl-C sets.
  const volatile std::sig_atomic_t* stop = nullptr;
  // Called after each frame is written (progress reports).
  std::function<void(const VideoStats&)> on_frame;
};

// Upscales every frame of `in` into `out` until the end of `in`. A final partial frame is an error
// (std::runtime_error naming its byte count and the frame size expected), as is a failed write
// (e.g. the downstream process exited); the frames before it have been written and flushed.
VideoStats upscale_video(const Upscaler& up, VideoFrameSize size, std::istream& in, std::ostream& out,
                         const VideoOptions& opts = {});

// For a command-line run: SIGINT and SIGTERM set the returned flag instead of killing the process
// (without SA_RESTART, so a blocked read returns), and SIGPIPE is ignored so a closed output is a
// write error rather than a silent death. Call once.
const volatile std::sig_atomic_t* install_stop_on_interrupt();

}  // namespace xdna

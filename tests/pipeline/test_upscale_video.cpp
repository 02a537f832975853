// The raw-frame video path of `npu upscale`: each output frame equals the image path's output on
// that frame, partial final frames are errors naming their byte count, a closed output is an error,
// and a stop flag ends the run cleanly between frames. In-memory streams, the tiny TF.js fixture.
#include <gtest/gtest.h>

#include <csignal>
#include <random>
#include <sstream>

#include "pipeline/upscale_video.h"

using namespace xdna;

namespace {

Upscaler tiny_upscaler() {
  Upscaler up;
  up.net = load_upscaler(XDNA_FIXTURE_DIR "/tfjs/tiny/model.json");
  up.input_max = up.output_max = 1;  // the fixture takes 0..1 pixels (as the CLI test's --range 1)
  return up;
}

// Frame `i` of a synthetic clip: a moving gradient plus noise, different in every frame.
Image synthetic_frame(int w, int h, int i) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(size_t(w) * h * 3);
  std::mt19937 rng(100 + i);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        img.rgb[(size_t(y) * w + x) * 3 + c] = static_cast<uint8_t>((x * 5 + y * 3 + i * 40 + c * 70 + int(rng() % 30)) % 256);
  return img;
}

std::string bytes_of(const Image& img) { return std::string(img.rgb.begin(), img.rgb.end()); }

}  // namespace

TEST(UpscaleVideo, EachFrameEqualsTheImagePath) {
  const Upscaler up = tiny_upscaler();
  const VideoFrameSize size{37, 21};
  VideoOptions opts;
  opts.upscale.tile = 16;  // several tiles per frame, as a large frame would be
  std::string input, expected;
  for (int i = 0; i < 4; ++i) {
    const Image f = synthetic_frame(size.width, size.height, i);
    input += bytes_of(f);
    expected += bytes_of(upscale_image(up, f, opts.upscale));
  }
  std::istringstream in(input);
  std::ostringstream out;
  int64_t seen = 0;
  opts.on_frame = [&](const VideoStats& s) { seen = s.frames; };
  const VideoStats st = upscale_video(up, size, in, out, opts);
  EXPECT_EQ(st.frames, 4);
  EXPECT_EQ(seen, 4);
  EXPECT_FALSE(st.interrupted);
  ASSERT_EQ(out.str().size(), size_t(4) * size.bytes() * up.net.scale * up.net.scale);
  EXPECT_TRUE(out.str() == expected) << "video output differs from upscale_image on the same frames";
  EXPECT_NE(out.str().substr(0, expected.size() / 4), out.str().substr(expected.size() / 4, expected.size() / 4));
}

TEST(UpscaleVideo, EmptyInputIsZeroFrames) {
  std::istringstream in("");
  std::ostringstream out;
  const VideoStats st = upscale_video(tiny_upscaler(), {8, 8}, in, out);
  EXPECT_EQ(st.frames, 0);
  EXPECT_TRUE(out.str().empty());
}

TEST(UpscaleVideo, PartialFinalFrameIsAnErrorNamingTheByteCount) {
  const Upscaler up = tiny_upscaler();
  const VideoFrameSize size{10, 6};  // 180 bytes a frame
  std::istringstream in(bytes_of(synthetic_frame(10, 6, 0)) + std::string(100, '\x40'));
  std::ostringstream out;
  try {
    upscale_video(up, size, in, out);
    FAIL() << "no error for a partial frame";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("100 of 180 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("frame 2"), std::string::npos) << e.what();
  }
  // The complete first frame was written before the error.
  EXPECT_EQ(out.str().size(), size.bytes() * up.net.scale * up.net.scale);
}

TEST(UpscaleVideo, ClosedOutputIsAnError) {
  std::istringstream in(bytes_of(synthetic_frame(8, 8, 0)));
  std::ostringstream out;
  out.setstate(std::ios::badbit);  // as a write to a closed pipe leaves it
  EXPECT_THROW(upscale_video(tiny_upscaler(), {8, 8}, in, out), std::runtime_error);
}

TEST(UpscaleVideo, StopFlagEndsBetweenFrames) {
  const Upscaler up = tiny_upscaler();
  std::string input;
  for (int i = 0; i < 5; ++i) input += bytes_of(synthetic_frame(8, 8, i));
  std::istringstream in(input);
  std::ostringstream out;
  volatile std::sig_atomic_t stop = 0;
  VideoOptions opts;
  opts.stop = &stop;
  opts.on_frame = [&](const VideoStats& s) {
    if (s.frames == 2) stop = 1;  // as Ctrl-C during frame 2
  };
  const VideoStats st = upscale_video(up, {8, 8}, in, out, opts);
  EXPECT_EQ(st.frames, 2);
  EXPECT_TRUE(st.interrupted);
  EXPECT_EQ(out.str().size(), 2 * size_t(8 * 8 * 3) * up.net.scale * up.net.scale);
}

TEST(UpscaleVideo, ParsesFrameSizes) {
  const VideoFrameSize s = parse_frame_size("320x240");
  EXPECT_EQ(s.width, 320);
  EXPECT_EQ(s.height, 240);
  EXPECT_EQ(s.bytes(), size_t(320) * 240 * 3);
  for (const char* bad : {"", "320", "x240", "320x", "0x240", "320x-2", "320x240x3", "abcxdef", "99999x2"})
    EXPECT_THROW(parse_frame_size(bad), std::invalid_argument) << bad;
}

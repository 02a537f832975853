// `npu upscale --video WxH - -` between two real ffmpeg processes: a short lavfi testsrc clip is
// decoded to raw rgb24, upscaled by the tiny TF.js fixture model, and encoded losslessly (FFV1 in
// bgr0: left to itself ffmpeg picks a YUV format for FFV1, which is not lossless from RGB);
// decoding the result gives exactly the image path's output on each frame. Also: a partial final
// frame exits 1 naming its byte count, and Ctrl-C (SIGINT) stops cleanly. Skipped when ffmpeg is
// not installed (scripts/install-deps.sh installs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cli_test_util.h"
#include "pipeline/upscale.h"

namespace fs = std::filesystem;
using xdna::test::run_shell;

namespace {

const std::string kNpu = XDNA_NPU_BINARY;
const std::string kModel = " --model " + std::string(XDNA_FIXTURE_DIR) + "/tfjs/tiny/model.json --scale 2 --range 1";
constexpr int kW = 48, kH = 32, kFrames = 4;

bool have_ffmpeg() { return run_shell("ffmpeg -version > /dev/null 2>&1").rc == 0; }

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("xdna_cli_upscale_video_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The testsrc clip as raw rgb24 frames (what the pipeline's first ffmpeg writes).
const std::string kSource = "ffmpeg -v error -f lavfi -i testsrc=size=" + std::to_string(kW) + "x" + std::to_string(kH) +
                            ":rate=5 -frames:v " + std::to_string(kFrames) + " -f rawvideo -pix_fmt rgb24 -";

}  // namespace

TEST(CliUpscaleVideo, FfmpegPipelineEqualsImagePathPerFrame) {
  if (!have_ffmpeg()) GTEST_SKIP() << "ffmpeg is not installed (scripts/install-deps.sh installs it)";
  TempDir t;
  const std::string size = std::to_string(kW) + "x" + std::to_string(kH);
  const std::string big = std::to_string(2 * kW) + "x" + std::to_string(2 * kH);
  const auto r = run_shell(kSource + " | " + kNpu + " upscale --video " + size + kModel + " --tile 16 - - 2> " +
                           t / "err.txt" + " | ffmpeg -v error -f rawvideo -pix_fmt rgb24 -s " + big +
                           " -r 5 -i - -c:v ffv1 -pix_fmt bgr0 -y " + t / "out.mkv" + " 2>&1");
  const std::string err = read_file(t / "err.txt");
  ASSERT_EQ(r.rc, 0) << r.out << err;
  EXPECT_NE(err.find(std::to_string(kFrames) + " frames " + size + " -> " + big), std::string::npos) << err;
  EXPECT_NE(err.find("frames/s"), std::string::npos) << err;

  // Decode the upscaled clip back to raw frames; compare with upscale_image on each source frame.
  ASSERT_EQ(run_shell(kSource + " > " + t / "in.rgb").rc, 0);
  ASSERT_EQ(run_shell("ffmpeg -v error -i " + t / "out.mkv" + " -f rawvideo -pix_fmt rgb24 - > " + t / "out.rgb").rc, 0);
  const std::string in = read_file(t / "in.rgb"), out = read_file(t / "out.rgb");
  const size_t in_frame = size_t(kW) * kH * 3, out_frame = in_frame * 4;
  ASSERT_EQ(in.size(), kFrames * in_frame);
  ASSERT_EQ(out.size(), kFrames * out_frame);
  xdna::Upscaler up;
  up.net = xdna::load_upscaler(std::string(XDNA_FIXTURE_DIR) + "/tfjs/tiny/model.json");
  up.input_max = up.output_max = 1;
  for (int i = 0; i < kFrames; ++i) {
    xdna::Image f;
    f.width = kW;
    f.height = kH;
    f.rgb.assign(in.begin() + i * in_frame, in.begin() + (i + 1) * in_frame);
    const xdna::Image want = xdna::upscale_image(up, f);
    size_t differ = 0;
    for (size_t k = 0; k < out_frame; ++k) differ += want.rgb[k] != static_cast<uint8_t>(out[i * out_frame + k]);
    EXPECT_EQ(differ, 0u) << "bytes of frame " << i << " that differ from upscale_image on it";
  }
}

TEST(CliUpscaleVideo, PartialFrameExitsOneNamingTheBytes) {
  TempDir t;
  {
    std::ofstream f(t / "short.rgb", std::ios::binary);
    f << std::string(8 * 8 * 3 + 50, '\x20');  // one 8x8 frame and 50 bytes of the next
  }
  const auto r = run_shell(kNpu + " upscale --video 8x8" + kModel + " " + t / "short.rgb" + " " + t / "o.rgb" + " 2>&1");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("50 of 192 bytes"), std::string::npos) << r.out;
  EXPECT_EQ(fs::file_size(t / "o.rgb"), 4u * 8 * 8 * 3);  // the whole frame before it was written
}

TEST(CliUpscaleVideo, BadOptionsExitOne) {
  const auto size = run_shell(kNpu + " upscale --video 8by8" + kModel + " - - < /dev/null 2>&1");
  EXPECT_EQ(size.rc, 1);
  EXPECT_NE(size.out.find("8by8"), std::string::npos) << size.out;
  const auto fmt = run_shell(kNpu + " upscale --video 8x8 --pix-fmt yuv420p" + kModel + " - - < /dev/null 2>&1");
  EXPECT_EQ(fmt.rc, 1);
  EXPECT_NE(fmt.out.find("yuv420p"), std::string::npos) << fmt.out;
}

// The pipe stays open (sleep) while the command waits for a frame; SIGINT must end it with 130
// and the summary line, not a kill by the signal.
TEST(CliUpscaleVideo, InterruptStopsCleanly) {
  const auto r = run_shell("sleep 4 | timeout --preserve-status -s INT 2.5 " + kNpu + " upscale --video 8x8" + kModel +
                           " - - 2>&1 >/dev/null");
  EXPECT_EQ(r.rc, 130) << r.out;
  EXPECT_NE(r.out.find("0 frames 8x8 -> 16x16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("interrupted"), std::string::npos) << r.out;
}

// Whisper on [npu-sim, host]: the LibriVox MP3 of tests/fixtures/audio transcribed by
// whisper-tiny.en from the model store with the NPU-placed ops run in AIE2P numerics (bf16
// operands, f32 accumulation) and the rest on the host. The text must survive the bf16 numerics
// and the run report must say where each op ran. Skipped without whisper-tiny.en in the store.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <string>

#include "../encoder_test_util.h"
#include "host/host_backend.h"
#include "models/model_store.h"
#include "npu/sim_backend.h"
#include "pipeline/audio.h"
#include "pipeline/transcribe.h"

namespace xdna {
namespace {

namespace fs = std::filesystem;
const std::string kClip = std::string(XDNA_FIXTURE_DIR) + "/audio/librivox_0870.mp3";
constexpr const char* kText =
    "and mr john dashwood had then leisure to consider how much there might be prudently in his "
    "power to do for them";

std::string normalise(const std::string& text) {
  std::string out;
  for (char c : text) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '\'') out += l;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

TEST(TranscribeNpuSim, TinyEnTextAndPlacement) {
#if XDNA_UNDER_ASAN
  GTEST_SKIP() << "skipped under AddressSanitizer (39M-parameter model: too slow instrumented)";
#endif
  const std::string dir = default_store_dir() + "/whisper-tiny.en";
  if (!fs::exists(dir + "/tokenizer.json"))
    GTEST_SKIP() << "no " << dir << " (npu model pull whisper-tiny.en --precision keep)";
  const Transcriber t = Transcriber::load(dir);
  npu::NpuSimBackend sim;
  HostBackend host;
  TranscribeOptions o;
  o.backends = {&sim, &host};
  o.beam_size = 1;  // greedy keeps the modelled run short; beam search takes the same op paths
  const Transcript r = t.transcribe(load_audio(kClip), o);
  std::printf("npu-sim text: %s\n%s%s", r.text.c_str(), r.report.summary().c_str(), sim.cost().text().c_str());
  EXPECT_EQ(normalise(r.text), kText);
  EXPECT_EQ(r.language, "en");
  EXPECT_EQ(r.windows, 1);

  // Every matmul (encoder and decoder projections, MLPs) on the modelled NPU; what it has no
  // design for (attention, the convolution stem, embeddings, ...) on the host, marked fallback.
  int sim_matmul = 0, host_ops = 0, sim_ops = 0, sim_cross_kv = 0;
  for (const OpRecord& op : r.report.ops) {
    const bool on_sim = op.backend == "npu-sim (modelled)";
    EXPECT_EQ(op.fallback, !on_sim) << op.node;
    if (on_sim) {
      ++sim_ops;
      sim_matmul += op.op == OpKind::MatMul;
      sim_cross_kv += op.node.find("encoder_attn.k") != std::string::npos ||
                      op.node.find("encoder_attn.v") != std::string::npos;
    } else {
      EXPECT_EQ(op.backend, "host") << op.node;
      EXPECT_NE(op.op, OpKind::MatMul) << op.node << " fell back to the host";
      ++host_ops;
    }
  }
  // tiny.en: 4 encoder layers x (q, k, v, out, fc1, fc2) + 4 decoder layers x cross K, V (once
  // per window) + 4 x (self q, k, v, out, cross q, out, fc1, fc2) + the logits projection.
  EXPECT_EQ(sim_matmul, 4 * 6 + 4 * 2 + 4 * 8 + 1);
  EXPECT_EQ(sim_cross_kv, 4 * 2);
  EXPECT_GT(host_ops, 0);
  EXPECT_GT(r.report.fallbacks(), 0);
  EXPECT_GT(sim.cost().run.dispatches, sim_ops);  // the report covers one encode and one decode call
}

}  // namespace
}  // namespace xdna

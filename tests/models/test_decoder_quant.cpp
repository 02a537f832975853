// A GGUF laid out like llama.cpp's Gemma 3 Q4_K_M (q, k, gate, up in q5_0; v in q8_0): the decoder
// fuses q|k|v into one q8_0 matrix (q and k widened) and gate|up into one q5_0 matrix. Against the same values
// dequantized to f32 (separate matrices), prefill and decode must agree to the int8 rounding of x
// (per block of 32) in the quantized GEMM (prefill, AVX-512 VNNI; elsewhere it dequantizes the
// weights and only f32 rounding is left) and GEMVs (decode).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/decoder.h"
#include "models/decoder_spec.h"
#include "weights/gguf.h"

namespace xdna {
namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/decoders/gemma3/";

Decoder load(const std::string& file) {
  auto g = std::make_shared<GgufFile>(kDir + file);
  return Decoder(decoder_spec_from_gguf(*g), g);
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

void expect_close(const Tensor& got, const Tensor& want, float rel, const std::string& what) {
  const auto g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  const float tol = rel * max_abs(w);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol) << what << " at " << i;
}

TEST(DecoderQuant, FusedQ5Q8MatchesDequantizedF32) {
  const Decoder quant = load("model-q5q8.gguf"), f32 = load("model-q5q8-f32.gguf");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back(3 + (i * 37) % 120);
  DecoderState sq = quant.new_state(64), sf = f32.new_state(64);
  DecoderStep q = quant.forward(prompt, sq, /*all_logits=*/true);
  DecoderStep f = f32.forward(prompt, sf, /*all_logits=*/true);
  expect_close(q.logits, f.logits, 3e-2f, "prefill");  // observed: ~3e-3 of max|logit|
  for (int j = 0; j < 8; ++j) {
    const int32_t id = 3 + (j * 53) % 120;
    q = quant.forward({id}, sq);
    f = f32.forward({id}, sf);
    expect_close(q.logits, f.logits, 3e-2f, "decode step " + std::to_string(j));
  }
  // The fused weights are really in use: the quantized graph has one matmul for q|k|v and one
  // for gate|up.
  bool qkv = false, gate_up = false;
  for (const auto& op : q.report.ops) {
    qkv |= op.node == "L0.qkv";
    gate_up |= op.node == "L0.gate_up";
  }
  EXPECT_TRUE(qkv);
  EXPECT_TRUE(gate_up);
}

}  // namespace
}  // namespace xdna

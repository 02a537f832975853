// A half-precision KV cache on the tiny fixture decoders (tests/fixtures/decoders): f16 and bf16
// caches against the f32 cache over a 20-token prefill (the GEMM attention path) and 12 greedy
// decode steps: logits within a stated tolerance, greedy tokens unchanged (f16); the cache size
// and the KV budget use the real element size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/decoder.h"
#include "decoder_test_util.h"
#include "models/decoder_spec.h"
#include "weights/gguf.h"
#include "weights/source.h"

using namespace xdna;

namespace {

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the prefill's last row, then every decode step's
};

// A 20-token prompt, then `steps` greedy tokens; or, with `forced`, those tokens (so both caches
// see the same inputs and only the cache type differs).
Trace trace(const Decoder& d, int steps, const std::vector<int32_t>* forced = nullptr) {
  const int64_t V = d.spec().vocab_size;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < 20; ++i) ids.push_back(static_cast<int32_t>((i * 13 + 5) % V));
  DecoderState st = d.new_state(64);
  DecoderStep s = d.forward(ids, st);
  Trace r;
  for (int j = 0; j <= steps; ++j) {
    const float* row = s.logits.data<float>() + (s.logits.dim(0) - 1) * V;
    r.logits.emplace_back(row, row + V);
    if (j == steps) break;
    const int32_t next = forced ? (*forced)[j] : static_cast<int32_t>(std::max_element(row, row + V) - row);
    r.tokens.push_back(next);
    s = d.forward({next}, st);
  }
  return r;
}

struct Case {
  std::string model, file;
};

class DecoderKvHalf : public ::testing::TestWithParam<Case> {};

// Tolerance: |logit difference| <= 2e-3 (f16) / 2e-2 (bf16) times the f32 run's largest |logit|.
// f16 keeps 11 significant bits (relative rounding 2^-11 = 4.9e-4), bf16 8 bits (2^-8 = 3.9e-3);
// worst measured on these fixtures: 5.5e-4 (f16) / 7.6e-3 (bf16), so the bounds leave 3.6x / 2.6x.
TEST_P(DecoderKvHalf, LogitsWithinToleranceAndGreedyTokensUnchanged) {
  const auto d = mtest::load_fixture_decoder(GetParam().model, GetParam().file);
  ASSERT_EQ(d->kv_dtype(), DType::F32);
  const Trace ref = trace(*d, 12);
  float scale = 0;
  for (const auto& row : ref.logits)
    for (float x : row) scale = std::max(scale, std::abs(x));
  for (DType dt : {DType::F16, DType::BF16}) {
    d->set_kv_dtype(dt);
    const Trace got = trace(*d, 12, &ref.tokens);
    float worst = 0;
    for (size_t j = 0; j < ref.logits.size(); ++j)
      for (size_t i = 0; i < ref.logits[j].size(); ++i)
        worst = std::max(worst, std::abs(got.logits[j][i] - ref.logits[j][i]));
    const float tol = (dt == DType::F16 ? 2e-3f : 2e-2f) * scale;
    std::printf("%s %s: max |logit diff| %.3g = %.3g of the largest |logit|\n", GetParam().model.c_str(),
                std::string(dtype_name(dt)).c_str(), worst, worst / scale);
    EXPECT_LE(worst, tol) << dtype_name(dt) << ": max |logit diff| " << worst << " (largest |logit| " << scale << ")";
    EXPECT_GT(worst, 0.0f) << dtype_name(dt) << ": the cache type made no difference at all";
    if (dt == DType::F16) {
      EXPECT_EQ(trace(*d, 12).tokens, ref.tokens) << "greedy tokens changed with an f16 cache";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderKvHalf,
                         ::testing::Values(Case{"llama", "model.gguf"}, Case{"llama3", "model.safetensors"},
                                           Case{"qwen3", "model.gguf"}, Case{"gemma3", "model.gguf"}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.file;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

TEST(DecoderKvHalfBudget, CacheBytesAndBudgetUseTheElementSize) {
  const auto d = mtest::load_fixture_decoder("qwen3", "model.gguf");
  const uint64_t f32 = d->kv_cache_bytes(10);
  d->set_kv_dtype(DType::F16);
  EXPECT_EQ(d->kv_cache_bytes(10) * 2, f32);
  EXPECT_EQ(d->new_state(0, f32).context_length(), std::min<int64_t>(20, d->spec().max_positions));
  const DecoderState st = d->new_state(12);
  EXPECT_EQ(st.cache.dtype(), DType::F16);
  EXPECT_EQ(static_cast<uint64_t>(st.cache.key_storage(0).nbytes() * 2 * st.cache.layers()), d->kv_cache_bytes(12));
  d->set_kv_dtype(DType::BF16);
  EXPECT_EQ(d->kv_cache_bytes(10) * 2, f32);
  try {
    d->set_kv_dtype(DType::Q8_0);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("f32, f16 or bf16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d->kv_dtype(), DType::BF16);
}

}  // namespace

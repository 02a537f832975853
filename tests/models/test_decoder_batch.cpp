// Decoder::forward_batch (continuous batching of decode steps) against Decoder::forward run one
// sequence at a time, on the tiny fixture decoders of every family (tests/fixtures/decoders):
// sequences at different positions (gemma3's past its 16-token sliding window), joining and
// leaving the batch between steps, batches of 1 to 6 (6 runs its matmuls as 4 + 2 rows), with
// f32 and f16 KV caches. The tolerance is zero: every row must be bit-identical to the logits of
// the sequence run alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/decoder.h"
#include "decoder_test_util.h"
#include "models/decoder_spec.h"
#include "weights/gguf.h"
#include "weights/source.h"

using namespace xdna;

namespace {

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// A prompt of `len` ids, different for each seed.
std::vector<int32_t> prompt(int64_t len, int seed, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < len; ++i) ids.push_back(static_cast<int32_t>((seed * 37 + i * 11 + 3) % vocab));
  return ids;
}

// One sequence run alone: its prompt, the greedy tokens it then decodes, and the logits of each
// decode step (step j ran tokens[j] and gave logits[j]).
struct Alone {
  std::vector<int32_t> prompt, tokens;
  std::vector<std::vector<float>> logits;
};

Alone run_alone(const Decoder& d, std::vector<int32_t> ids, int steps) {
  Alone a;
  a.prompt = ids;
  DecoderState st = d.new_state(128);
  DecoderStep s = d.forward(ids, st);
  const int64_t V = s.logits.dim(1);
  for (int j = 0; j < steps; ++j) {
    a.tokens.push_back(argmax(s.logits.data<float>() + (s.logits.dim(0) - 1) * V, V));
    s = d.forward({a.tokens.back()}, st);
    a.logits.emplace_back(s.logits.data<float>(), s.logits.data<float>() + V);
  }
  return a;
}

struct Case {
  std::string model, file;
};

class DecoderBatch : public ::testing::TestWithParam<Case> {};

// Six sequences with prompts of 3 to 40 tokens. In each batched step, sequence i takes part when
// it has joined (sequence i joins at step i) and has steps left (lengths differ), so the batch
// grows, shrinks and mixes positions; every row must equal that sequence's alone logits exactly.
TEST_P(DecoderBatch, RowsAreBitIdenticalToOneAtATime) {
  const auto d = mtest::load_fixture_decoder(GetParam().model, GetParam().file);
  // With the f32 cache (the default) and with a half-precision one (--kv-type f16).
  for (DType kv : {DType::F32, DType::F16}) {
    SCOPED_TRACE(std::string("kv cache ") + std::string(dtype_name(kv)));
    d->set_kv_dtype(kv);
    const int64_t V = d->spec().vocab_size;
    const std::vector<int64_t> lengths = {3, 9, 17, 25, 30, 40};
    const std::vector<int> steps = {10, 7, 12, 6, 9, 11};
    const int n = static_cast<int>(lengths.size());
    std::vector<Alone> alone;
    for (int i = 0; i < n; ++i) alone.push_back(run_alone(*d, prompt(lengths[i], i, V), steps[i]));

    std::vector<DecoderState> states;
    for (int i = 0; i < n; ++i) {
      states.push_back(d->new_state(128));
      d->forward(alone[i].prompt, states[i]);
    }
    std::vector<int> done(n, 0);  // decode steps each sequence has run
    std::vector<size_t> batch_sizes;
    int compared = 0;
    for (int step = 0; step < 20; ++step) {
      std::vector<int32_t> ids;
      std::vector<DecoderState*> batch;
      std::vector<int> who;
      for (int i = 0; i < n; ++i)
        if (step >= i && done[i] < steps[i]) {
          ids.push_back(alone[i].tokens[done[i]]);
          batch.push_back(&states[i]);
          who.push_back(i);
        }
      if (batch.empty()) break;
      batch_sizes.push_back(batch.size());
      const DecoderStep s = d->forward_batch(ids, batch);
      ASSERT_EQ(s.logits.shape(), (Shape{static_cast<int64_t>(batch.size()), V}));
      for (size_t r = 0; r < who.size(); ++r) {
        const int i = who[r];
        const float* got = s.logits.data<float>() + r * V;
        const std::vector<float>& want = alone[i].logits[done[i]];
        float max_diff = 0;
        for (int64_t j = 0; j < V; ++j) max_diff = std::max(max_diff, std::abs(got[j] - want[j]));
        EXPECT_EQ(std::memcmp(got, want.data(), V * sizeof(float)), 0)
            << "sequence " << i << " decode step " << done[i] << " in a batch of " << who.size()
            << ": max |diff| " << max_diff;
        EXPECT_EQ(states[i].position, lengths[i] + done[i] + 1);
        ++done[i];
        ++compared;
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(done[i], steps[i]) << "sequence " << i;
    EXPECT_EQ(compared, 10 + 7 + 12 + 6 + 9 + 11);
    // The schedule did exercise single rows, small batches and a batch past 4 rows.
    EXPECT_EQ(*std::min_element(batch_sizes.begin(), batch_sizes.end()), 1u);
    EXPECT_EQ(*std::max_element(batch_sizes.begin(), batch_sizes.end()), 6u);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderBatch,
                         ::testing::Values(Case{"llama", "model.safetensors"}, Case{"llama", "model.gguf"},
                                           Case{"llama3", "model.safetensors"}, Case{"qwen3", "model.safetensors"},
                                           Case{"qwen3", "model.gguf"}, Case{"gemma3", "model.safetensors"},
                                           Case{"gemma3", "model.gguf"},
                                           // q5_0/q8_0 blocks: the fused q|k|v and gate|up path
                                           Case{"gemma3", "model-q5q8.gguf"}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.file;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

TEST(DecoderBatchErrors, BadInputThrowsAndNoStateAdvances) {
  const auto d = mtest::load_fixture_decoder("llama", "model.safetensors");
  DecoderState a = d->new_state(8), b = d->new_state(8);
  d->forward({1, 2, 3}, a);
  d->forward({4, 5, 6, 7, 8, 9, 10, 11}, b);  // b is full
  const auto message = [&](const std::vector<int32_t>& ids, const std::vector<DecoderState*>& states) {
    try {
      d->forward_batch(ids, states);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no exception)");
  };
  EXPECT_NE(message({}, {}).find("no sequences"), std::string::npos);
  EXPECT_NE(message({1, 2}, {&a}).find("2 token ids for 1 sequence states"), std::string::npos);
  EXPECT_NE(message({1}, {nullptr}).find("sequence 0: no state"), std::string::npos);
  EXPECT_NE(message({1, 2}, {&a, &a}).find("sequence 1: the same state as sequence 0"), std::string::npos);
  EXPECT_NE(message({1, 999}, {&a, &a}).find("sequence 1"), std::string::npos);
  const std::string overflow = message({1, 2}, {&a, &b});
  EXPECT_NE(overflow.find("sequence 1: 8 cached + 1 new tokens = 9 exceeds the context length of 8"),
            std::string::npos) << overflow;
  DecoderState c = d->new_state(8);
  d->forward({1}, c);
  EXPECT_NE(message({1, 128}, {&a, &c}).find("sequence 1: token id 128 outside the vocabulary"), std::string::npos);
  EXPECT_EQ(a.position, 3);
  EXPECT_EQ(a.cache.length(0), 3);
  EXPECT_EQ(c.position, 1);
  // A state of another model's shape.
  const auto g = mtest::load_fixture_decoder("gemma3", "model.safetensors");
  DecoderState other = g->new_state(8);
  EXPECT_NE(message({1, 1}, {&a, &other}).find("sequence 1: the state's KV cache was not made for this model"),
            std::string::npos);
}

}  // namespace

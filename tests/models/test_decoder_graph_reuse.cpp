// A decode step (one token of one sequence) runs the graph its DecoderState kept from the previous
// step, with the new token and position bound, instead of building it again. On the tiny fixture
// decoders of every family (gemma3's decode runs past its 16-token sliding window), with f32 and
// f16 KV caches: the kept graph gives logits bit-identical to a graph built fresh for the step,
// across positions and around multi-token chunks; it is kept (same object) from step to step, and
// rebuilt when the state has moved to another address or runs on another decoder.
#include <gtest/gtest.h>

#include <algorithm>
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

int32_t last_argmax(const Tensor& logits) {
  const int64_t V = logits.dim(1);
  const float* row = logits.data<float>() + (logits.dim(0) - 1) * V;
  return static_cast<int32_t>(std::max_element(row, row + V) - row);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.numel() * sizeof(float)) == 0;
}

struct Case {
  std::string model, file;
};

class DecoderGraphReuse : public ::testing::TestWithParam<Case> {};

TEST_P(DecoderGraphReuse, KeptGraphMatchesAFreshBuild) {
  const auto d = mtest::load_fixture_decoder(GetParam().model, GetParam().file);
  const int64_t V = d->spec().vocab_size;
  for (DType kv : {DType::F32, DType::F16}) {
    SCOPED_TRACE(std::string("kv cache ") + std::string(dtype_name(kv)));
    d->set_kv_dtype(kv);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 5; ++i) prompt.push_back(static_cast<int32_t>((i * 13 + 7) % V));
    DecoderState kept = d->new_state(64), fresh = d->new_state(64);
    DecoderStep a = d->forward(prompt, kept), b = d->forward(prompt, fresh);
    ASSERT_TRUE(same_bits(a.logits, b.logits));
    EXPECT_EQ(kept.decode_graph, nullptr);  // a prompt of several tokens keeps no graph
    const DecodeGraph* graph = nullptr;
    for (int step = 0; step < 30; ++step) {
      if (step == 12) {  // a chunk of three tokens between decode steps
        const std::vector<int32_t> chunk = {1, static_cast<int32_t>(V - 1), 2};
        a = d->forward(chunk, kept);
        b = d->forward(chunk, fresh);
        ASSERT_TRUE(same_bits(a.logits, b.logits)) << "chunk";
      }
      const int32_t token = last_argmax(a.logits);
      fresh.decode_graph.reset();  // built anew for this step
      a = d->forward({token}, kept);
      b = d->forward({token}, fresh);
      ASSERT_TRUE(same_bits(a.logits, b.logits)) << "decode step " << step << " at position " << kept.position;
      ASSERT_EQ(kept.position, fresh.position);
      if (step == 0) graph = kept.decode_graph.get();
      ASSERT_NE(graph, nullptr);
      EXPECT_EQ(kept.decode_graph.get(), graph) << "the kept graph was rebuilt at step " << step;
    }
    // Moved to another address: built again for the new one, same logits.
    DecoderState moved = std::move(kept);
    const int32_t token = last_argmax(a.logits);
    a = d->forward({token}, moved);
    b = d->forward({token}, fresh);
    EXPECT_TRUE(same_bits(a.logits, b.logits));
    EXPECT_NE(moved.decode_graph.get(), graph);
    // Another decoder (its own weights) builds its own graph for the state.
    const auto other = mtest::load_fixture_decoder(GetParam().model, GetParam().file);
    other->set_kv_dtype(kv);
    const DecodeGraph* before = moved.decode_graph.get();
    other->forward({token}, moved);
    EXPECT_NE(moved.decode_graph.get(), before);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderGraphReuse,
                         ::testing::Values(Case{"llama", "model.safetensors"}, Case{"llama3", "model.gguf"},
                                           Case{"qwen3", "model.gguf"}, Case{"gemma3", "model.safetensors"},
                                           Case{"gemma3", "model-q5q8.gguf"}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.file;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

}  // namespace

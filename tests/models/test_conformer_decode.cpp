// Greedy CTC / RNN-T / TDT decoding of the conformer ASR heads against the upstream decoders on
// tiny random heads and fixed encoder outputs (tests/fixtures/conformer/heads/, written by
// scripts/make_transducer_fixtures.py): transformers' Parakeet CTC / RNN-T / TDT generate(), NeMo's
// TDT max-symbols rule, and gigaam's RNNTGreedyDecoding. Token ids, frames and TDT durations must
// be identical.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/conformer.h"
#include "weights/source.h"

using namespace xdna;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/conformer/heads/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

struct Case {
  ConformerConfig config;
  std::unique_ptr<WeightSource> weights;
  Tensor encoded;
  nlohmann::json json;
};

Case load_case(const std::string& name) {
  Case c;
  c.json = read_json(kDir + name + ".json");
  const nlohmann::json& j = c.json["config"];
  c.config.head = j["head"];
  c.config.d_model = j["d_model"];
  c.config.vocab_size = j["vocab_size"];
  c.config.pred_hidden = j.value("pred_hidden", int64_t{0});
  c.config.pred_layers = j.value("pred_layers", int64_t{0});
  c.config.joint_hidden = j.value("joint_hidden", int64_t{0});
  c.config.durations = j.value("durations", std::vector<int64_t>{});
  c.config.max_symbols_per_step = j.value("max_symbols_per_step", int64_t{10});
  c.weights = open_weights(kDir + name + ".safetensors");
  c.encoded = Tensor::from_vector({c.json["frames"].get<int64_t>(), c.config.d_model},
                                  c.json["encoded"].get<std::vector<float>>());
  return c;
}

std::string show(const std::vector<AsrToken>& tokens) {
  std::string s;
  for (const AsrToken& t : tokens)
    s += "(" + std::to_string(t.id) + "@" + std::to_string(t.frame) + "+" + std::to_string(t.duration) + ")";
  return s;
}

std::vector<AsrToken> expected(const nlohmann::json& j) {
  std::vector<AsrToken> out;
  for (const auto& t : j["tokens"])
    out.push_back({t["id"].get<int32_t>(), t["frame"].get<int64_t>(), t["duration"].get<int64_t>()});
  return out;
}

void expect_tokens(const std::string& name) {
  Case c = load_case(name);
  const std::vector<AsrToken> want = expected(c.json);
  ASSERT_GE(want.size(), 6u) << name << ": the fixture should emit several tokens";
  const std::vector<AsrToken> got = transducer_greedy(c.config, *c.weights, c.encoded);
  EXPECT_EQ(show(got), show(want)) << name;
}

// A fixture's tensors in memory, some under other names (other checkpoint layouts).
class RenamedSource final : public WeightSource {
 public:
  RenamedSource(const WeightSource& src, const std::map<std::string, std::string>& rename) {
    for (const TensorInfo& t : src.tensors()) {
      TensorInfo info = t;
      if (auto it = rename.find(t.name); it != rename.end()) info.name = it->second;
      infos_.push_back(info);
      data_[info.name] = src.get(t.name).clone();
    }
  }
  std::string format() const override { return "memory"; }
  std::string path() const override { return "<memory>"; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Tensor get(const std::string& name) const override {
    auto it = data_.find(name);
    if (it == data_.end()) throw std::runtime_error("<memory>: no tensor '" + name + "'");
    return it->second;
  }
  nlohmann::json metadata() const override { return nlohmann::json::object(); }

 private:
  std::vector<TensorInfo> infos_;
  std::map<std::string, Tensor> data_;
};

}  // namespace

TEST(ConformerDecode, NemoJointWithoutDropoutLayer) {
  // NeMo models configured without joint dropout name the output layer joint_net.1.
  Case c = load_case("parakeet_tdt");
  const RenamedSource renamed(*c.weights,
                              {{"joint.joint_net.2.weight", "joint.joint_net.1.weight"},
                               {"joint.joint_net.2.bias", "joint.joint_net.1.bias"}});
  EXPECT_EQ(show(transducer_greedy(c.config, renamed, c.encoded)), show(expected(c.json)));
}

TEST(ConformerDecode, ParakeetRnntMatchesTransformers) { expect_tokens("parakeet_rnnt"); }

TEST(ConformerDecode, ParakeetTdtMatchesTransformers) { expect_tokens("parakeet_tdt"); }

TEST(ConformerDecode, TdtMaxSymbolsFollowsNemo) { expect_tokens("parakeet_tdt_maxsym"); }

TEST(ConformerDecode, GigaamRnntMatchesGigaam) { expect_tokens("gigaam_rnnt"); }

TEST(ConformerDecode, FixturesExerciseTheRules) {
  // Several tokens on one frame, the max-symbols guard and (TDT) several duration classes.
  for (const char* name : {"parakeet_rnnt", "gigaam_rnnt", "parakeet_tdt", "parakeet_tdt_maxsym"}) {
    Case c = load_case(name);
    std::map<int64_t, int64_t> per_frame;
    std::map<int64_t, int> durations;
    for (const AsrToken& t : expected(c.json)) {
      ++per_frame[t.frame];
      ++durations[t.duration];
    }
    int64_t most = 0;
    for (auto [frame, n] : per_frame) most = std::max(most, n);
    EXPECT_GE(most, 2) << name;
    if (c.config.head == "rnnt") {
      EXPECT_EQ(most, c.config.max_symbols_per_step) << name;
    }
    if (c.config.head == "tdt") {
      EXPECT_GE(durations.size(), 2u) << name;
    }
  }
}

TEST(ConformerDecode, LoadedHeadDecodesRepeatedly) {
  Case c = load_case("parakeet_tdt");
  const TransducerHead head = load_transducer_head(c.config, *c.weights);
  const std::vector<AsrToken> a = transducer_greedy(head, c.encoded);
  const std::vector<AsrToken> b = transducer_greedy(head, c.encoded);
  EXPECT_EQ(show(a), show(b));
  EXPECT_EQ(show(a), show(expected(c.json)));
  EXPECT_TRUE(transducer_greedy(head, Tensor::zeros({0, c.config.d_model})).empty());
}

TEST(ConformerDecode, CtcMatchesTransformers) {
  const nlohmann::json j = read_json(kDir + "parakeet_ctc.json");
  const int64_t T = j["frames"], C = j["config"]["vocab_size"].get<int64_t>() + 1;
  const Tensor logits = Tensor::from_vector({T, C}, j["logits"].get<std::vector<float>>());
  const std::vector<AsrToken> got = ctc_greedy(logits, C - 1);
  EXPECT_EQ(show(got), show(expected(j)));
  // The fixture has a merged repeat and a blank-separated repeat.
  const auto ids = j["frame_ids"].get<std::vector<int>>();
  bool merged = false, split = false;
  for (size_t t = 1; t < ids.size(); ++t) {
    merged |= ids[t] == ids[t - 1] && ids[t] != C - 1;
    split |= t + 1 < ids.size() && ids[t] == C - 1 && ids[t - 1] == ids[t + 1] && ids[t + 1] != C - 1;
  }
  EXPECT_TRUE(merged && split);
}

TEST(ConformerDecode, CtcCollapse) {
  // frames: a a _ a b b _  (blank = 2)  -> a@0 a@3 b@4
  const std::vector<int> labels = {0, 0, 2, 0, 1, 1, 2};
  std::vector<float> lp(labels.size() * 3, -5.0f);
  for (size_t t = 0; t < labels.size(); ++t) lp[t * 3 + labels[t]] = -0.1f;
  const auto got = ctc_greedy(Tensor::from_vector({7, 3}, lp), 2);
  EXPECT_EQ(show(got), "(0@0+0)(0@3+0)(1@4+0)");
  EXPECT_THROW(ctc_greedy(Tensor::from_vector({7, 3}, lp), 3), std::invalid_argument);
  EXPECT_THROW(ctc_greedy(Tensor::zeros({21}), 0), std::invalid_argument);
}

TEST(ConformerDecode, DetokenizeSentencePieceAndChars) {
  const std::vector<std::string> sp = {"\xE2\x96\x81hel", "lo", "\xE2\x96\x81world", "<pad>", "!"};
  EXPECT_EQ(detokenize(sp, {{0, 0, 0}, {1, 0, 0}, {3, 1, 0}, {2, 1, 0}, {4, 2, 0}}), "hello world!");
  EXPECT_EQ(detokenize(sp, {}), "");
  EXPECT_THROW(detokenize(sp, {{5, 0, 0}}), std::invalid_argument);  // the blank id is no piece

  const nlohmann::json j = read_json(kDir + "gigaam_rnnt.json");  // gigaam's character vocabulary
  EXPECT_EQ(detokenize(j["vocabulary"].get<std::vector<std::string>>(), expected(j)), j["text"].get<std::string>());
}

TEST(ConformerDecode, BadInputsThrowClearErrors) {
  Case c = load_case("parakeet_rnnt");
  // Encoder output of the wrong width.
  try {
    transducer_greedy(c.config, *c.weights, Tensor::zeros({4, c.config.d_model + 1}));
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[frames, 16]"), std::string::npos) << e.what();
  }
  // A CTC config handed to the transducer decoder.
  ConformerConfig ctc = c.config;
  ctc.head = "ctc";
  try {
    transducer_greedy(ctc, *c.weights, c.encoded);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"ctc\""), std::string::npos) << e.what();
  }
  // A missing head weight: more LSTM layers than the checkpoint has.
  ConformerConfig deeper = c.config;
  deeper.pred_layers = 3;
  try {
    load_transducer_head(deeper, *c.weights);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.prediction.dec_rnn.lstm.weight_ih_l2"), std::string::npos)
        << e.what();
  }
  // A mis-shaped one: the config's vocabulary disagrees with the embedding.
  ConformerConfig wider = c.config;
  wider.vocab_size += 1;
  try {
    load_transducer_head(wider, *c.weights);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.prediction.embed.weight"), std::string::npos) << e.what();
  }
  // TDT without durations; a zero symbol budget.
  ConformerConfig tdt = c.config;
  tdt.head = "tdt";
  EXPECT_THROW(load_transducer_head(tdt, *c.weights), std::invalid_argument);
  ConformerConfig zero = c.config;
  zero.max_symbols_per_step = 0;
  EXPECT_THROW(load_transducer_head(zero, *c.weights), std::invalid_argument);
}

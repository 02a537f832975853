// GigaAM v3 checkpoints (tests/fixtures/conformer/gigaam_v3/, scripts/make_gigaam_v3_fixtures.py):
// tiny random-init models in v3's published .ckpt layout (conv1d subsampling, layer-norm conv
// module, bf16 preprocessor buffers), a character CTC model and an e2e-style RNN-T model with a
// SentencePiece tokenizer beside it. References: gigaam 0.1.0's ConformerEncoder with v3's two new
// modules (written in the script from the published code's description), CTCHead, RNNTHead and
// greedy decoders. Encoder error: max|ours - ref| / max|ref|, bound 1e-4; tokens identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/conformer.h"
#include "weights/source.h"

#include "models_test_util.h"

using namespace xdna;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/conformer/gigaam_v3/";

nlohmann::json reference() {
  std::ifstream f(kDir + "reference.json");
  return nlohmann::json::parse(f);
}

using mtest::rel_err;

void expect_tokens(const std::vector<AsrToken>& got, const nlohmann::json& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i]["id"].get<int32_t>()) << "token " << i;
    EXPECT_EQ(got[i].frame, want[i]["frame"].get<int64_t>()) << "token " << i;
  }
}

nlohmann::json gigaam_v3_cfg() {
  return {{"encoder",
           {{"feat_in", 64}, {"n_layers", 2}, {"d_model", 16}, {"n_heads", 2}, {"subsampling", "conv1d"},
            {"subs_kernel_size", 5}, {"conv_norm_type", "layer_norm"}, {"conv_kernel_size", 5}}},
          {"preprocessor", {{"features", 64}, {"n_fft", 320}, {"win_length", 320}, {"hop_length", 160}, {"center", false}}},
          {"head", {{"num_classes", 34}}}};
}

std::string config_error(const nlohmann::json& cfg) {
  try {
    conformer_config_from_gigaam(cfg, "cfg");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GigaamV3, ReadsThePublishedCheckpointLayout) {
  const ConformerCheckpoint ck = read_conformer_checkpoint(kDir + "v3_ctc.ckpt");
  const ConformerConfig& c = ck.config;
  EXPECT_EQ(ck.format, "gigaam");
  EXPECT_EQ(c.subsampling, "conv1d");
  EXPECT_EQ(c.subsampling_kernel, 5);
  EXPECT_EQ(c.subsampling_factor, 4);
  EXPECT_EQ(c.subsampling_channels, c.d_model);
  EXPECT_EQ(c.conv_norm, "layer_norm");
  EXPECT_EQ(c.conv_kernel, 5);
  EXPECT_EQ(c.self_attention, "rotary");
  EXPECT_FALSE(c.xscaling);
  EXPECT_EQ(c.head, "ctc");
  EXPECT_EQ(c.vocab_size, 33);
  EXPECT_EQ(ck.vocabulary.front(), " ");
  // v3's frontend: 20 ms windows without centring.
  EXPECT_EQ(c.mel.n_fft, 320);
  EXPECT_EQ(c.mel.win_length, 320);
  EXPECT_EQ(c.mel.hop_length, 160);
  EXPECT_FALSE(c.mel.center);
  EXPECT_EQ(c.mel.n_mels, 64);
  EXPECT_EQ(c.mel.window, "hann_periodic");
  EXPECT_EQ(c.mel.log, "clamp");
  // conv1d subsampling has no output linear; the bf16 preprocessor buffers are not model weights.
  EXPECT_TRUE(ck.weights->contains("encoder.pre_encode.conv.0.weight"));
  EXPECT_TRUE(ck.weights->contains("encoder.layers.0.conv.batch_norm.weight"));
  EXPECT_FALSE(ck.weights->contains("encoder.pre_encode.out.weight"));
  EXPECT_FALSE(ck.weights->contains("encoder.layers.0.conv.batch_norm.running_mean"));
  for (const TensorInfo& t : ck.weights->tensors()) EXPECT_NE(t.name.rfind("preprocessor.", 0), 0u) << t.name;
}

TEST(GigaamV3, CtcEncoderAndTokensMatchUpstream) {
  const auto model = load_conformer(kDir + "v3_ctc.ckpt");
  const auto ref = open_weights(kDir + "reference.safetensors");
  const nlohmann::json want = reference()["ctc"];
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    const Tensor features = ref->get("features_" + std::to_string(i));
    const Tensor encoded = model->encode(features);
    EXPECT_EQ(encoded.dim(0), model->config().encoded_frames(features.dim(1)));
    const double err = rel_err(encoded, ref->get("ctc_encoded_" + std::to_string(i)));
    EXPECT_LT(err, 1e-4);
    std::printf("gigaam v3 ctc input %d: encoder relative max error %.3g\n", i, err);
    const Tensor lp = model->ctc_log_probs(encoded);
    EXPECT_LT(rel_err(lp, ref->get("ctc_log_probs_" + std::to_string(i))), 1e-4);
    const std::vector<AsrToken> tokens = ctc_greedy(lp, model->config().vocab_size);
    expect_tokens(tokens, want[i]["tokens"]);
    EXPECT_EQ(detokenize(*model, tokens), want[i]["text"].get<std::string>());
  }
}

TEST(GigaamV3, E2eRnntTokensMatchUpstream) {
  const auto model = load_conformer(kDir + "v3_e2e_rnnt.ckpt");  // + v3_e2e_rnnt_tokenizer.model beside it
  const auto ref = open_weights(kDir + "reference.safetensors");
  const nlohmann::json all = reference();
  EXPECT_EQ(model->config().head, "rnnt");
  EXPECT_EQ(model->config().max_symbols_per_step, 3);
  EXPECT_EQ(model->vocabulary(), all["rnnt_vocabulary"].get<std::vector<std::string>>());
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    const Tensor encoded = model->encode(ref->get("features_" + std::to_string(i)));
    EXPECT_LT(rel_err(encoded, ref->get("rnnt_encoded_" + std::to_string(i))), 1e-4);
    const std::vector<AsrToken> tokens = transducer_greedy(*model, encoded);
    expect_tokens(tokens, all["rnnt"][i]["tokens"]);
    EXPECT_EQ(detokenize(*model, tokens), all["rnnt"][i]["text"].get<std::string>());
  }
}

TEST(GigaamV3, ConfigOptionsAreCheckedByName) {
  nlohmann::json cfg = gigaam_v3_cfg();
  EXPECT_EQ(config_error(cfg), "");
  cfg["encoder"]["subsampling"] = "dw_striding";
  EXPECT_NE(config_error(cfg).find("cfg.encoder.subsampling"), std::string::npos) << config_error(cfg);
  cfg = gigaam_v3_cfg();
  cfg["encoder"]["conv_norm_type"] = "group_norm";
  EXPECT_NE(config_error(cfg).find("cfg.encoder.conv_norm_type"), std::string::npos) << config_error(cfg);
  cfg = gigaam_v3_cfg();
  cfg["encoder"]["subs_kernel_size"] = 4;
  EXPECT_NE(config_error(cfg).find("cfg.encoder.subs_kernel_size"), std::string::npos) << config_error(cfg);
  cfg = gigaam_v3_cfg();
  cfg["preprocessor"]["center"] = "no";
  EXPECT_NE(config_error(cfg).find("cfg.preprocessor.center"), std::string::npos) << config_error(cfg);
  cfg = gigaam_v3_cfg();
  cfg["preprocessor"]["n_fft"] = 256;  // shorter than the window
  EXPECT_NE(config_error(cfg).find("cfg.preprocessor"), std::string::npos) << config_error(cfg);
  // v2 configs (no v3 keys) keep v2's settings.
  cfg = {{"encoder", {{"d_model", 32}, {"n_heads", 4}}}, {"head", {{"num_classes", 34}}}};
  const ConformerConfig v2 = conformer_config_from_gigaam(cfg, "cfg");
  EXPECT_EQ(v2.subsampling, "striding");
  EXPECT_EQ(v2.subsampling_kernel, 3);
  EXPECT_EQ(v2.conv_norm, "batch_norm");
  EXPECT_EQ(v2.mel.n_fft, 400);
  EXPECT_TRUE(v2.mel.center);
}

TEST(GigaamV3, LayerNormModelMissingItsNormIsRefusedByName) {
  const ConformerCheckpoint ck = read_conformer_checkpoint(kDir + "v3_ctc.ckpt");
  ConformerConfig c = ck.config;
  c.conv_norm = "batch_norm";  // asks for running statistics a v3 checkpoint does not have
  try {
    ConformerModel m(c, ck.weights, ck.vocabulary);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("conv.batch_norm.running_mean"), std::string::npos) << e.what();
  }
}

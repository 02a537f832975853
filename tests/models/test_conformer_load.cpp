// Loading conformer checkpoints in their published formats (tests/fixtures/conformer/archives,
// written by scripts/make_conformer_archives.py with NeMo 3.0.0's save_to and gigaam 0.1.0's
// torch.save layout; nemo_reference.json / gigaam_reference.json hold what upstream saw: config,
// vocabulary, tensor shapes), transformers' Parakeet directory (tests/fixtures/conformer/encoder,
// the same weights under both layouts), and every kind of malformed input.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "models/conformer.h"
#include "weights/nemo_archive.h"
#include "weights/source.h"

using namespace xdna;
namespace fs = std::filesystem;

namespace {

const std::string kArchives = std::string(XDNA_FIXTURE_DIR) + "/conformer/archives/";
const std::string kEncoders = std::string(XDNA_FIXTURE_DIR) + "/conformer/encoder/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json reference(const std::string& file) { return nlohmann::json::parse(slurp(kArchives + file)); }

// A ustar archive of the given members (for malformed .nemo variants).
std::string make_tar(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string out;
  for (const auto& [name, data] : members) {
    char h[512] = {};
    std::snprintf(h, 100, "./%s", name.c_str());
    std::snprintf(h + 100, 8, "0000644");
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
    h[156] = '0';
    std::memcpy(h + 257, "ustar\0" "00", 8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out.append(h, 512);
    out += data;
    out.append((512 - data.size() % 512) % 512, '\0');
  }
  out.append(1024, '\0');
  return out;
}

std::string temp_file(const std::string& name, const std::string& bytes) {
  const fs::path dir = fs::temp_directory_path() / ("xdna_conformer_load_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

std::string load_error(const std::string& path) {
  try {
    read_conformer_checkpoint(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

struct NemoParts {
  std::string yaml, weights, tokenizer, tokenizer_name;
};
NemoParts nemo_parts(const std::string& file) {
  TarArchive tar(kArchives + file);
  NemoParts p;
  p.yaml = tar.read(*tar.find("model_config.yaml"));
  p.weights = tar.read(*tar.find("model_weights.ckpt"));
  if (const TarMember* t = tar.find_suffix("tokenizer.model")) {
    p.tokenizer = tar.read(*t);
    p.tokenizer_name = t->name;
  }
  return p;
}

void expect_tensors_match(const ConformerCheckpoint& c, const nlohmann::json& tensors) {
  int checked = 0;
  for (const auto& [name, shape] : tensors.items()) {
    if (name.starts_with("preprocessor.") || name.ends_with("num_batches_tracked")) continue;
    std::string want = std::regex_replace(name, std::regex(R"(^joint\.joint_net\.1\.)"), "joint.joint_net.2.");
    want = std::regex_replace(want, std::regex(R"(^head\.)"), "decoder.");  // GigaAM's CTC head
    ASSERT_TRUE(c.weights->contains(want)) << want;
    EXPECT_EQ(c.weights->info(want).shape, shape.get<Shape>()) << want;
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

void expect_encodes(const ConformerCheckpoint& ck, const std::string& path) {
  std::shared_ptr<ConformerModel> model = load_conformer(path);
  EXPECT_EQ(model->vocabulary(), ck.vocabulary);
  Tensor features = Tensor::zeros({model->config().n_mels, 64});
  for (int64_t i = 0; i < features.numel(); ++i) features.data<float>()[i] = std::sin(0.37f * i);
  const Tensor enc = model->encode(features);
  EXPECT_EQ(enc.shape(), (Shape{model->config().encoded_frames(64), model->config().d_model}));
  if (model->config().head == "ctc") {
    const Tensor lp = model->ctc_log_probs(enc);
    EXPECT_EQ(lp.shape()[1], model->config().vocab_size + 1);
  }
}

}  // namespace

TEST(ConformerLoad, NemoFastConformerCtcWithSentencePiece) {
  const std::string path = kArchives + "parakeet_ctc_bpe.nemo";
  const ConformerCheckpoint ck = read_conformer_checkpoint(path);
  const nlohmann::json ref = reference("nemo_reference.json")["parakeet_ctc_bpe"];
  const ConformerConfig& c = ck.config;
  EXPECT_EQ(ck.format, "nemo");
  EXPECT_EQ(c.family, "parakeet");
  EXPECT_EQ(c.subsampling, "dw_striding");
  EXPECT_EQ(c.subsampling_factor, 8);
  EXPECT_EQ(c.subsampling_channels, 16);
  EXPECT_EQ(c.n_mels, 80);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.ff_dim, 128);
  EXPECT_EQ(c.conv_kernel, 9);
  EXPECT_EQ(c.self_attention, "rel_pos");
  EXPECT_TRUE(c.xscaling);
  EXPECT_EQ(c.pos_emb_max_len, 5000);
  EXPECT_EQ(c.head, "ctc");
  EXPECT_EQ(c.vocab_size, 40);
  // Preprocessor: window_size 0.025 s, window_stride 0.01 s, n_fft 512, 80 features.
  EXPECT_EQ(c.mel.win_length, 400);
  EXPECT_EQ(c.mel.hop_length, 160);
  EXPECT_EQ(c.mel.n_fft, 512);
  EXPECT_EQ(c.mel.n_mels, 80);
  EXPECT_FLOAT_EQ(c.mel.preemphasis, 0.97f);
  EXPECT_EQ(c.mel.normalize, "per_feature");
  EXPECT_EQ(c.mel.log, "add");
  EXPECT_FLOAT_EQ(c.mel.log_guard, 5.960464477539063e-08f);
  EXPECT_EQ(ck.vocabulary, ref["vocabulary"].get<std::vector<std::string>>());  // NeMo's ids_to_tokens
  expect_tensors_match(ck, ref["tensors"]);
  expect_encodes(ck, path);
}

TEST(ConformerLoad, NemoConformerCtcWithCharacters) {
  const std::string path = kArchives + "conformer_ctc_char.nemo";
  const ConformerCheckpoint ck = read_conformer_checkpoint(path);
  const nlohmann::json ref = reference("nemo_reference.json")["conformer_ctc_char"];
  EXPECT_EQ(ck.config.subsampling, "striding");
  EXPECT_EQ(ck.config.subsampling_factor, 4);
  EXPECT_FALSE(ck.config.xscaling);
  EXPECT_EQ(ck.config.conv_kernel, 5);
  EXPECT_EQ(ck.config.n_mels, 64);
  EXPECT_EQ(ck.config.mel.n_mels, 64);
  EXPECT_EQ(ck.config.vocab_size, 28);
  EXPECT_EQ(ck.vocabulary, ref["vocabulary"].get<std::vector<std::string>>());
  EXPECT_EQ(ck.vocabulary[0], " ");
  expect_tensors_match(ck, ref["tensors"]);
  expect_encodes(ck, path);
}

TEST(ConformerLoad, NemoTdt) {
  const std::string path = kArchives + "parakeet_tdt_bpe.nemo";
  const ConformerCheckpoint ck = read_conformer_checkpoint(path);
  const nlohmann::json ref = reference("nemo_reference.json")["parakeet_tdt_bpe"];
  const ConformerConfig& c = ck.config;
  EXPECT_EQ(c.head, "tdt");
  EXPECT_EQ(c.durations, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(c.pred_hidden, 24);
  EXPECT_EQ(c.pred_layers, 1);
  EXPECT_EQ(c.joint_hidden, 20);
  EXPECT_EQ(c.max_symbols_per_step, 10);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.n_mels, 128);
  // joint_net's Linear is index 1 without joint dropout; exposed as joint_net.2 (NeMo's usual name).
  EXPECT_EQ(ck.weights->info("joint.joint_net.2.weight").shape, (Shape{40 + 1 + 5, 20}));
  EXPECT_FALSE(ck.weights->contains("joint.joint_net.1.weight"));
  EXPECT_EQ(ck.vocabulary, ref["vocabulary"].get<std::vector<std::string>>());
  expect_tensors_match(ck, ref["tensors"]);
}

TEST(ConformerLoad, GigaamCheckpoint) {
  const std::string path = kArchives + "gigaam_ctc.ckpt";
  const ConformerCheckpoint ck = read_conformer_checkpoint(path);
  const nlohmann::json ref = reference("gigaam_reference.json")["ctc"];
  const ConformerConfig& c = ck.config;
  EXPECT_EQ(ck.format, "gigaam");
  EXPECT_EQ(c.family, "gigaam");
  EXPECT_EQ(c.subsampling, "striding");
  EXPECT_EQ(c.subsampling_factor, 4);
  EXPECT_EQ(c.subsampling_channels, 32);
  EXPECT_EQ(c.self_attention, "rotary");
  EXPECT_FALSE(c.xscaling);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.conv_kernel, 5);
  EXPECT_EQ(c.head, "ctc");
  EXPECT_EQ(c.vocab_size, 33);
  EXPECT_EQ(c.mel.n_fft, 400);
  EXPECT_EQ(c.mel.mel_scale, "htk");
  EXPECT_EQ(c.mel.log, "clamp");
  EXPECT_FALSE(c.mel.drop_last_frame);
  EXPECT_EQ(ck.vocabulary, ref["vocabulary"].get<std::vector<std::string>>());
  EXPECT_FALSE(ck.weights->contains("head.decoder_layers.0.weight"));
  EXPECT_FALSE(ck.weights->contains("preprocessor.featurizer.0.mel_scale.fb"));
  expect_tensors_match(ck, ref["tensors"]);
  expect_encodes(ck, path);
}

TEST(ConformerLoad, GigaamRnntWithTokenizerBesideIt) {
  const std::string path = kArchives + "gigaam_rnnt.ckpt";
  const ConformerCheckpoint ck = read_conformer_checkpoint(path);
  const nlohmann::json ref = reference("gigaam_reference.json")["rnnt"];
  EXPECT_EQ(ck.config.head, "rnnt");
  EXPECT_EQ(ck.config.self_attention, "rel_pos");
  EXPECT_EQ(ck.config.pred_hidden, 24);
  EXPECT_EQ(ck.config.joint_hidden, 20);
  EXPECT_EQ(ck.config.max_symbols_per_step, 7);
  EXPECT_EQ(ck.vocabulary, ref["vocabulary"].get<std::vector<std::string>>());  // gigaam_rnnt_tokenizer.model
  EXPECT_EQ(ck.config.vocab_size, static_cast<int64_t>(ck.vocabulary.size()));
  EXPECT_EQ(ck.weights->info("joint.joint_net.2.weight").shape, (Shape{ck.config.vocab_size + 1, 20}));
  EXPECT_TRUE(ck.weights->contains("decoder.prediction.dec_rnn.lstm.weight_ih_l0"));
  int checked = 0;
  for (const auto& [name, shape] : ref["tensors"].items()) {
    const std::string want = gigaam_to_nemo_name(name);
    if (want.empty()) continue;
    ASSERT_TRUE(ck.weights->contains(want)) << want;
    EXPECT_EQ(ck.weights->info(want).shape, shape.get<Shape>()) << want;
    ++checked;
  }
  EXPECT_GT(checked, 40);
  // Without the tokenizer beside it: named.
  const std::string alone = temp_file("v2_rnnt.ckpt", slurp(path));
  const std::string e = load_error(alone);
  EXPECT_NE(e.find("missing tokenizer"), std::string::npos) << e;
  EXPECT_NE(e.find("v2_rnnt_tokenizer.model"), std::string::npos) << e;
}

TEST(ConformerLoad, TransformersParakeetDirectoryIsRenamedToNemo) {
  // A's fixture: the same tiny random weights in transformers' layout and under NeMo's names.
  const fs::path hf = kEncoders + "parakeet_ctc_tiny_hf";
  const fs::path dir = fs::path(temp_file("x", "")).parent_path() / "hf";
  fs::create_directories(dir);
  fs::copy_file(hf / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  fs::copy_file(hf / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  // The tokenizer: 16 pieces, then the blank (vocab_size 17 counts it).
  nlohmann::json tok = {{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}}};
  for (int i = 0; i < 17; ++i)
    tok["model"]["vocab"].push_back({i == 16 ? "<pad>" : "\u2581p" + std::to_string(i), -1.0 * i});
  std::ofstream(dir / "tokenizer.json") << tok.dump();

  const ConformerCheckpoint ck = read_conformer_checkpoint(dir.string());
  EXPECT_EQ(ck.format, "transformers");
  EXPECT_EQ(ck.config.vocab_size, 16);
  EXPECT_EQ(ck.config.d_model, 32);
  EXPECT_EQ(ck.config.n_mels, 32);
  EXPECT_EQ(ck.config.ff_dim, 128);
  EXPECT_EQ(ck.vocabulary.size(), 16u);
  EXPECT_EQ(ck.vocabulary[3], "\u2581p3");
  const std::unique_ptr<WeightSource> nemo = open_weights(kEncoders + "parakeet_ctc_tiny/model.safetensors");
  std::vector<std::string> got = ck.weights->names(), want = nemo->names();
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  for (const std::string& n : want) {
    const Tensor a = ck.weights->get(n), b = nemo->get(n);
    ASSERT_EQ(a.shape(), b.shape()) << n;
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << n;
  }
  expect_encodes(ck, dir.string());
  fs::remove(dir / "tokenizer.json");
  EXPECT_NE(load_error(dir.string()).find("missing tokenizer: no tokenizer.json"), std::string::npos);
}

TEST(ConformerLoad, TensorNameMaps) {
  EXPECT_EQ(parakeet_hf_to_nemo_name("encoder.layers.7.self_attn.relative_k_proj.weight"),
            "encoder.layers.7.self_attn.linear_pos.weight");
  EXPECT_EQ(parakeet_hf_to_nemo_name("encoder.layers.0.self_attn.bias_u"), "encoder.layers.0.self_attn.pos_bias_u");
  EXPECT_EQ(parakeet_hf_to_nemo_name("encoder.layers.0.conv.norm.running_var"),
            "encoder.layers.0.conv.batch_norm.running_var");
  EXPECT_EQ(parakeet_hf_to_nemo_name("decoder.lstm.weight_hh_l1"), "decoder.prediction.dec_rnn.lstm.weight_hh_l1");
  EXPECT_EQ(parakeet_hf_to_nemo_name("joint.head.bias"), "joint.joint_net.2.bias");
  EXPECT_EQ(parakeet_hf_to_nemo_name("encoder_projector.weight"), "joint.enc.weight");
  EXPECT_EQ(parakeet_hf_to_nemo_name("decoder.decoder_projector.weight"), "joint.pred.weight");
  EXPECT_EQ(gigaam_to_nemo_name("head.decoder.lstm.weight_ih_l0"), "decoder.prediction.dec_rnn.lstm.weight_ih_l0");
  EXPECT_EQ(gigaam_to_nemo_name("head.decoder.embed.weight"), "decoder.prediction.embed.weight");
  EXPECT_EQ(gigaam_to_nemo_name("head.joint.joint_net.1.weight"), "joint.joint_net.2.weight");
  EXPECT_EQ(gigaam_to_nemo_name("head.joint.enc.bias"), "joint.enc.bias");
  EXPECT_EQ(gigaam_to_nemo_name("encoder.layers.0.norm_out.weight"), "encoder.layers.0.norm_out.weight");
}

TEST(ConformerLoad, MalformedNemoArchivesAreNamed) {
  const NemoParts p = nemo_parts("parakeet_ctc_bpe.nemo");
  auto nemo_error = [&](const std::string& yaml, bool with_tokenizer = true, bool with_yaml = true) {
    std::vector<std::pair<std::string, std::string>> m = {{"model_weights.ckpt", p.weights}};
    if (with_yaml) m.push_back({"model_config.yaml", yaml});
    if (with_tokenizer) m.push_back({p.tokenizer_name, p.tokenizer});
    return load_error(temp_file("bad.nemo", make_tar(m)));
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    const size_t at = p.yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return p.yaml.substr(0, at) + to + p.yaml.substr(at + from.size());
  };
  // The untouched parts load (so each failure below is the one change's).
  EXPECT_EQ(nemo_error(p.yaml), "");
  std::string e = nemo_error(p.yaml, true, false);
  EXPECT_NE(e.find("no model_config.yaml"), std::string::npos) << e;
  e = nemo_error(replaced("d_model: 32", "d_model: abc"));
  EXPECT_NE(e.find("encoder.d_model: is 'abc', not an integer"), std::string::npos) << e;
  e = nemo_error(replaced("subsampling: dw_striding", "subsampling: vggnet"));
  EXPECT_NE(e.find("encoder.subsampling: 'vggnet' is not supported"), std::string::npos) << e;
  e = nemo_error(replaced("self_attention_model: rel_pos", "self_attention_model: abs_pos"));
  EXPECT_NE(e.find("encoder.self_attention_model: 'abs_pos' is not supported"), std::string::npos) << e;
  e = nemo_error(replaced("n_layers: 2", "n_layers: [1, 2]"));
  EXPECT_NE(e.find("encoder.n_layers: is not an integer"), std::string::npos) << e;
  e = nemo_error(replaced("encoder:", "encoder_gone:"));
  EXPECT_NE(e.find("model_config.yaml.encoder: is missing"), std::string::npos) << e;
  e = nemo_error(replaced("features: 80", "features: 64"));
  EXPECT_NE(e.find("preprocessor.features 64 != encoder.feat_in 80"), std::string::npos) << e;
  e = nemo_error(p.yaml, false);
  EXPECT_NE(e.find("no tokenizer.model in the archive"), std::string::npos) << e;
  e = nemo_error("encoder: [unclosed");
  EXPECT_NE(e.find("not valid YAML"), std::string::npos) << e;
  e = load_error(temp_file("weights_only.nemo", make_tar({{"model_weights.ckpt", p.weights}})));
  EXPECT_NE(e.find("no model_config.yaml"), std::string::npos) << e;
  // Truncated archive, member past the end.
  const std::string whole = slurp(kArchives + "parakeet_ctc_bpe.nemo");
  e = load_error(temp_file("cut.nemo", whole.substr(0, whole.size() / 2)));
  EXPECT_NE(e.find("runs past the end of the archive"), std::string::npos) << e;
  // Labels fewer than the model's classes.
  const NemoParts chars = nemo_parts("conformer_ctc_char.nemo");
  std::string more = chars.yaml;
  const size_t at = more.find("num_classes: 28");
  ASSERT_NE(at, std::string::npos);
  more.replace(at, 15, "num_classes: 29");
  const std::string err = load_error(temp_file("chars.nemo", make_tar({{"model_weights.ckpt", chars.weights},
                                                                        {"model_config.yaml", more}})));
  EXPECT_NE(err.find("the tokenizer has 28 pieces, the model 29"), std::string::npos) << err;
}

TEST(ConformerLoad, MalformedGigaamAndOtherInputs) {
  nlohmann::json cfg = {{"encoder", {{"d_model", "wide"}}}, {"head", {{"num_classes", 10}}}};
  std::string e;
  try {
    conformer_config_from_gigaam(cfg, "cfg");
  } catch (const std::exception& ex) {
    e = ex.what();
  }
  EXPECT_NE(e.find("cfg.encoder.d_model: is \"wide\", not an integer"), std::string::npos) << e;
  cfg = {{"encoder", {{"self_attention_model", "abs_pos"}}}, {"head", {{"num_classes", 10}}}};
  EXPECT_THROW(conformer_config_from_gigaam(cfg, "cfg"), std::runtime_error);
  cfg = {{"encoder", {{"d_model", 32}}}, {"head", {{"something", 1}}}};
  EXPECT_THROW(conformer_config_from_gigaam(cfg, "cfg"), std::runtime_error);
  // A plain state dict (no cfg beside it) is not a GigaAM checkpoint.
  const NemoParts p = nemo_parts("parakeet_ctc_bpe.nemo");
  e = load_error(temp_file("plain.ckpt", p.weights));
  EXPECT_NE(e.find("no \"cfg\" beside the state dict"), std::string::npos) << e;
  e = load_error(temp_file("noise.bin", std::string(4096, '\x42')));
  EXPECT_NE(e.find("neither a .nemo archive"), std::string::npos) << e;
  e = load_error("/nonexistent/model.nemo");
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;
  const fs::path empty = fs::path(temp_file("x", "")).parent_path() / "empty_dir";
  fs::create_directories(empty);
  e = load_error(empty.string());
  EXPECT_NE(e.find("no .nemo, GigaAM .ckpt or config.json here"), std::string::npos) << e;
  EXPECT_THROW(sentencepiece_pieces("not a model", "x"), std::runtime_error);
}

// Whole transformers Parakeet RNN-T / TDT checkpoints (save_pretrained of tiny random-init
// ParakeetForRNNT / ParakeetForTDT, transformers 5.24.0; tests/fixtures/conformer/heads/
// parakeet_{rnnt,tdt}_tiny_hf, written by scripts/make_transducer_fixtures.py) loaded through
// load_conformer, i.e. through the transformers -> NeMo tensor renaming of the encoder and the
// transducer head, then decoded: tokens, frames and durations must equal transformers' generate.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>

#include <nlohmann/json.hpp>

#include "models/conformer.h"
#include "weights/source.h"

using namespace xdna;
namespace fs = std::filesystem;

namespace {

const fs::path kHeads = fs::path(XDNA_FIXTURE_DIR) / "conformer" / "heads";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// The fixture directory plus a tokenizer.json (save_pretrained of the model alone writes none):
// vocab_size - 1 pieces, then the blank.
fs::path with_tokenizer(const std::string& name) {
  const fs::path src = kHeads / name;
  const fs::path dir = fs::temp_directory_path() / ("xdna_hf_transducer_" + std::to_string(::getpid())) / name;
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(src / f, dir / f, fs::copy_options::overwrite_existing);
  const int vocab = read_json(src / "config.json")["vocab_size"].get<int>();
  nlohmann::json tok = {{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}}};
  for (int i = 0; i < vocab; ++i)
    tok["model"]["vocab"].push_back({i == vocab - 1 ? "<blank>" : "\u2581p" + std::to_string(i), -1.0 * i});
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  return dir;
}

void expect_generate_tokens(const std::string& name, const std::string& head) {
  SCOPED_TRACE(name);
  const fs::path dir = with_tokenizer(name);
  const auto model = load_conformer(dir.string());
  EXPECT_EQ(model->config().head, head);
  EXPECT_EQ(model->config().family, "parakeet");
  const nlohmann::json want = read_json(kHeads / name / "expected.json");
  // input_features [frames, n_mels] as transformers takes them; encode() wants [n_mels, frames].
  const Tensor features =
      open_weights((kHeads / name / "input_features.safetensors").string())->get("input_features").transpose(0, 1).contiguous();
  const Tensor encoded = model->encode(features);
  EXPECT_EQ(encoded.dim(0), want["encoded_frames"].get<int64_t>());
  const std::vector<AsrToken> tokens = transducer_greedy(*model, encoded);
  const nlohmann::json& wt = want["tokens"];
  ASSERT_EQ(tokens.size(), wt.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(tokens[i].id, wt[i]["id"].get<int32_t>()) << "token " << i;
    EXPECT_EQ(tokens[i].frame, wt[i]["frame"].get<int64_t>()) << "token " << i;
    EXPECT_EQ(tokens[i].duration, wt[i]["duration"].get<int64_t>()) << "token " << i;
  }
  fs::remove_all(dir);
}

}  // namespace

TEST(ConformerHfTransducer, RnntCheckpointDecodesAsTransformersGenerate) {
  expect_generate_tokens("parakeet_rnnt_tiny_hf", "rnnt");
}

TEST(ConformerHfTransducer, TdtCheckpointDecodesAsTransformersGenerate) {
  expect_generate_tokens("parakeet_tdt_tiny_hf", "tdt");
}

// Sentence embeddings: Frontend (tokenizer) -> Encoder -> Head (pooling + optional L2 norm).
//
//   auto model = xdna::EmbeddingModel::load("all-minilm-l6-v2");  // store name, dir or baked file
//   xdna::EmbedResult r = model.embed({"Hello world", "Bonjour"});
//   r.items[0].vector  // 384 floats, unit length for this model
//
// The head follows the model's sentence-transformers files when present (modules.json,
// 1_Pooling/config.json, a Normalize module, sentence_bert_config.json's max_seq_length), with
// per-family defaults otherwise (see head_for_model).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "models/encoder.h"
#include "pipeline/tokenizer.h"

namespace xdna {

enum class Pooling : uint8_t { Cls, Mean, Max, MeanSqrtLen, LastToken };
const char* pooling_name(Pooling p);

struct HeadConfig {
  Pooling pooling = Pooling::Mean;
  bool normalize = false;  // L2-normalise the pooled vector
  size_t max_length = 0;   // tokens per input, special tokens included (0 = the model's maximum)
  std::string source;      // where the choice came from: "sentence-transformers" or "default"
};

// Reads a file of the model by relative name ("modules.json", "1_Pooling/config.json"), or
// nullopt when the model has no such file.
using ModelFileReader = std::function<std::optional<std::string>(const std::string&)>;

// The pooling head from the model's sentence-transformers files, else the family default
// (ModernBERT: its config's classifier_pooling; the others: mean, not normalised).
// Throws std::runtime_error naming the file on malformed JSON or an unsupported pooling mode.
HeadConfig head_for_model(const ModelFileReader& files, const EncoderSpec& spec,
                          const nlohmann::json& config);

// Pools rows [r0, r1) of hidden [N, D] into one vector; L2-normalised when `normalize`.
std::vector<float> pool_rows(const Tensor& hidden, int64_t r0, int64_t r1, Pooling pooling,
                             bool normalize);

struct EmbedOptions {
  size_t max_length = 0;           // 0: the head's max_length; larger than the model allows: error
  std::vector<Backend*> backends;  // empty: host only
};

struct EmbeddingItem {
  std::vector<float> vector;
  size_t tokens = 0;           // tokens the encoder saw (special tokens included)
  size_t original_tokens = 0;  // before truncation
  bool truncated = false;
};

struct EmbedResult {
  std::vector<EmbeddingItem> items;
  RunReport report;
};

// Where the ops of a run went, compactly: {"backends": {name: {"ops", "ms"}}, "ops": [{"op",
// "backend", "count", "ms"}], "fallbacks"} (RunReport::to_json lists every node instead).
nlohmann::json run_summary_json(const RunReport& report);

class EmbeddingModel {
 public:
  // A Hugging Face checkpoint directory, a baked file, or a model name in the store (the store
  // at `store_dir`, or the default one when empty). Throws std::runtime_error saying what was
  // tried (and `npu model pull NAME` when a catalog model is not pulled yet).
  static EmbeddingModel load(const std::string& path_or_name, const std::string& store_dir = "");

  // Tokenizes (truncating to the max length, never silently: items say so), encodes, pools.
  EmbedResult embed(const std::vector<std::string>& texts, const EmbedOptions& options = {}) const;
  // The same from token ids (special tokens as given; truncated to the max length).
  EmbedResult embed_ids(const std::vector<std::vector<int32_t>>& ids,
                        const EmbedOptions& options = {}) const;

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  const EncoderSpec& spec() const { return encoder_->spec(); }
  const Encoder& encoder() const { return *encoder_; }
  const HeadConfig& head() const { return head_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t dimensions() const { return spec().hidden; }
  // The max length used when EmbedOptions::max_length is 0.
  size_t max_length() const;

 private:
  EmbeddingModel() = default;
  EmbedResult run(std::vector<std::vector<int32_t>> ids, std::vector<std::vector<int32_t>> types,
                  std::vector<size_t> original, const EmbedOptions& options) const;
  size_t effective_max_length(const EmbedOptions& options) const;

  std::string name_, path_;
  std::shared_ptr<Encoder> encoder_;
  std::shared_ptr<Tokenizer> tokenizer_;
  HeadConfig head_;
};

}  // namespace xdna

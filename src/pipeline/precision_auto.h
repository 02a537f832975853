// Accuracy-gated precisions for sentence-embedding models: how far the embeddings of a checkpoint
// move from its f32 embeddings when weight tensors are stored at lower precisions, measured by
// cosine on an evaluation set of sentences (one per line, e.g.
// tests/fixtures/encoders/eval_sentences.txt), and the per-tensor choice that
// `npu checkpoint bake --precision auto` makes with it.
//
//   AccuracyProbe probe("all-minilm-l6-v2", read_eval_sentences("eval_sentences.txt"));
//   Accuracy a = probe.measure(probe.uniform_plans(Precision::Int8));  // as `bake --precision int8`
//   AutoChoice c = choose_precisions(probe, {});                      // min cosine >= 0.999
//
// Candidates are built in memory with the bake's numerics (source -> f32 -> target dtype), so a
// baked file with the same plans computes exactly the embeddings measured here.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/embed.h"
#include "weights/bake.h"

namespace xdna {

struct Accuracy {
  double min_cosine = 1.0, mean_cosine = 1.0;
  int64_t worst = -1;  // index of the sentence with the lowest cosine
};

// One sentence per line (a trailing '\r' is dropped, empty lines skipped). Throws naming the file
// when it cannot be read or holds no sentence.
std::vector<std::string> read_eval_sentences(const std::string& path);

// A checkpoint with its evaluation sentences tokenized and its f32 embeddings computed once.
class AccuracyProbe {
 public:
  // `checkpoint`: a Hugging Face directory or a model name in the store (not a baked file: the
  // reference must be the original weights).
  AccuracyProbe(const std::string& checkpoint, std::vector<std::string> sentences,
                const std::string& store_dir = "");

  const EmbeddingModel& model() const { return model_; }
  size_t sentences() const { return ids_.size(); }
  int64_t tokens() const;  // tokens of the whole evaluation set (special tokens included)
  // The tensors a precision applies to, in file order: 2-D float tensors named "...weight"
  // (projection matrices and embedding tables).
  const std::vector<std::string>& ops() const { return ops_; }
  const TensorInfo& info(const std::string& name) const { return source_->info(name); }

  // The plans `npu checkpoint bake --precision p` would apply (its rules, tensor by tensor).
  std::map<std::string, TensorPlan> uniform_plans(Precision p, int64_t group = 0) const;
  // Cosine of every sentence's embedding against f32, with `plans` applied (others stay f32).
  Accuracy measure(const std::map<std::string, TensorPlan>& plans) const;
  // Bytes of all tensor data (scales included) with `plans` applied, the rest under the f32 rules.
  uint64_t bytes(const std::map<std::string, TensorPlan>& plans) const;

 private:
  const Tensor& converted(const std::string& name, const TensorPlan& plan) const;

  EmbeddingModel model_;
  std::shared_ptr<WeightSource> source_;
  std::vector<std::string> ops_;
  std::vector<std::vector<int32_t>> ids_, types_;
  std::vector<std::vector<float>> reference_;
  mutable std::map<std::pair<std::string, std::string>, Tensor> cache_;  // (tensor, plan) -> data
};

// The storage plans a per-op choice can take for one tensor, cheapest (fewest bytes) first;
// precisions whose row length does not fit (bfp16: multiple of 8) are left out.
std::vector<TensorPlan> candidate_plans(const TensorInfo& t, const std::vector<Precision>& precisions);

struct AutoOptions {
  double gate = 0.999;  // minimum cosine against f32 over the evaluation set
  std::vector<Precision> candidates = {Precision::Int8, Precision::BFP16, Precision::BF16};
  std::function<void(const std::string&)> log;
};

struct OpChoice {
  std::string tensor;
  TensorPlan plan;
  Accuracy accuracy;  // the whole model with this and every earlier choice applied
  std::vector<std::pair<std::string, Accuracy>> rejected;  // cheaper precisions that failed
  uint64_t bytes = 0, bytes_f32 = 0;
};

struct AutoChoice {
  double gate = 0;
  size_t sentences = 0;
  std::vector<OpChoice> ops;  // in the order decided: largest tensor first
  Accuracy accuracy;          // the final model
  uint64_t bytes = 0, bytes_f32 = 0;  // all tensor data, chosen and all-f32

  std::map<std::string, TensorPlan> plans() const;
  // Per tensor, the manifest fields of docs/baked-format.md ("auto": cosines, rejected).
  std::map<std::string, nlohmann::json> tensor_fields() const;
  // The manifest's top-level "auto" record; `eval_set` describes the sentences used.
  nlohmann::json record(const nlohmann::json& eval_set) const;
};

// Greedy, largest tensor first: each op takes the cheapest candidate with which the whole model
// (every earlier choice applied) keeps min cosine >= gate, else f32. The final accuracy is
// therefore measured, not estimated: it is the last accepted measurement.
AutoChoice choose_precisions(const AccuracyProbe& probe, const AutoOptions& options);

}  // namespace xdna

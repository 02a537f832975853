#include "pipeline/precision_auto.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/numeric.h"
#include "models/encoder.h"

namespace xdna {

namespace fs = std::filesystem;

namespace {

// The source with some tensors replaced by converted copies; everything else passes through.
class OverlaySource final : public WeightSource {
 public:
  OverlaySource(const WeightSource& base, std::map<std::string, Tensor> over)
      : base_(base), over_(std::move(over)) {}
  std::string format() const override { return base_.format(); }
  std::string path() const override { return base_.path(); }
  const std::vector<TensorInfo>& tensors() const override { return base_.tensors(); }
  Tensor get(const std::string& name) const override {
    auto it = over_.find(name);
    return it != over_.end() ? it->second : base_.get(name);
  }
  nlohmann::json metadata() const override { return base_.metadata(); }

 private:
  const WeightSource& base_;
  std::map<std::string, Tensor> over_;
};

std::string plan_key(const TensorPlan& p) {
  return std::string(dtype_name(p.dtype)) + "/" + std::to_string(p.group);
}

// What the bake writes for `plan`, in memory: source rows -> f32 -> the target dtype.
Tensor convert(const Tensor& src, const TensorPlan& plan) {
  if (plan.dtype == src.dtype() && plan.group == 0) return src;
  const int64_t cols = src.shape().back(), rows = src.numel() / cols;
  Tensor f = Tensor::empty(src.shape(), DType::F32);
  const Tensor s = src.contiguous();
  const int64_t src_row_bytes = dtype_bytes(s.dtype(), cols);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(s.dtype(), s.raw() + r * src_row_bytes, f.data<float>() + r * cols, cols);
  if (plan.dtype == DType::F32) return f;
  Tensor out = Tensor::empty(src.shape(), plan.dtype);
  if (plan.dtype == DType::I8 || plan.dtype == DType::I4) {
    Tensor sc = Tensor::empty({rows, cols / plan.group}, DType::F32);
    if (plan.dtype == DType::I8)
      quantize_int8(f.data<float>(), rows, cols, plan.group, out.data<int8_t>(), sc.data<float>());
    else
      quantize_int4(f.data<float>(), rows, cols, plan.group, out.data<uint8_t>(), sc.data<float>());
    out.set_scales(sc, plan.group);
    return out;
  }
  const int64_t row_bytes = dtype_bytes(plan.dtype, cols);
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(plan.dtype, f.data<float>() + r * cols, out.raw() + r * row_bytes, cols);
  return out;
}

uint64_t plan_bytes(const TensorInfo& t, const TensorPlan& p) {
  const int64_t n = shape_numel(t.shape);
  uint64_t b = static_cast<uint64_t>(dtype_bytes(p.dtype, n));
  if (p.group) b += static_cast<uint64_t>(n / p.group) * 4;
  return b;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  if (aa == 0 || bb == 0) return aa == bb ? 1.0 : 0.0;
  return ab / std::sqrt(aa * bb);
}

TensorPlan plan_for(Precision p, int64_t cols) {
  switch (p) {
    case Precision::F32: return {DType::F32, 0, "f32", ""};
    case Precision::F16: return {DType::F16, 0, "f16", ""};
    case Precision::BF16: return {DType::BF16, 0, "bf16", ""};
    case Precision::BFP16: return {DType::BFP16, 0, "bfp16", ""};
    case Precision::Int8: return {DType::I8, cols, "int8", ""};
    case Precision::Int4: return {DType::I4, kDefaultInt4Group, "int4", ""};
    default: break;
  }
  throw std::invalid_argument(std::string("precision auto: '") + precision_name(p) +
                              "' is not a candidate precision");
}

nlohmann::json accuracy_json(const Accuracy& a) {
  return {{"min_cosine", a.min_cosine}, {"mean_cosine", a.mean_cosine}};
}

}  // namespace

std::vector<std::string> read_eval_sentences(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read the evaluation sentences");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty()) throw std::runtime_error(path + ": no sentences (one per line expected)");
  return out;
}

std::vector<TensorPlan> candidate_plans(const TensorInfo& t, const std::vector<Precision>& precisions) {
  const int64_t cols = t.shape.back();
  std::vector<TensorPlan> out;
  for (Precision p : precisions) {
    if (p == Precision::BFP16 && cols % kBfp16BlockValues != 0) continue;
    if (p == Precision::Int4 && cols % kDefaultInt4Group != 0) continue;
    out.push_back(plan_for(p, cols));
  }
  std::stable_sort(out.begin(), out.end(), [&](const TensorPlan& a, const TensorPlan& b) {
    return plan_bytes(t, a) < plan_bytes(t, b);
  });
  return out;
}

AccuracyProbe::AccuracyProbe(const std::string& checkpoint, std::vector<std::string> sentences,
                             const std::string& store_dir)
    : model_(EmbeddingModel::load(checkpoint, store_dir)) {
  if (!fs::is_directory(model_.path()))
    throw std::invalid_argument(model_.path() +
                                ": accuracy is measured against the original checkpoint "
                                "directory, not a baked file");
  if (sentences.empty()) throw std::invalid_argument("accuracy: no evaluation sentences");
  source_ = open_weights(model_.path());
  for (const TensorInfo& t : source_->tensors())
    if (t.dtype && (*t.dtype == DType::F32 || *t.dtype == DType::F16 || *t.dtype == DType::BF16) &&
        t.shape.size() == 2 && t.name.ends_with("weight"))
      ops_.push_back(t.name);

  BatchOptions bo;
  bo.max_length = model_.max_length();
  bo.pad_to_longest = false;
  for (Encoding& e : model_.tokenizer().encode_batch(sentences, bo)) {
    ids_.push_back(std::move(e.ids));
    types_.push_back(std::move(e.type_ids));
  }
  for (size_t i = 0; i < ids_.size(); ++i)
    if (ids_[i].empty())
      throw std::invalid_argument("accuracy: evaluation sentence " + std::to_string(i + 1) +
                                  " has no tokens");
  // The f32 reference: every op converted to f32 (the source itself when it is f32).
  std::map<std::string, Tensor> over;
  for (const std::string& name : ops_) over[name] = converted(name, plan_for(Precision::F32, 0));
  const Encoder enc(model_.spec(), std::make_shared<OverlaySource>(*source_, std::move(over)));
  const EncoderOutput out = enc.forward(ids_, types_);
  for (size_t b = 0; b < ids_.size(); ++b)
    reference_.push_back(pool_rows(out.hidden, out.offsets[b], out.offsets[b + 1],
                                   model_.head().pooling, model_.head().normalize));
}

int64_t AccuracyProbe::tokens() const {
  int64_t n = 0;
  for (const auto& s : ids_) n += static_cast<int64_t>(s.size());
  return n;
}

const Tensor& AccuracyProbe::converted(const std::string& name, const TensorPlan& plan) const {
  const auto key = std::make_pair(name, plan_key(plan));
  auto it = cache_.find(key);
  if (it == cache_.end()) it = cache_.emplace(key, convert(source_->get(name), plan)).first;
  return it->second;
}

std::map<std::string, TensorPlan> AccuracyProbe::uniform_plans(Precision p, int64_t group) const {
  std::map<std::string, TensorPlan> out;
  for (const std::string& name : ops_) {
    const TensorInfo& t = source_->info(name);
    out[name] = plan_tensor(name, t.shape, *t.dtype, p, group);
  }
  return out;
}

Accuracy AccuracyProbe::measure(const std::map<std::string, TensorPlan>& plans) const {
  std::map<std::string, Tensor> over;
  for (const std::string& name : ops_) {
    auto it = plans.find(name);
    over[name] = converted(name, it != plans.end() ? it->second : plan_for(Precision::F32, 0));
  }
  for (const auto& [name, plan] : plans)
    if (!over.count(name))
      throw std::invalid_argument("accuracy: '" + name + "' is not a weight tensor of " +
                                  model_.path());
  const Encoder enc(model_.spec(), std::make_shared<OverlaySource>(*source_, std::move(over)));
  const EncoderOutput out = enc.forward(ids_, types_);
  Accuracy a;
  double sum = 0;
  for (size_t b = 0; b < ids_.size(); ++b) {
    const double c = cosine(reference_[b], pool_rows(out.hidden, out.offsets[b], out.offsets[b + 1],
                                                     model_.head().pooling, model_.head().normalize));
    sum += c;
    if (a.worst < 0 || c < a.min_cosine) {
      a.min_cosine = c;
      a.worst = static_cast<int64_t>(b);
    }
  }
  a.mean_cosine = sum / static_cast<double>(ids_.size());
  return a;
}

uint64_t AccuracyProbe::bytes(const std::map<std::string, TensorPlan>& plans) const {
  uint64_t total = 0;
  for (const TensorInfo& t : source_->tensors()) {
    if (!t.dtype) continue;  // skipped by the bake
    auto it = plans.find(t.name);
    total += plan_bytes(t, it != plans.end() ? it->second
                                             : plan_tensor(t.name, t.shape, *t.dtype, Precision::F32, 0));
  }
  return total;
}

std::map<std::string, TensorPlan> AutoChoice::plans() const {
  std::map<std::string, TensorPlan> out;
  for (const OpChoice& c : ops) out[c.tensor] = c.plan;
  return out;
}

std::map<std::string, nlohmann::json> AutoChoice::tensor_fields() const {
  std::map<std::string, nlohmann::json> out;
  for (const OpChoice& c : ops) {
    nlohmann::json rejected = nlohmann::json::array();
    for (const auto& [prec, a] : c.rejected) {
      nlohmann::json r = accuracy_json(a);
      r["precision"] = prec;
      rejected.push_back(r);
    }
    nlohmann::json a = accuracy_json(c.accuracy);
    a["rejected"] = rejected;
    out[c.tensor] = {{"auto", a}};
  }
  return out;
}

nlohmann::json AutoChoice::record(const nlohmann::json& eval_set) const {
  nlohmann::json choices = nlohmann::json::object();
  for (const OpChoice& c : ops) choices[c.plan.precision] = choices.value(c.plan.precision, 0) + 1;
  return {{"gate", gate},
          {"reference", "f32"},
          {"metric", "cosine of the pooled embedding, per sentence"},
          {"eval_set", eval_set},
          {"min_cosine", accuracy.min_cosine},
          {"mean_cosine", accuracy.mean_cosine},
          {"bytes", bytes},
          {"bytes_f32", bytes_f32},
          {"ops", choices}};
}

AutoChoice choose_precisions(const AccuracyProbe& probe, const AutoOptions& options) {
  auto log = [&](const std::string& s) {
    if (options.log) options.log(s);
  };
  if (!(options.gate > 0.0 && options.gate <= 1.0))
    throw std::invalid_argument("precision auto: the gate must be in (0, 1]");
  AutoChoice r;
  r.gate = options.gate;
  r.sentences = probe.sentences();
  const TensorPlan f32 = plan_for(Precision::F32, 0);

  std::vector<std::string> order = probe.ops();
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return plan_bytes(probe.info(a), f32) > plan_bytes(probe.info(b), f32);
  });
  std::map<std::string, TensorPlan> plans;
  Accuracy current;  // all f32: cosine 1 by definition
  for (size_t i = 0; i < order.size(); ++i) {
    const TensorInfo& t = probe.info(order[i]);
    OpChoice c;
    c.tensor = t.name;
    c.plan = f32;
    c.accuracy = current;
    c.bytes_f32 = plan_bytes(t, f32);
    for (const TensorPlan& cand : candidate_plans(t, options.candidates)) {
      if (plan_bytes(t, cand) >= c.bytes_f32) break;  // no saving left to buy
      plans[t.name] = cand;
      const Accuracy a = probe.measure(plans);
      if (a.min_cosine >= options.gate) {
        c.plan = cand;
        c.accuracy = current = a;
        break;
      }
      c.rejected.emplace_back(cand.precision, a);
      plans.erase(t.name);
    }
    c.bytes = plan_bytes(t, c.plan);
    plans[t.name] = c.plan;
    char line[256];
    std::snprintf(line, sizeof line, "[%zu/%zu] %s -> %s (min cosine %.6f, mean %.6f)", i + 1,
                  order.size(), t.name.c_str(), c.plan.precision.c_str(), c.accuracy.min_cosine,
                  c.accuracy.mean_cosine);
    log(line);
    r.ops.push_back(std::move(c));
  }
  r.accuracy = current;
  r.bytes = probe.bytes(plans);
  r.bytes_f32 = probe.bytes({});
  return r;
}

}  // namespace xdna

// A WeightSource seen under other tensor names: checkpoints of one architecture saved by different
// code (transformers' Parakeet, GigaAM's heads) are read under the names the model code expects
// (NeMo's). Views stay zero-copy; the inner source is kept alive.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weights/source.h"

namespace xdna {

class RenamedWeights final : public WeightSource {
 public:
  // rename(file name) -> the name to expose, or "" to hide the tensor. Two tensors renamed to one
  // name -> std::invalid_argument naming both.
  RenamedWeights(std::shared_ptr<const WeightSource> inner, const std::function<std::string(const std::string&)>& rename);

  std::string format() const override { return inner_->format(); }
  std::string path() const override { return inner_->path(); }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Tensor get(const std::string& name) const override;
  nlohmann::json metadata() const override { return inner_->metadata(); }
  // The inner source's name for an exposed tensor (throws if absent).
  const std::string& original(const std::string& name) const;
  const WeightSource& inner() const { return *inner_; }

 private:
  std::shared_ptr<const WeightSource> inner_;
  std::vector<TensorInfo> infos_;        // renamed
  std::vector<std::string> originals_;  // parallel to infos_
};

}  // namespace xdna

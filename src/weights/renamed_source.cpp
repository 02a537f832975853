#include "weights/renamed_source.h"

#include <map>
#include <stdexcept>

namespace xdna {

RenamedWeights::RenamedWeights(std::shared_ptr<const WeightSource> inner,
                               const std::function<std::string(const std::string&)>& rename)
    : inner_(std::move(inner)) {
  std::map<std::string, std::string> seen;  // new name -> original
  for (const TensorInfo& t : inner_->tensors()) {
    std::string to = rename(t.name);
    if (to.empty()) continue;
    auto [it, fresh] = seen.emplace(to, t.name);
    if (!fresh)
      throw std::invalid_argument(inner_->path() + ": tensors " + it->second + " and " + t.name + " both map to " + to);
    TensorInfo info = t;
    info.name = to;
    infos_.push_back(std::move(info));
    originals_.push_back(t.name);
  }
}

const std::string& RenamedWeights::original(const std::string& name) const {
  for (size_t k = 0; k < infos_.size(); ++k)
    if (infos_[k].name == name) return originals_[k];
  throw std::runtime_error(inner_->path() + ": no tensor " + name);
}

Tensor RenamedWeights::get(const std::string& name) const { return inner_->get(original(name)); }

}  // namespace xdna

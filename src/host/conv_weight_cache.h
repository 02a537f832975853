// Results derived from constant weights (the conv GEMM's packed panels, Winograd filter
// transforms), computed once and kept. Not part of the public API.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "core/tensor.h"

namespace xdna::host {

// Keyed by where the weights live (buffer, byte offset), their dtype and shape and the layout
// asked for (two numbers the caller chooses: groups and panel width, tile size and panel width);
// an entry holds the weight buffer, so that its address cannot be reused by other weights while
// cached. Value has `storage` (a Buffer) whose size() is what it holds. Past `limit` bytes new
// results are not kept (computed per call).
template <typename Value>
class ConstantWeightCache {
 public:
  explicit ConstantWeightCache(size_t limit) : limit_(limit) {}

  // make() for weights that may change (constant false, or w without a buffer); else the cached
  // result for (w, layout), made on the first call. make() runs outside the lock (it may run
  // threaded); two first calls at once both make it and keep the first.
  template <typename Make>
  std::shared_ptr<const Value> get(const Tensor& w, bool constant, std::array<int64_t, 2> layout, Make make) {
    if (!constant || !w.buffer()) return make();
    Key key{w.buffer().get(), w.byte_offset(), w.dtype(), {}, layout};
    for (int64_t i = 0; i < std::min<int64_t>(w.ndim(), 4); ++i) key.shape[static_cast<size_t>(i)] = w.dim(i);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = entries_.find(key); it != entries_.end()) return it->second.second;
    }
    std::shared_ptr<const Value> v = make();
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_ + v->storage->size() > limit_) return v;
    auto [it, inserted] = entries_.try_emplace(key, w.buffer(), v);
    if (inserted) bytes_ += v->storage->size();
    return it->second.second;
  }

  size_t bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }

 private:
  struct Key {
    const Buffer* buffer;
    size_t offset;
    DType dtype;
    std::array<int64_t, 4> shape;
    std::array<int64_t, 2> layout;
    bool operator<(const Key& o) const {
      return std::tie(buffer, offset, dtype, shape, layout) < std::tie(o.buffer, o.offset, o.dtype, o.shape, o.layout);
    }
  };
  mutable std::mutex mu_;
  std::map<Key, std::pair<std::shared_ptr<Buffer>, std::shared_ptr<const Value>>> entries_;
  size_t bytes_ = 0;
  const size_t limit_;
};

}  // namespace xdna::host

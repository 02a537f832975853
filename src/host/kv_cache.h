// Key/value cache for decoding: per layer, K and V buffers preallocated at [max_len, Hkv, D] so
// appending a token never reallocates, and attention reads a view of the filled prefix.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace xdna::host {

class KvCache {
 public:
  KvCache(int64_t layers, int64_t max_len, int64_t kv_heads, int64_t head_dim);

  // Appends k, v [T, Hkv, D] (f32) after the layer's current length; throws when full.
  void append(int64_t layer, const Tensor& k, const Tensor& v);
  // Views [length(layer), Hkv, D] of the filled part (no copy).
  Tensor keys(int64_t layer) const;
  Tensor values(int64_t layer) const;
  int64_t length(int64_t layer) const;
  // Views [max_len, Hkv, D] of a layer's whole buffers, for writers that fill rows in place
  // (the kv_write op), followed by set_length.
  Tensor key_storage(int64_t layer) const;
  Tensor value_storage(int64_t layer) const;
  // Declares positions [0, n) of every layer filled (0 <= n <= max_len).
  void set_length(int64_t n);
  // Forgets everything after the first n positions of every layer (n = 0: clear).
  void truncate(int64_t n);

  int64_t layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t max_len() const { return max_len_; }

 private:
  void check_layer(int64_t layer) const;
  int64_t max_len_, kv_heads_, head_dim_;
  std::vector<Tensor> k_, v_;
  std::vector<int64_t> len_;
};

}  // namespace xdna::host

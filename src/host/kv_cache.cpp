#include "host/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace xdna::host {

KvCache::KvCache(int64_t layers, int64_t max_len, int64_t kv_heads, int64_t head_dim)
    : max_len_(max_len), kv_heads_(kv_heads), head_dim_(head_dim) {
  if (layers <= 0 || max_len <= 0 || kv_heads <= 0 || head_dim <= 0)
    throw std::invalid_argument("kv cache: layers, max_len, kv_heads, head_dim must be positive");
  // Not zero-filled: nothing reads a row before it is written, and untouched pages of a long
  // context stay uncommitted (Gemma 3 270M at 32K tokens would otherwise commit 1.2 GB up front).
  for (int64_t l = 0; l < layers; ++l) {
    k_.push_back(Tensor::empty({max_len, kv_heads, head_dim}));
    v_.push_back(Tensor::empty({max_len, kv_heads, head_dim}));
  }
  len_.assign(layers, 0);
}

void KvCache::check_layer(int64_t layer) const {
  if (layer < 0 || layer >= layers())
    throw std::out_of_range("kv cache: layer " + std::to_string(layer) + " of " +
                            std::to_string(layers()));
}

void KvCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  check_layer(layer);
  const Shape want{k.defined() ? k.dim(0) : 0, kv_heads_, head_dim_};
  if (!k.defined() || !v.defined() || k.dtype() != DType::F32 || v.dtype() != DType::F32 ||
      k.shape() != want || v.shape() != want)
    throw std::invalid_argument(
        "kv cache: append expects f32 k, v [T, " + std::to_string(kv_heads_) + ", " +
        std::to_string(head_dim_) + "], got k " + (k.defined() ? shape_str(k.shape()) : "undefined") +
        ", v " + (v.defined() ? shape_str(v.shape()) : "undefined"));
  const int64_t T = k.dim(0), at = len_[layer];
  if (at + T > max_len_)
    throw std::length_error("kv cache: layer " + std::to_string(layer) + " holds " +
                            std::to_string(at) + " of " + std::to_string(max_len_) +
                            " positions, cannot append " + std::to_string(T));
  if (T == 0) return;
  const int64_t row = kv_heads_ * head_dim_;
  std::memcpy(k_[layer].data<float>() + at * row, k.contiguous().data<float>(), T * row * sizeof(float));
  std::memcpy(v_[layer].data<float>() + at * row, v.contiguous().data<float>(), T * row * sizeof(float));
  len_[layer] = at + T;
}

Tensor KvCache::keys(int64_t layer) const {
  check_layer(layer);
  return k_[layer].slice(0, 0, len_[layer]);
}

Tensor KvCache::values(int64_t layer) const {
  check_layer(layer);
  return v_[layer].slice(0, 0, len_[layer]);
}

int64_t KvCache::length(int64_t layer) const {
  check_layer(layer);
  return len_[layer];
}

Tensor KvCache::key_storage(int64_t layer) const {
  check_layer(layer);
  return k_[layer];
}

Tensor KvCache::value_storage(int64_t layer) const {
  check_layer(layer);
  return v_[layer];
}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > max_len_)
    throw std::invalid_argument("kv cache: length " + std::to_string(n) + " outside [0, " +
                                std::to_string(max_len_) + "]");
  for (auto& l : len_) l = n;
}

void KvCache::truncate(int64_t n) {
  if (n < 0) throw std::invalid_argument("kv cache: negative truncate length");
  for (auto& l : len_) l = std::min(l, n);
}

}  // namespace xdna::host

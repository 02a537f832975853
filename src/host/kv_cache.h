// Key/value cache for decoding: per layer, K and V buffers preallocated for max_len positions so
// appending a token never reallocates, and attention reads a view of the filled prefix. Storage is
// head-major, [Hkv, max_len, D], so decode attention streams each kv head's rows contiguously
// (position-major rows sat Hkv * D apart, a new page per row at long contexts); every accessor
// hands out a strided view indexed [position, kv head, D], the layout attention expects.
// Elements are f32, f16 or bf16 (kv_dtype_from_name): a half-precision cache halves the bytes
// decode attention streams per token; values are rounded to nearest even when written.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace xdna::host {

// "f32" | "f16" | "bf16" -> the dtype; throws std::invalid_argument naming the bad value.
DType kv_dtype_from_name(const std::string& name);
// Throws std::invalid_argument unless t is F32, F16 or BF16 (`what` starts the message).
void check_kv_dtype(DType t, const std::string& what);

// n floats -> n values of `dtype` at dst (F32: a copy; F16/BF16: round to nearest even, as
// core/numeric.h's f32_to_f16 / f32_to_bf16). SIMD where the CPU has it, same results.
void kv_store(const float* src, DType dtype, void* dst, int64_t n);
// n values of `dtype` at src -> n floats (exact widening).
void kv_load(const void* src, DType dtype, float* dst, int64_t n);
// `rows` runs of n values, src_stride values apart, widened into dst [rows][n] (one call per
// tile of one kv head's K or V rows: D apart in a KvCache, Hkv * D apart in a packed [S, Hkv, D]).
void kv_load_rows(const void* src, DType dtype, int64_t src_stride, int64_t rows, int64_t n, float* dst);

class KvCache {
 public:
  KvCache(int64_t layers, int64_t max_len, int64_t kv_heads, int64_t head_dim, DType dtype = DType::F32);

  // Appends k, v [T, Hkv, D] (f32, stored as dtype()) after the layer's current length; throws
  // when full.
  void append(int64_t layer, const Tensor& k, const Tensor& v);
  // Views [length(layer), Hkv, D] of the filled part (no copy, strided: see the file comment), in
  // dtype().
  Tensor keys(int64_t layer) const;
  Tensor values(int64_t layer) const;
  int64_t length(int64_t layer) const;
  // Views [max_len, Hkv, D] of a layer's whole buffers (strided, rows of D packed), for writers
  // that fill rows in place (the kv_write op), followed by set_length.
  Tensor key_storage(int64_t layer) const;
  Tensor value_storage(int64_t layer) const;
  // Declares positions [0, n) of every layer filled (0 <= n <= max_len).
  void set_length(int64_t n);
  // Forgets everything after the first n positions of every layer (n = 0: clear).
  void truncate(int64_t n);
  // Copies positions [0, n) of every layer of `from` (same layers, kv heads, head dim, dtype;
  // max_len may differ but must hold n) and sets the length to n.
  void copy_prefix(const KvCache& from, int64_t n);

  int64_t layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t max_len() const { return max_len_; }
  DType dtype() const { return dtype_; }

 private:
  void check_layer(int64_t layer) const;
  int64_t max_len_, kv_heads_, head_dim_;
  DType dtype_;
  std::vector<Tensor> k_, v_;
  std::vector<int64_t> len_;
};

}  // namespace xdna::host

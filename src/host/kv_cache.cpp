#include "host/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu.h"
#include "core/numeric.h"

namespace xdna::host {

DType kv_dtype_from_name(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  throw std::invalid_argument("kv cache type '" + name + "' is not one of f32, f16, bf16");
}

void check_kv_dtype(DType t, const std::string& what) {
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
    throw std::invalid_argument(what + ": a KV cache holds f32, f16 or bf16, not " + std::string(dtype_name(t)));
}

namespace {

// The vector loops convert whole registers; the scalar tail uses core/numeric.h, whose rounding
// (nearest even, subnormals, Inf/NaN) the F16C instructions and the bf16 bit arithmetic match.
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx512f"))) int64_t store_f16_avx512(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return i;
}
__attribute__((target("avx512f"))) int64_t load_f16_avx512(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  return i;
}
__attribute__((target("avx2,f16c"))) int64_t store_f16_avx2(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return i;
}
__attribute__((target("avx2,f16c"))) int64_t load_f16_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  return i;
}
// bf16 widening is a 16-bit shift; narrowing stays scalar (f32_to_bf16's NaN and rounding rules)
// but is written once per token and row, far less than attention reads.
__attribute__((target("avx512f"))) int64_t load_bf16_avx512(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  return i;
}
__attribute__((target("avx2"))) int64_t load_bf16_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  return i;
}
#endif

}  // namespace

void kv_store(const float* src, DType dtype, void* dst, int64_t n) {
  if (dtype == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  check_kv_dtype(dtype, "kv_store");
  uint16_t* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  if (dtype == DType::F16) {
#if defined(__GNUC__) && defined(__x86_64__)
    const Isa isa = active_isa();
    if (isa == Isa::Avx512) i = store_f16_avx512(src, d, n);
    else if (isa == Isa::Avx2) i = store_f16_avx2(src, d, n);
#endif
    for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
  } else {
    for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  }
}

void kv_load(const void* src, DType dtype, float* dst, int64_t n) {
  kv_load_rows(src, dtype, n, 1, n, dst);
}

void kv_load_rows(const void* src, DType dtype, int64_t src_stride, int64_t rows, int64_t n, float* dst) {
  if (dtype == DType::F32) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * n, static_cast<const float*>(src) + r * src_stride, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  check_kv_dtype(dtype, "kv_load");
  using LoadFn = int64_t (*)(const uint16_t*, float*, int64_t);
  LoadFn vec = nullptr;
#if defined(__GNUC__) && defined(__x86_64__)
  const Isa isa = active_isa();
  if (dtype == DType::F16)
    vec = isa == Isa::Avx512 ? load_f16_avx512 : isa == Isa::Avx2 ? load_f16_avx2 : nullptr;
  else
    vec = isa == Isa::Avx512 ? load_bf16_avx512 : isa == Isa::Avx2 ? load_bf16_avx2 : nullptr;
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = static_cast<const uint16_t*>(src) + r * src_stride;
    float* d = dst + r * n;
    int64_t i = vec ? vec(s, d, n) : 0;
    if (dtype == DType::F16)
      for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
    else
      for (; i < n; ++i) d[i] = bf16_to_f32(s[i]);
  }
}

KvCache::KvCache(int64_t layers, int64_t max_len, int64_t kv_heads, int64_t head_dim, DType dtype)
    : max_len_(max_len), kv_heads_(kv_heads), head_dim_(head_dim), dtype_(dtype) {
  if (layers <= 0 || max_len <= 0 || kv_heads <= 0 || head_dim <= 0)
    throw std::invalid_argument("kv cache: layers, max_len, kv_heads, head_dim must be positive");
  check_kv_dtype(dtype, "kv cache");
  // Not zero-filled: nothing reads a row before it is written, and untouched pages of a long
  // context stay uncommitted (Gemma 3 270M at 32K tokens would otherwise commit 1.2 GB up front).
  // Head-major buffers [Hkv, max_len, D], kept as [max_len, Hkv, D] views.
  for (int64_t l = 0; l < layers; ++l) {
    k_.push_back(Tensor::empty({kv_heads, max_len, head_dim}, dtype).transpose(0, 1));
    v_.push_back(Tensor::empty({kv_heads, max_len, head_dim}, dtype).transpose(0, 1));
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
  const Tensor kc = k.contiguous(), vc = v.contiguous();
  const int64_t esize = dtype_bytes(dtype_, 1);
  const int64_t pos = k_[layer].strides()[0], head = k_[layer].strides()[1];
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < kv_heads_; ++h) {
      const int64_t from = (t * kv_heads_ + h) * head_dim_, to = ((at + t) * pos + h * head) * esize;
      kv_store(kc.data<float>() + from, dtype_, k_[layer].raw() + to, head_dim_);
      kv_store(vc.data<float>() + from, dtype_, v_[layer].raw() + to, head_dim_);
    }
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

void KvCache::copy_prefix(const KvCache& from, int64_t n) {
  if (from.layers() != layers() || from.kv_heads_ != kv_heads_ || from.head_dim_ != head_dim_ ||
      from.dtype_ != dtype_)
    throw std::invalid_argument("kv cache: copy_prefix between caches of different shapes or types");
  for (int64_t l = 0; l < layers(); ++l)
    if (n < 0 || n > max_len_ || n > from.length(l))
      throw std::invalid_argument("kv cache: copy_prefix of " + std::to_string(n) +
                                  " positions, source holds " + std::to_string(from.length(l)) +
                                  ", destination room " + std::to_string(max_len_));
  // Each kv head's first n rows are one contiguous run in both caches.
  const size_t bytes = static_cast<size_t>(dtype_bytes(dtype_, n * head_dim_));
  const int64_t esize = dtype_bytes(dtype_, 1);
  for (int64_t l = 0; l < layers(); ++l)
    for (int64_t h = 0; h < kv_heads_; ++h) {
      std::memcpy(k_[l].raw() + h * k_[l].strides()[1] * esize,
                  from.k_[l].raw() + h * from.k_[l].strides()[1] * esize, bytes);
      std::memcpy(v_[l].raw() + h * v_[l].strides()[1] * esize,
                  from.v_[l].raw() + h * from.v_[l].strides()[1] * esize, bytes);
    }
  set_length(n);
}

}  // namespace xdna::host

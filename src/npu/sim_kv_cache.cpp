// npu-sim's KV cache (sim_exec.h, SimKvCache): bf16 rows, or int8 / int4 rows and their scales
// quantized as the decode_layer kernels quantize a new row, with a bf16 mirror.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "aie_kernels/fused_stage_int8.h"  // quantize_row: the int8 KV cache's rows, as the kernel makes them
#include "npu/sim_exec.h"

namespace xdna::npu {

SimKvCache::SimKvCache(int64_t kv_heads_, int64_t head_dim_, int64_t max_len_, bool int8_, bool int4_)
    : kv_heads(kv_heads_), head_dim(head_dim_), max_len(max_len_),
      k(size_t(kv_heads_ * max_len_ * head_dim_)), v(size_t(kv_heads_ * max_len_ * head_dim_)), int8(int8_ || int4_),
      int4(int4_) {
  if (int4 && head_dim % 2 != 0) throw std::invalid_argument("npu-sim: an int4 KV cache needs an even head_dim");
  if (int8) {
    k8.resize(k.size()), v8.resize(v.size());
    scales.resize(size_t(kv_heads * max_len * 2));
  }
}

void SimKvCache::quantize_rows(int64_t from, int64_t to) {
  if (!int8) return;
  if (from < 0 || to > max_len) throw std::invalid_argument("npu-sim: KV rows past the cache");
  const int32_t D = int32_t(head_dim);
  std::vector<uint8_t> packed(size_t(D / 2));
  // As the kernel quantizes a row (quantize_row, or quantize_row_int4 then unpacked to k8 / v8).
  const auto quantize = [&](const aie::bf16* x, int8_t* q) {
    if (!int4) return xk_fused::quantize_row(x, q, D);
    const float scale = xk_fused::quantize_row_int4(x, packed.data(), D);
    xk_fused::unpack_int4(packed.data(), q, D);
    return scale;
  };
  for (int64_t h = 0; h < kv_heads; ++h)
    for (int64_t t = from; t < to; ++t) {
      const size_t at = size_t((h * max_len + t) * head_dim);
      scales[size_t((h * max_len + t) * 2)] = quantize(k.data() + at, k8.data() + at);
      scales[size_t((h * max_len + t) * 2 + 1)] = quantize(v.data() + at, v8.data() + at);
    }
}

void SimKvCache::append_int8(std::span<const uint8_t> row) {
  if (!int8 || int4)
    throw std::invalid_argument(std::string("npu-sim: an int8 KV row for a") + (int4 ? "n int4" : " bf16") + " KV cache");
  append_quantized(row);
}

void SimKvCache::append_int4(std::span<const uint8_t> row) {
  if (!int4) throw std::invalid_argument(std::string("npu-sim: an int4 KV row for a") + (int8 ? "n int8" : " bf16") + " KV cache");
  append_quantized(row);
}

void SimKvCache::append_quantized(std::span<const uint8_t> row) {
  const int64_t kvd = kv_heads * head_dim, values = int4 ? kvd : 2 * kvd;  // bytes of the K and V values
  if (int64_t(row.size()) != values + kv_heads * 8)
    throw std::invalid_argument(std::string("npu-sim: ") + (int4 ? "int4" : "int8") + " kv row of " +
                                std::to_string(row.size()) + " bytes, expected " +
                                std::to_string(values + kv_heads * 8));
  if (length >= max_len) throw std::invalid_argument("npu-sim: KV cache full (" + std::to_string(max_len) + ")");
  for (int64_t h = 0; h < kv_heads; ++h) {
    const size_t at = size_t((h * max_len + length) * head_dim);
    float sc[2];
    std::memcpy(sc, row.data() + values + h * 8, 8);
    scales[size_t((h * max_len + length) * 2)] = sc[0];
    scales[size_t((h * max_len + length) * 2 + 1)] = sc[1];
    if (int4) {
      xk_fused::unpack_int4(row.data() + h * head_dim / 2, k8.data() + at, int32_t(head_dim));
      xk_fused::unpack_int4(row.data() + (kvd + h * head_dim) / 2, v8.data() + at, int32_t(head_dim));
    } else {
      std::memcpy(k8.data() + at, row.data() + h * head_dim, size_t(head_dim));
      std::memcpy(v8.data() + at, row.data() + kvd + h * head_dim, size_t(head_dim));
    }
    for (int64_t i = 0; i < head_dim; ++i) {
      k[at + size_t(i)] = aie::to_bf16(float(k8[at + size_t(i)]) * sc[0], kSimRounding);
      v[at + size_t(i)] = aie::to_bf16(float(v8[at + size_t(i)]) * sc[1], kSimRounding);
    }
  }
  ++length;
}

void SimKvCache::append(std::span<const aie::bf16> row) {
  const int64_t kvd = kv_heads * head_dim;
  if (int64_t(row.size()) != 2 * kvd)
    throw std::invalid_argument("npu-sim: kv row of " + std::to_string(row.size()) + " values, expected " +
                                std::to_string(2 * kvd));
  if (length >= max_len) throw std::invalid_argument("npu-sim: KV cache full (" + std::to_string(max_len) + ")");
  for (int64_t h = 0; h < kv_heads; ++h) {
    std::copy_n(row.begin() + h * head_dim, head_dim, k.begin() + (h * max_len + length) * head_dim);
    std::copy_n(row.begin() + kvd + h * head_dim, head_dim, v.begin() + (h * max_len + length) * head_dim);
  }
  quantize_rows(length, length + 1);
  ++length;
}

}  // namespace xdna::npu

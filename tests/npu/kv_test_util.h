// What the quantized-KV decode layer tests share (test_sim_fused_kv.cpp, test_device_fused_kv8.cpp):
// the layer shapes at a KV width, the bytes a design's runtime sequence moves, and a small random
// int8-weight model.
#pragma once
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>

#include "fused_test_util.h"
#include "npu/design.h"
#include "npu/design_families.h"
#include "npu/sim_exec.h"
#include "npu/sim_exec_decoder.h"

namespace xdna::npu::test {

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t rup(int64_t a, int64_t b) { return cdiv(a, b) * b; }

// s with a KV cache of `kv_bits` a value: 16 (bf16), 8 (kv_int8) or 4 (kv_int4).
inline DecodeLayerShape with_kv_bits(DecodeLayerShape s, int kv_bits) {
  s.kv_int8 = kv_bits == 8;
  s.kv_int4 = kv_bits == 4;
  return s;
}

// Qwen3-0.6B's layer at `context`, a 1024-position cache.
inline DecodeLayerShape qwen3_06b(int64_t context, int kv_bits) {
  DecodeLayerShape s{1024, 16, 8, 128, 3072, context, true, false};
  s.capacity = 1024;
  return with_kv_bits(s, kv_bits);
}

// A small Qwen3-like layer: 2 KV heads on 32 cores (16 cores a head), a 64-position cache.
inline DecodeLayerShape small(int64_t context, int kv_bits) {
  DecodeLayerShape s{128, 4, 2, 64, 256, context, true, false};
  s.capacity = 64;
  return with_kv_bits(s, kv_bits);
}

// Bytes the runtime sequence moves from / to the argument named.
inline int64_t moved(const Design& d, SeqOp op, const std::string& arg) {
  int64_t n = 0;
  for (const SeqStep& s : d.sequence)
    if (s.op == op && d.args.at(size_t(s.arg)).name == arg) n += s.pattern.bytes();
  return n;
}

// The message f() throws, or "no error".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// A 2-layer Qwen3-like model with int8 weights and a `kv_bits` KV cache (random weights).
inline SimDecoderModel small_int8_model(int kv_bits) {
  FusedRng r(77);
  SimDecoderModel m;
  m.shape = with_kv_bits({128, 4, 2, 64, 256, 1, true, false}, kv_bits);
  m.weights = DType::I8;
  m.vocab = 64;
  m.embed = r.vals(m.vocab * m.shape.hidden);
  for (int64_t i = 0; i < m.shape.head_dim / 2; ++i)
    m.inv_freq.push_back(std::pow(10000.0f, -2.0f * float(i) / float(m.shape.head_dim)));
  for (int i = 0; i < 2; ++i) m.layers.push_back(layer_weights(r, m.shape));
  m.final_norm = r.vals(m.shape.hidden, 0.5f, 1.5f);
  m.head = r.vals(m.vocab * m.shape.hidden);
  return m;
}

}  // namespace xdna::npu::test

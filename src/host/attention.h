// Scaled dot-product attention on the host, one sequence at a time (no batch dimension: a padded
// batch is run row by row, or with an additive mask).
#pragma once
#include "core/tensor.h"

namespace xdna::host {

struct AttentionParams {
  bool causal = false;
  int64_t q_offset = 0;  // absolute position of query row 0; key j sits at position j
  // Sliding window: key j is visible to a query at p only if p - j < window (causal), or
  // |p - j| < window (not causal: a band, ModernBERT's local layers). 0 = no window.
  int64_t window = 0;
  float softcap = 0.0f;  // logits -> softcap * tanh(logits / softcap) when > 0 (Gemma 2)
  float scale = 0.0f;    // logit scale; 0 = 1 / sqrt(D)
};

// q [T, Hq, D], k [S, Hkv, D], v [S, Hkv, Dv] -> [T, Hq, Dv]. Hq must be a multiple of Hkv
// (GQA; Hkv = 1 is MQA): query head h reads kv head h / (Hq / Hkv). k and v may both be f16 or
// both bf16 (a half-precision KV cache): the result equals f32 k, v holding the same values (bit for
// bit without AVX-512; within f32 summation-order rounding with it, whose decode loops differ). mask, when given, is an f32
// [T, S] added to the logits after scaling and soft-capping (-inf hides a key). Logits are
// computed as scale * q.k, capped, masked, then softmaxed over the visible keys. A query that
// sees no key at all gets zeros.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                 const Tensor* mask = nullptr);

}  // namespace xdna::host

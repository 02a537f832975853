// Decode attention's inner loops (few query rows, one kv head at a time) reading K and V straight
// from the cache in its own element type: f32, or f16 / bf16 widened in registers (no widening
// pass through a scratch buffer). Both loops do the same f32 arithmetic in the same order for every
// element type, so a half cache's results equal an f32 cache holding the same (rounded) values
// run through these kernels. AVX-512 only (active_isa() == Isa::Avx512); host::attention uses them
// for f16 / bf16 caches (an f32 cache keeps its dot / axpy loops, faster there).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace xdna::host {

// s[g * ld_s + j] = q[g] · k_j for keys j in [0, n) and queries g in [0, G): key j's D elements
// of type dt start at k + j * k_stride elements.
void decode_scores_avx512(const void* k, DType dt, int64_t k_stride, int64_t n, int64_t D, const float* const* q,
                          int64_t G, float* s, int64_t ld_s);

// out[g * Dv + d] += Σ_j w[g * ld_w + j] · v_j[d] for j in [0, n), in key order: value row j's Dv
// elements of type dt start at v + j * v_stride elements.
void decode_wsum_avx512(const void* v, DType dt, int64_t v_stride, int64_t n, int64_t Dv, const float* w,
                        int64_t ld_w, int64_t G, float* out);

}  // namespace xdna::host

// rope_bf16: RoPE in place over `heads` heads of head_dim values (the qkv_rope / decode_layer
// stage after the QKV GEMV and QK-norm). npu (needs hardware and the toolchain, unverified here).
// Pairs (i, i + D/2) (half-split) or (2i, 2i + 1) (interleaved) are rotated by cos[i], sin[i],
// the f32 row of this position (the design's "rope" part: cos[D/2] then sin[D/2]).
// Numerical reference: a' = bf16(a c - b s), b' = bf16(b c + a s), each in f32 (two products,
// one add, one rounding to nearest even each) (tests/npu/test_aie_kernels.cpp).
// Entry point rope_bf16(x, cos_sin, heads, head_dim, interleaved); head_dim even.
#include "kernels.h"

namespace xk_impl {
void rope_bf16(xk::bf16* x, const float* cos, const float* sin, int32_t heads, int32_t head_dim, bool interleaved,
               xk::Rounding rnd) {
  const int32_t half = head_dim / 2;
  for (int32_t h = 0; h < heads; ++h) {
    xk::bf16* v = x + int64_t(h) * head_dim;
    for (int32_t i = 0; i < half; ++i) {
      xk::bf16& lo = interleaved ? v[2 * i] : v[i];
      xk::bf16& hi = interleaved ? v[2 * i + 1] : v[i + half];
      const float a = xk::to_float(lo), b = xk::to_float(hi);
      lo = xk::to_bf16(a * cos[i] - b * sin[i], rnd);
      hi = xk::to_bf16(b * cos[i] + a * sin[i], rnd);
    }
  }
}
}  // namespace xk_impl

extern "C" void rope_bf16(xk::bf16* x, const float* cos_sin, int32_t heads, int32_t head_dim, int32_t interleaved) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::rope_bf16(x, cos_sin, cos_sin + head_dim / 2, heads, head_dim, interleaved != 0, scope.mode);
}

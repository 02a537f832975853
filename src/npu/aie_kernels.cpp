// Thin adapters over the core kernel sources (aie_kernels/*.cc, declared in aie_kernels/kernels.h):
// the shape checks and the int64 / Rounding signatures the simulator's callers use, then the
// source's own code (xk_impl, which the extern "C" entry points run with round-to-nearest-even).
// The bfp16 operand packers (what the host / bake step writes) are host code.
#include "npu/aie_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "aie_kernels/kernels.h"
#include "core/numeric.h"

namespace xdna::aie {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// The sources take int32 sizes (design.py passes int32 scalars).
int32_t i32(int64_t v, const char* what) {
  check(v >= 0 && v <= std::numeric_limits<int32_t>::max(), std::string(what) + " = " + std::to_string(v) +
                                                                 " outside 0..2^31-1");
  return int32_t(v);
}

}  // namespace

void gemv_bf16(const bf16* W, const bf16* x, bf16* y, int64_t rows, int64_t K, Rounding rnd) {
  check(rows >= 0 && K > 0 && K % kGemvLanes == 0,
        "gemv_bf16: K = " + std::to_string(K) + " is not a positive multiple of 16");
  xk_impl::gemv_bf16(W, x, y, i32(K, "gemv_bf16: K"), i32(rows, "gemv_bf16: rows"), rnd);
}

void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int64_t rows, int64_t K, int shift,
               Rounding rnd) {
  check(rows >= 0 && K > 0 && K % kGemvLanesI8 == 0,
        "gemv_int8: K = " + std::to_string(K) + " is not a positive multiple of 32");
  check(shift >= 0 && shift < 32, "gemv_int8: shift " + std::to_string(shift) + " outside 0..31");
  xk_impl::gemv_int8(W, x, y, i32(K, "gemv_int8: K"), i32(rows, "gemv_int8: rows"), shift, rnd);
}

void gemm_bfp16(const uint8_t* A, const uint8_t* B, float* C, int64_t m, int64_t k, int64_t n) {
  check(m > 0 && k > 0 && n > 0 && m % 8 == 0 && k % 8 == 0 && n % 8 == 0,
        "gemm_bfp16: m, k, n = " + std::to_string(m) + ", " + std::to_string(k) + ", " +
            std::to_string(n) + " are not positive multiples of 8");
  // C row-major <-> the kernel's accumulator order ([m/8][n/8] tiles of 8 x 8): plain copies.
  std::vector<float> acc(static_cast<size_t>(m * n));
  const int64_t nt = n / 8;
  auto tile_lane = [&](int64_t r, int64_t c) { return ((r / 8) * nt + c / 8) * 64 + (r % 8) * 8 + c % 8; };
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) acc[size_t(tile_lane(r, c))] = C[r * n + c];
  xk_impl::matmul_bfp16_acc(A, B, acc.data(), i32(m, "gemm_bfp16: m"), i32(k, "gemm_bfp16: k"),
                            i32(n, "gemm_bfp16: n"));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) C[r * n + c] = acc[size_t(tile_lane(r, c))];
}

void gemv_bfp16(const uint8_t* W, const uint8_t* x, bf16* y, int64_t rows, int64_t K, Rounding rnd) {
  check(rows >= 0 && K > 0 && K % 8 == 0, "gemv_bfp16: K = " + std::to_string(K) + " is not a positive multiple of 8");
  xk_impl::gemv_bfp16(W, x, y, i32(K, "gemv_bfp16: K"), i32(rows, "gemv_bfp16: rows"), rnd);
}

void pack_bfp16_a(const float* A, int64_t m, int64_t k, uint8_t* out) {
  check(m % 8 == 0 && k % 8 == 0, "pack_bfp16_a: m and k must be multiples of 8");
  for (int64_t i = 0; i < m / 8; ++i)
    for (int64_t b = 0; b < k / 8; ++b)
      for (int r = 0; r < 8; ++r)
        bfp16_encode(A + (i * 8 + r) * k + b * 8, 8, out + ((i * (k / 8) + b) * 8 + r) * 9);
}

void pack_bfp16_b(const float* B, int64_t k, int64_t n, uint8_t* out) {
  check(k % 8 == 0 && n % 8 == 0, "pack_bfp16_b: k and n must be multiples of 8");
  float col[8];
  for (int64_t j = 0; j < n / 8; ++j)
    for (int64_t b = 0; b < k / 8; ++b)
      for (int c = 0; c < 8; ++c) {
        for (int t = 0; t < 8; ++t) col[t] = B[(b * 8 + t) * n + j * 8 + c];
        bfp16_encode(col, 8, out + ((j * (k / 8) + b) * 8 + c) * 9);
      }
}

// ---- decode-layer kernels ----------------------------------------------------------------------

void gemv_bf16_f32(const bf16* W, const bf16* x, float* y, int64_t rows, int64_t K) {
  check(rows >= 0 && K > 0 && K % kGemvLanes == 0,
        "gemv_bf16_f32: K = " + std::to_string(K) + " is not a positive multiple of 16");
  ::gemv_bf16_f32(W, x, y, i32(K, "gemv_bf16_f32: K"), i32(rows, "gemv_bf16_f32: rows"));
}

void rmsnorm_bf16(const bf16* x, const bf16* gamma, float offset, float eps, bf16* y, int64_t n, Rounding rnd) {
  check(n > 0, "rmsnorm_bf16: n = " + std::to_string(n) + " is not positive");
  xk_impl::rmsnorm_bf16(x, gamma, y, i32(n, "rmsnorm_bf16: n"), eps, offset, rnd);
}

void layernorm_bf16(const bf16* x, const bf16* gamma, const bf16* beta, float eps, bf16* y, int64_t n, Rounding rnd) {
  check(n > 0, "layernorm_bf16: n = " + std::to_string(n) + " is not positive");
  xk_impl::layernorm_bf16(x, gamma, beta, y, i32(n, "layernorm_bf16: n"), eps, rnd);
}

void softmax_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd) {
  check(n > 0, "softmax_bf16: n = " + std::to_string(n) + " is not positive");
  xk_impl::softmax_bf16(x, y, i32(n, "softmax_bf16: n"), rnd);
}

void add_bf16(const bf16* a, const bf16* b, bf16* y, int64_t n, Rounding rnd) {
  xk_impl::add_bf16(a, b, y, i32(n, "add_bf16: n"), rnd);
}

void mul_bf16(const bf16* a, const bf16* b, bf16* y, int64_t n, Rounding rnd) {
  xk_impl::mul_bf16(a, b, y, i32(n, "mul_bf16: n"), rnd);
}

void scale_bf16(const bf16* x, float s, bf16* y, int64_t n, Rounding rnd) {
  xk_impl::scale_bf16(x, s, y, i32(n, "scale_bf16: n"), rnd);
}

void silu_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd) { xk_impl::silu_bf16(x, y, i32(n, "silu_bf16: n"), rnd); }

void gelu_tanh_bf16(const bf16* x, bf16* y, int64_t n, Rounding rnd) {
  xk_impl::gelu_tanh_bf16(x, y, i32(n, "gelu_tanh_bf16: n"), rnd);
}

void rope_bf16(bf16* x, const float* cos, const float* sin, int64_t heads, int64_t head_dim, bool interleaved,
               Rounding rnd) {
  check(head_dim > 0 && head_dim % 2 == 0, "rope_bf16: head_dim " + std::to_string(head_dim) + " is not even");
  xk_impl::rope_bf16(x, cos, sin, i32(heads, "rope_bf16: heads"), i32(head_dim, "rope_bf16: head_dim"), interleaved,
                     rnd);
}

AttnPartial attention_partial_bf16(const bf16* q, const bf16* K, const bf16* V, int64_t positions,
                                   int64_t head_dim, float scale, bf16* out, Rounding rnd) {
  check(head_dim > 0 && head_dim % kGemvLanes == 0,
        "attention_partial_bf16: head_dim " + std::to_string(head_dim) + " is not a multiple of 16");
  std::vector<float> scores(static_cast<size_t>(std::max<int64_t>(positions, 1)));  // the core's "scores" buffer
  float ms[2];
  xk_impl::attention_partial_bf16(q, K, V, out, ms, scores.data(), i32(std::max<int64_t>(positions, 0), "positions"),
                                  i32(head_dim, "head_dim"), scale, rnd);
  return {ms[0], ms[1]};
}

void attention_combine_bf16(const AttnPartial* parts, const bf16* outs, int64_t n_parts, int64_t head_dim,
                            bf16* out, Rounding rnd) {
  check(n_parts > 0, "attention_combine_bf16: no partials");
  std::vector<float> ms(static_cast<size_t>(2 * n_parts));
  for (int64_t i = 0; i < n_parts; ++i) ms[size_t(2 * i)] = parts[i].max, ms[size_t(2 * i + 1)] = parts[i].sum;
  xk_impl::attention_combine_bf16(ms.data(), outs, out, i32(n_parts, "n_parts"), i32(head_dim, "head_dim"), rnd);
}

}  // namespace xdna::aie

// gemv_int8: y[r] = SRS(sum_k W[r][k] x[k], shift) for one chunk of rows (design family gemv,
// dtype i8). npu (needs hardware and the toolchain, unverified here). Numerical reference:
// 32-lane wrapping 32-bit accumulators, lane l sums k = l mod 32 in increasing k, pairwise
// reduction, shift-round-saturate to int8 rounding to nearest even (the simulator's rounding for
// designs); tests/npu/test_aie_kernels.cpp checks it against a plain integer loop.
// Called by the emitted design.py as gemv_int8(W, x, y, k, rows, shift): W `rows` x `k` int8
// row-major, x `k` int8, y `rows` int8. k must be a multiple of 32; shift 0..31.
#include "kernels.h"

namespace {
constexpr int kGemvI8Lanes = 32;
}

namespace xk_impl {
void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int32_t k, int32_t rows, int32_t shift, xk::Rounding rnd) {
  for (int32_t r = 0; r < rows; ++r) {
    xk::accum<xk::acc32, kGemvI8Lanes> acc = xk::zeros<xk::acc32, kGemvI8Lanes>();
    for (int32_t i = 0; i < k; i += kGemvI8Lanes)
      acc = xk::mac(acc, xk::load_v<kGemvI8Lanes>(W + int64_t(r) * k + i), xk::load_v<kGemvI8Lanes>(x + i));
    y[r] = xk::srs_int8(xk::reduce_add_pairwise(acc), shift, rnd);
  }
}
}  // namespace xk_impl

extern "C" void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int32_t k, int32_t rows, int32_t shift) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::gemv_int8(W, x, y, k, rows, shift, scope.mode);
}

// AVX-512 row kernels for ops.cpp (16 floats per vector). Algorithms: ops_simd_impl.h.
#include <immintrin.h>

#include "host/ops_simd_impl.h"

namespace xdna::host {
namespace {

struct V512 {
  using T = __m512;
  static constexpr int W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float f) { return _mm512_set1_ps(f); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T fnma(T a, T b, T c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static T abs(T a) { return _mm512_abs_ps(a); }
  static T round(T a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T pow2(T n) {  // 2^n for integral n in [-126, 127]
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(e);
  }
  using M = __mmask16;
  static M lt(T a, T b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(T a, T b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M unord(T a, T b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
  static T blend(M m, T if_clear, T if_set) { return _mm512_mask_blend_ps(m, if_clear, if_set); }
  static float hsum(T v) { return _mm512_reduce_add_ps(v); }
  static float hmax(T v) { return _mm512_reduce_max_ps(v); }
  // Sum of x, and of (x - mean)^2 with the difference in float and the square in double.
  static double sum_d(const float* x, int64_t n) {
    __m512d acc = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_loadu_ps(x + i)));
    double s = _mm512_reduce_add_pd(acc);
    for (; i < n; ++i) s += x[i];
    return s;
  }
  static double sumsq_d(const float* x, int64_t n, float mean) {
    __m512d acc = _mm512_setzero_pd();
    const __m256 m = _mm256_set1_ps(mean);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m512d v = _mm512_cvtps_pd(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
      acc = _mm512_fmadd_pd(v, v, acc);
    }
    double s = _mm512_reduce_add_pd(acc);
    for (; i < n; ++i) s += double(x[i] - mean) * double(x[i] - mean);
    return s;
  }
};

}  // namespace

const RowKernels kRowKernelsAvx512 = simd_impl::kernels<V512>();

}  // namespace xdna::host

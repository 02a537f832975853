// AVX2 + FMA row kernels for ops.cpp (8 floats per vector). Algorithms: ops_simd_impl.h.
#include <immintrin.h>

#include "host/ops_simd_impl.h"

namespace xdna::host {
namespace {

struct V256 {
  using T = __m256;
  static constexpr int W = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T set1(float f) { return _mm256_set1_ps(f); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T fnma(T a, T b, T c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a b
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T abs(T a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  static T round(T a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T pow2(T n) {  // 2^n for integral n in [-126, 127]
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(e);
  }
  using M = __m256;
  static M lt(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M unord(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
  static T blend(M m, T if_clear, T if_set) { return _mm256_blendv_ps(if_clear, if_set, m); }
  static float hsum(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(T v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static double hsum_d(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
  // Sum of x, and of (x - mean)^2 with the difference in float and the square in double.
  static double sum_d(const float* x, int64_t n) {
    __m256d acc = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
    double s = hsum_d(acc);
    for (; i < n; ++i) s += x[i];
    return s;
  }
  static double sumsq_d(const float* x, int64_t n, float mean) {
    __m256d acc = _mm256_setzero_pd();
    const __m128 m = _mm_set1_ps(mean);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const __m256d v = _mm256_cvtps_pd(_mm_sub_ps(_mm_loadu_ps(x + i), m));
      acc = _mm256_fmadd_pd(v, v, acc);
    }
    double s = hsum_d(acc);
    for (; i < n; ++i) s += double(x[i] - mean) * double(x[i] - mean);
    return s;
  }
};

}  // namespace

const RowKernels kRowKernelsAvx2 = simd_impl::kernels<V256>();

}  // namespace xdna::host

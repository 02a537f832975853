// The row kernels written once over a vector type V (included by ops_avx512.cpp and ops_avx2.cpp,
// which define V for their instruction set). Same algorithms and constants as ops_math.h, so the
// vector and portable paths agree to about one ulp. Tails run through a padded stack block.
// No std:: algorithm templates or shared inline helpers here: their instances would be compiled
// with AVX-512 flags and the linker could hand them to portable code on an AVX2-only CPU.
// Everything instantiated here depends on V, a type local to its .cpp file.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "host/ops_simd.h"

namespace xdna::host::simd_impl {

template <class V>
inline typename V::T exp(typename V::T x) {
  using T = typename V::T;
  // max/min return their second operand for NaN, so NaN is clamped too (restored at the end).
  T xc = V::min(V::max(x, V::set1(-87.3f)), V::set1(88.0f));
  const T n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  T r = V::fnma(n, V::set1(0.693359375f), xc);  // ln2 in two parts: n * ln2 stays exact
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  T p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  p = V::add(V::fma(p, V::mul(r, r), r), V::set1(1.0f));
  T e = V::mul(p, V::pow2(n));
  e = V::blend(V::lt(x, V::set1(-87.3f)), e, V::set1(0.0f));
  e = V::blend(V::gt(x, V::set1(88.72284f)), e, V::set1(std::numeric_limits<float>::infinity()));
  return V::blend(V::unord(x, x), e, x);
}

// 0.5 x (1 + erf(x / sqrt 2)) with erf by Abramowitz & Stegun 7.1.26, as erf_approx.
template <class V>
inline typename V::T gelu(typename V::T v) {
  using T = typename V::T;
  const T x = V::mul(v, V::set1(0.70710678118654752f));
  const T ax = V::abs(x);
  const T t = V::div(V::set1(1.0f), V::fma(V::set1(0.3275911f), ax, V::set1(1.0f)));
  T p = V::set1(1.061405429f);
  p = V::fma(p, t, V::set1(-1.453152027f));
  p = V::fma(p, t, V::set1(1.421413741f));
  p = V::fma(p, t, V::set1(-0.284496736f));
  p = V::fma(p, t, V::set1(0.254829592f));
  const T ex = exp<V>(V::sub(V::set1(0.0f), V::mul(ax, ax)));
  const T r = V::fnma(V::mul(p, t), ex, V::set1(1.0f));  // erf(|x|)
  const T erf = V::blend(V::lt(x, V::set1(0.0f)), r, V::sub(V::set1(0.0f), r));
  return V::mul(V::mul(V::set1(0.5f), v), V::add(V::set1(1.0f), erf));
}

template <class V>
inline typename V::T gelu_tanh(typename V::T v) {
  using T = typename V::T;
  // 1 + tanh(u) = 2 / (1 + e^(-2u)), so the result is v / (1 + e^(-2u)).
  const T v3 = V::mul(V::mul(v, v), v);
  const T u = V::mul(V::set1(0.79788456080286536f), V::fma(V::set1(0.044715f), v3, v));
  const T e = exp<V>(V::mul(V::set1(-2.0f), u));
  return V::div(v, V::add(V::set1(1.0f), e));
}

template <class V>
inline typename V::T silu(typename V::T v) {
  const typename V::T e = exp<V>(V::sub(V::set1(0.0f), v));
  return V::div(v, V::add(V::set1(1.0f), e));
}

// y[i] = F(x[i]); the last partial vector goes through a zero-padded block.
template <class V, typename V::T (*F)(typename V::T)>
void map(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, F(V::load(x + i)));
  if (i < n) {
    alignas(64) float buf[V::W] = {};
    for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
    V::store(buf, F(V::load(buf)));
    for (int64_t j = i; j < n; ++j) y[j] = buf[j - i];
  }
}

template <class V>
void softmax_row(float* x, int64_t d) {
  using T = typename V::T;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t nv = d / V::W * V::W;
  T vmx = V::set1(kNegInf);
  for (int64_t i = 0; i < nv; i += V::W) vmx = V::max(vmx, V::load(x + i));
  float mx = V::hmax(vmx);
  for (int64_t i = nv; i < d; ++i) mx = x[i] > mx ? x[i] : mx;
  if (mx == kNegInf) {  // fully masked: no key is visible, so no probability mass
    for (int64_t i = 0; i < d; ++i) x[i] = 0.0f;
    return;
  }
  const T m = V::set1(mx);
  T vsum = V::set1(0.0f);
  for (int64_t i = 0; i < nv; i += V::W) {
    const T e = exp<V>(V::sub(V::load(x + i), m));
    V::store(x + i, e);
    vsum = V::add(vsum, e);
  }
  if (nv < d) {  // tail through a block padded with -inf, whose exps are 0
    alignas(64) float buf[V::W];
    for (int j = 0; j < V::W; ++j) buf[j] = nv + j < d ? x[nv + j] : kNegInf;
    const T e = exp<V>(V::sub(V::load(buf), m));
    V::store(buf, e);
    vsum = V::add(vsum, e);
    for (int64_t i = nv; i < d; ++i) x[i] = buf[i - nv];
  }
  const float sum = V::hsum(vsum);
  const float inv = 1.0f / sum;
  const T vinv = V::set1(inv);
  for (int64_t i = 0; i < nv; i += V::W) V::store(x + i, V::mul(V::load(x + i), vinv));
  for (int64_t i = nv; i < d; ++i) x[i] *= inv;
}

// Two passes with double sums (V::sum_d, V::sumsq_d), as the portable row.
template <class V>
void layer_norm_row(const float* x, const float* w, const float* b, float* y, int64_t d, float eps) {
  using T = typename V::T;
  const float mean = float(V::sum_d(x, d) / double(d));
  const double var = V::sumsq_d(x, d, mean);
  const float inv = float(1.0 / std::sqrt(var / double(d) + eps));
  const int64_t nv = d / V::W * V::W;
  const T vm = V::set1(mean), vi = V::set1(inv);
  for (int64_t i = 0; i < nv; i += V::W) {
    const T n = V::mul(V::mul(V::sub(V::load(x + i), vm), vi), V::load(w + i));
    V::store(y + i, b ? V::add(n, V::load(b + i)) : n);
  }
  for (int64_t i = nv; i < d; ++i) y[i] = (x[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
}

template <class V>
void rms_norm_row(const float* x, const float* w, float* y, int64_t d, float eps, float offset) {
  using T = typename V::T;
  const double ss = V::sumsq_d(x, d, 0.0f);
  const float inv = float(1.0 / std::sqrt(ss / double(d) + eps));
  const int64_t nv = d / V::W * V::W;
  const T vi = V::set1(inv), vo = V::set1(offset);
  for (int64_t i = 0; i < nv; i += V::W)
    V::store(y + i, V::mul(V::mul(V::load(x + i), vi), V::add(vo, V::load(w + i))));
  for (int64_t i = nv; i < d; ++i) y[i] = x[i] * inv * (offset + w[i]);
}

template <class V>
constexpr RowKernels kernels() {
  return RowKernels{map<V, gelu<V>>, map<V, gelu_tanh<V>>, map<V, silu<V>>, softmax_row<V>,
                    layer_norm_row<V>, rms_norm_row<V>};
}

}  // namespace xdna::host::simd_impl

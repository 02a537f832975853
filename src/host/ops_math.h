// Branch-free exp for the host ops' inner loops (softmax, silu, tanh-gelu). std::exp is a
// library call the compiler cannot vectorize; this is plain arithmetic it can.
#pragma once
#include <cstdint>
#include <cstring>

namespace xdna::host {

// e^x with a relative error below 1e-7 (about 1 ulp) for x in [-87.3, 88]. Results are 0 below
// -87.3 (so exp(-inf) is exactly 0, as masked softmax entries need), e^88 up to the f32
// overflow point and +inf past it; NaN stays NaN.
inline float exp_approx(float x) {
  float xc = x > -87.3f ? x : -87.3f;  // written so NaN becomes -87.3: no NaN reaches the int cast
  xc = xc < 88.0f ? xc : 88.0f;
  // x = n ln2 + r with |r| <= ln2 / 2; n by the add-magic rounding trick (no round instruction
  // needed on the SSE2 baseline).
  const float magic = 12582912.0f;  // 1.5 * 2^23
  const float n = (xc * 1.44269504088896341f + magic) - magic;
  float r = xc - n * 0.693359375f;  // ln2 split in two so n * ln2 is exact
  r = r + n * 2.12194440e-4f;
  // e^r by a degree-6 Taylor-like polynomial (Cephes expf coefficients).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // Scale by 2^n by building the exponent bits.
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float e = x < -87.3f ? 0.0f : p * scale;
  e = x > 88.72284f ? __builtin_inff() : e;
  return x == x ? e : x;
}

// erf(x) with an absolute error below 3e-7 (Abramowitz & Stegun 7.1.26 on top of exp_approx).
inline float erf_approx(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float r = 1.0f - p * t * exp_approx(-ax * ax);
  return x < 0.0f ? -r : r;
}

}  // namespace xdna::host

// A thin vector / accumulator / mmul layer whose host implementation reproduces AIE2P
// arithmetic, so that kernels written against it (aie_kernels.h) compute on the host exactly
// what the cores would. Names follow aie_api (aie::vector, aie::accum, aie::mac, aie::mmul,
// reduce_add, to_vector<T>(shift), aie::rounding_mode) so the kernel source maps one to one;
// the mapping is in docs/npu-designs.md. Behaviour (aie2p.md: Kernel shapes and numerics):
//  - bf16 x bf16 products are exact in f32 and added per lane with one f32 rounding (nearest
//    even) per mac; reduce_add halves pairwise: lane i += lane i + N/2 until one lane is left;
//  - storing f32 to bf16 rounds toward minus infinity (hardware default) or to nearest even
//    when the kernel selects it;
//  - int8 x int8 accumulates exactly in 32-bit lanes (wrapping like the 32-bit accumulator);
//    storing to int8 shifts right, rounds (floor or nearest even) and saturates (SRS);
//  - bfp16ebs8 8x8x8 mmul: each 8-value block dot product is exact (int8 mantissas, a shared
//    scale 2^(Ea + Eb - 266)); it is added to the f32 accumulator with one rounding per mmul
//    (modelled: the hardware's internal adder order inside one mmul is not published);
//  - exp and reciprocal come from 256-entry f32 lookup tables (errors stated below).
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace xdna::aie {

// aie::rounding_mode::floor (the default) and aie::rounding_mode::conv_even.
enum class Rounding : uint8_t { Floor, NearestEven };

// bf16 as stored: the top 16 bits of an f32.
struct bf16 {
  uint16_t bits = 0;
};
// Inline (the kernels' loops vectorise through them); the same bits as core/numeric.h's
// bf16_to_f32, f32_to_bf16 (nearest even) and f32_to_bf16_floor (toward minus infinity), NaN
// quieted (tests/npu/test_aie_numerics.cpp: ConversionsMatchCore).
inline float to_float(bf16 x) {
  const uint32_t b = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline bf16 to_bf16(float x, Rounding r) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return {uint16_t((b >> 16) | 0x0040)};  // NaN: quiet it
  if (r == Rounding::NearestEven) return {uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16)};
  // Floor: truncation rounds magnitudes down; a negative value with dropped bits steps away from 0.
  return {uint16_t((b >> 16) + ((b & 0x80000000u) && (b & 0xFFFFu) ? 1u : 0u))};
}

template <typename T, int N>
struct vector {
  std::array<T, N> lane{};
  static constexpr int size() { return N; }
};

// aie::load_v<N>(p) / aie::store_v(p, v)
template <int N, typename T>
vector<T, N> load_v(const T* p) {
  vector<T, N> v;
  std::memcpy(v.lane.data(), p, sizeof(T) * N);
  return v;
}
template <typename T, int N>
void store_v(T* p, const vector<T, N>& v) {
  std::memcpy(p, v.lane.data(), sizeof(T) * N);
}

// aie::accum<accfloat, N> (Acc = float) and aie::accum<acc32, N> (Acc = int32_t).
template <typename Acc, int N>
struct accum {
  std::array<Acc, N> lane{};
  static constexpr int size() { return N; }
};

// aie::mac(acc, a, b): acc[i] + a[i] * b[i].
template <int N>
accum<float, N> mac(const accum<float, N>& acc, const vector<bf16, N>& a, const vector<bf16, N>& b) {
  accum<float, N> out;
  for (int i = 0; i < N; ++i) {
    const float prod = to_float(a.lane[i]) * to_float(b.lane[i]);  // exact: 8 x 8 significant bits
    out.lane[i] = acc.lane[i] + prod;
  }
  return out;
}
template <int N>
accum<int32_t, N> mac(const accum<int32_t, N>& acc, const vector<int8_t, N>& a,
                      const vector<int8_t, N>& b) {
  accum<int32_t, N> out;
  // The 32-bit accumulator wraps: add modulo 2^32 (unsigned); the product is exact in int32.
  for (int i = 0; i < N; ++i)
    out.lane[i] = int32_t(uint32_t(acc.lane[i]) + uint32_t(int32_t(a.lane[i]) * int32_t(b.lane[i])));
  return out;
}

// A run of `blocks` int8 macs into one accumulator: acc + a_j * b_j lane by lane for the N-lane
// vectors a_j = a + j N, b_j = b + j N, j = 0 .. blocks - 1; the lanes `blocks` calls of
// mac(acc, load_v<N>(a_j), load_v<N>(b_j)) give (on the core: that loop, the accumulator kept
// in a register; tests/npu/test_aie_numerics.cpp: MacRunEqualsPerBlockMacs). The host keeps the
// lanes in registers across the run: mac_run_i8x32 for 32 lanes (on x86-64 the AVX2 form where
// the CPU has it, else the SSE2 one, the baseline; elsewhere mac_run_lanes), mac_run_lanes
// (portable) for other N. Each form is tested on its own against per-block macs.
template <int N>
void mac_run_lanes(int32_t* lanes, const int8_t* a, const int8_t* b, int blocks) {
  uint32_t s[N];  // wrapping as the 32-bit lanes do
  for (int i = 0; i < N; ++i) s[i] = uint32_t(lanes[i]);
  for (int j = 0; j < blocks; ++j, a += N, b += N)
    for (int i = 0; i < N; ++i) s[i] += uint32_t(int32_t(a[i]) * int32_t(b[i]));
  for (int i = 0; i < N; ++i) lanes[i] = int32_t(s[i]);
}
void mac_run_i8x32(int32_t* lanes, const int8_t* a, const int8_t* b, int blocks);
#if defined(__x86_64__)
void mac_run_i8x32_sse2(int32_t* lanes, const int8_t* a, const int8_t* b, int blocks);
void mac_run_i8x32_avx2(int32_t* lanes, const int8_t* a, const int8_t* b, int blocks);  // only if cpu_has_avx2()
bool cpu_has_avx2();
#endif
template <int N>
accum<int32_t, N> mac_run(accum<int32_t, N> acc, const int8_t* a, const int8_t* b, int blocks) {
  if constexpr (N == 32) mac_run_i8x32(acc.lane.data(), a, b, blocks);
  else mac_run_lanes<N>(acc.lane.data(), a, b, blocks);
  return acc;
}

// aie::reduce_add: pairwise halving (lane i += lane i + half) until one lane remains.
template <typename Acc, int N>
Acc reduce_add(accum<Acc, N> acc) {
  static_assert((N & (N - 1)) == 0, "reduce_add needs a power-of-two lane count");
  for (int half = N / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) {
      if constexpr (std::is_same_v<Acc, float>)
        acc.lane[i] = acc.lane[i] + acc.lane[i + half];
      else
        acc.lane[i] = Acc(uint32_t(acc.lane[i]) + uint32_t(acc.lane[i + half]));
    }
  return acc.lane[0];
}

// Shift-round-saturate of one 32-bit accumulator lane to int8: x / 2^shift rounded by r,
// clamped to [-128, 127]. shift in 0..31.
int8_t srs_int8(int64_t x, int shift, Rounding r);

// acc.to_vector<bf16>() under the selected rounding mode; acc.to_vector<int8>(shift) = SRS.
template <int N>
vector<bf16, N> to_vector_bf16(const accum<float, N>& acc, Rounding r) {
  vector<bf16, N> v;
  for (int i = 0; i < N; ++i) v.lane[i] = to_bf16(acc.lane[i], r);
  return v;
}
template <int N>
vector<int8_t, N> to_vector_int8(const accum<int32_t, N>& acc, int shift, Rounding r) {
  vector<int8_t, N> v;
  for (int i = 0; i < N; ++i) v.lane[i] = srs_int8(acc.lane[i], shift, r);
  return v;
}

// aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accfloat>: C[8 x 8] += A[8 x 8] * B[8 x 8].
// a: 8 rows of A, each one bfp16 block of its 8 k-values (72 bytes, row r at r * 9);
// b: 8 columns of B (pre-transposed), each one block of its 8 k-values (column j at j * 9).
// C is row-major (c.lane[r * 8 + j]). A block with exponent byte 255 (NaN/Inf) yields NaN.
struct mmul_bfp16_888 {
  static constexpr int M = 8, K = 8, N = 8;
  accum<float, 64> c;
  void mac(const uint8_t* a, const uint8_t* b);
};

// aie::mmul<8, 8, 8, int8, int8, acc32>: C[8 x 8] += A[8 x 8] * B[8 x 8], A row-major,
// B pre-transposed (column j's 8 values contiguous at b + 8j), 32-bit wrapping lanes.
struct mmul_int8_888 {
  static constexpr int M = 8, K = 8, N = 8;
  accum<int32_t, 64> c;
  void mac(const int8_t* a, const int8_t* b);
};

// Lookup-table non-linearities (what the kernels' aie::exp2 / aie::inv calls compute here).
// exp: t = x * log2(e) in f32; 2^t = 2^floor(t) * T[floor(frac(t) * 256)] with
// T[j] = 2^((j + 0.5) / 256): max relative error 2^(1/512) - 1 = 1.36e-3 (plus the f32 rounding
// of t, ~1e-5 at |x| = 88); t < -126 gives 0 (denormals flush), t >= 128 gives +Inf, NaN stays.
inline constexpr int kExpLutEntries = 256;
inline constexpr double kExpLutMaxRelError = 1.36e-3;
float exp_lut(float x);
// reciprocal: x = m * 2^e, m in [1, 2); R[j] = 2 / (m_lo + m_hi) for the 256 intervals of the
// top 8 mantissa bits: max relative error 1 / (2 * 256 + 1) = 1.95e-3. 0 and denormals give
// +-Inf, +-Inf gives +-0, NaN stays.
inline constexpr int kRecipLutEntries = 256;
inline constexpr double kRecipLutMaxRelError = 1.95e-3;
float reciprocal_lut(float x);

}  // namespace xdna::aie

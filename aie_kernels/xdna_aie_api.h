// The vector layer the core kernels in this directory are written against (namespace xk).
// Built for the cores (__AIENGINE__ defined, Peano/aiecc): a thin alias of aie_api
// (aie::vector, aie::accum, aie::load_v, aie::mac, aie::reduce_add, aie::set_rounding; mac_run,
// a run of macs into one accumulator, is a loop of aie::mac).
// Built on the host (g++): the same names map to src/npu/aie_numerics.h, which reproduces the
// AIE2P arithmetic; npu-sim runs the kernels built this way (there is no second copy), and
// tests/npu/test_aie_kernels.cpp checks each against a plain C++ reference of its numerics.
//
// Where the two builds may differ (unverified: no AIE toolchain or hardware here):
//  - reduce_add: the host halves pairwise (aie_numerics.h); aie::reduce_add's internal order is
//    not published, so the kernels call reduce_add_pairwise (below), which spells the halving
//    out lane by lane on both builds (slower on the core than aie::reduce_add; bit-exact).
//  - scalar float (to_float, arithmetic on floats): the AIE2P scalar unit has no FPU; Peano
//    lowers it to software float (IEEE f32, round to nearest even), which matches the host.
//  - to_bf16 on the core converts under the rounding mode set by rounding_scope; the host
//    passes the scope's mode explicitly. Both round the same way once the scope is set.
//  - exp / reciprocal: the host uses the 256-entry tables of aie_numerics.h (exp_lut,
//    reciprocal_lut); the core build calls aie::exp2 / aie::inv, whose tables are AMD's. Only
//    the table contents may differ (aie2p.md: "exp and reciprocal come from lookup tables").
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __AIENGINE__
#include <type_traits>

#include <aie_api/aie.hpp>

namespace xk {
using bf16 = bfloat16;
using accfloat = ::accfloat;
using acc32 = ::acc32;
template <typename T, int N>
using vector = aie::vector<T, N>;
template <typename A, int N>
using accum = aie::accum<A, N>;
enum class Rounding : uint8_t { Floor, NearestEven };

template <int N, typename T>
inline vector<T, N> load_v(const T* p) { return aie::load_v<N>(p); }
template <typename A, typename T, int N>
inline accum<A, N> mac(const accum<A, N>& acc, const vector<T, N>& a, const vector<T, N>& b) { return aie::mac(acc, a, b); }
template <typename A, int N>
inline accum<A, N> zeros() { return aie::zeros<A, N>(); }
// `blocks` macs into one accumulator over consecutive N-value vectors of a and b (the host's
// aie_numerics.h mac_run: the same lanes).
template <typename A, typename T, int N>
inline accum<A, N> mac_run(accum<A, N> acc, const T* a, const T* b, int blocks) {
  for (int j = 0; j < blocks; ++j) acc = aie::mac(acc, aie::load_v<N>(a + j * N), aie::load_v<N>(b + j * N));
  return acc;
}

// Sets the core's float -> bf16 / SRS rounding for the kernel's duration, restores it after.
struct rounding_scope {
  explicit rounding_scope(Rounding r) : mode(r), saved(aie::get_rounding()) {
    aie::set_rounding(r == Rounding::NearestEven ? aie::rounding_mode::conv_even : aie::rounding_mode::floor);
  }
  ~rounding_scope() { aie::set_rounding(saved); }
  Rounding mode;
  aie::rounding_mode saved;
};

inline float to_float(bf16 x) { return float(x); }
inline bf16 to_bf16(float x, Rounding) { return bf16(x); }  // under the scope's rounding mode
inline float exp_lut(float x) { return float(aie::exp2<float>(aie::broadcast<float, 16>(x * 1.4426950408889634f))[0]); }
inline float reciprocal_lut(float x) { return float(aie::inv(aie::broadcast<float, 16>(x))[0]); }
// One accumulator lane (for the pairwise reduction below).
template <typename A, int N>
inline auto lane(const accum<A, N>& acc, int i) {
  if constexpr (std::is_same_v<A, accfloat>) return float(acc.template to_vector<float>()[i]);
  else return int32_t(acc.template to_vector<int32_t>()[i]);
}

// aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accfloat>: C[8 x 8] += A[8 x 8] * B[8 x 8] on 72-byte
// tiles (8 blocks of 9 bytes: A's rows, B's columns, each one block of 8 k-values), loaded
// through block-vector streams (bfp16 tiles need not be vector-aligned). Unverified assumption:
// the core reads B's blocks along k as the host model does (aie_numerics.h mmul_bfp16_888).
struct mmul_bfp16 {
  aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accfloat> m;
  mmul_bfp16() { m = aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accfloat>(aie::zeros<accfloat, 64>()); }
  void mac(const uint8_t* a, const uint8_t* b) {
    aie::block_vector<bfp16ebs8, 64> va, vb;
    aie::block_vector_input_buffer_stream<bfp16ebs8, 64> sa(reinterpret_cast<const bfp16ebs8*>(a));
    aie::block_vector_input_buffer_stream<bfp16ebs8, 64> sb(reinterpret_cast<const bfp16ebs8*>(b));
    sa >> va;
    sb >> vb;
    m.mac(va, vb);
  }
  float lane(int i) { return float(m.to_accum().template to_vector<float>()[i]); }
  // C's 64 lanes (row-major 8 x 8) from / to 64 contiguous floats (an accumulator kept in L1).
  void load_acc(const float* c) {
    aie::accum<accfloat, 64> acc;
    acc.from_vector(aie::load_v<64>(c));
    m = aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accfloat>(acc);
  }
  void store_acc(float* c) { aie::store_v(c, m.to_accum().template to_vector<float>()); }
};
}  // namespace xk

#else  // host

#include "npu/aie_numerics.h"

namespace xk {
using bf16 = xdna::aie::bf16;
using accfloat = float;
using acc32 = int32_t;
template <typename T, int N>
using vector = xdna::aie::vector<T, N>;
template <typename A, int N>
using accum = xdna::aie::accum<A, N>;
using Rounding = xdna::aie::Rounding;

using xdna::aie::load_v;
using xdna::aie::mac;
using xdna::aie::mac_run;
template <typename A, int N>
inline accum<A, N> zeros() { return {}; }

struct rounding_scope {
  explicit rounding_scope(Rounding r) : mode(r) {}
  Rounding mode;
};

inline float to_float(bf16 x) { return xdna::aie::to_float(x); }
inline bf16 to_bf16(float x, Rounding r) { return xdna::aie::to_bf16(x, r); }
inline float exp_lut(float x) { return xdna::aie::exp_lut(x); }
inline float reciprocal_lut(float x) { return xdna::aie::reciprocal_lut(x); }
template <typename A, int N>
inline A lane(const accum<A, N>& acc, int i) { return acc.lane[size_t(i)]; }
// The bfp16ebs8 8x8x8 mmul as aie_numerics.h models it (C lanes row-major, r * 8 + j).
struct mmul_bfp16 {
  xdna::aie::mmul_bfp16_888 m;
  void mac(const uint8_t* a, const uint8_t* b) { m.mac(a, b); }
  float lane(int i) const { return m.c.lane[size_t(i)]; }
  void load_acc(const float* c) {
    for (int i = 0; i < 64; ++i) m.c.lane[size_t(i)] = c[i];
  }
  void store_acc(float* c) const {
    for (int i = 0; i < 64; ++i) c[i] = m.c.lane[size_t(i)];
  }
};
}  // namespace xk

#endif

namespace xk {

// A stage kernel's L1 state: on the core, the source's own static (one per core on the array).
// On the host, npu-sim's interpreter (src/npu/sim_program.cpp) runs many cores in one process:
// it points t_core_state at the state it keeps for the core it calls, and core_state() returns
// that; unset (any direct caller) it is the source's static.
#ifdef __AIENGINE__
template <class T>
inline T& core_state(T& own) { return own; }
#else
inline thread_local void* t_core_state = nullptr;
template <class T>
inline T& core_state(T& own) { return t_core_state ? *static_cast<T*>(t_core_state) : own; }
#endif

// Reduction of an accumulator by halving: lane i += lane i + N/2 until one lane is left, in
// f32 (one rounding per add) or wrapping 32-bit integers. The order of aie_numerics.h's
// reduce_add, written out so both builds add in the same order.
template <int N>
inline float reduce_add_pairwise(const accum<accfloat, N>& acc) {
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = float(lane(acc, i));
  for (int half = N / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) v[i] = v[i] + v[i + half];
  return v[0];
}
template <int N>
inline int32_t reduce_add_pairwise(const accum<acc32, N>& acc) {
  uint32_t v[N];
  for (int i = 0; i < N; ++i) v[i] = uint32_t(int32_t(lane(acc, i)));
  for (int half = N / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) v[i] = v[i] + v[i + half];
  return int32_t(v[0]);
}

// Shift-round-saturate of one 32-bit value to int8 (aie_numerics.h srs_int8): x / 2^shift
// rounded down (Floor) or to nearest even, clamped to [-128, 127]. Plain integer code, the
// same on both builds.
inline int8_t srs_int8(int64_t x, int shift, Rounding r) {
  int64_t q = x;
  if (shift > 0) {
    const int64_t floor_q = x >> shift;  // arithmetic shift: floor
    if (r == Rounding::Floor) {
      q = floor_q;
    } else {
      const int64_t rem = x - (floor_q << shift), half = int64_t(1) << (shift - 1);
      q = floor_q + (rem > half || (rem == half && (floor_q & 1)) ? 1 : 0);
    }
  }
  return int8_t(q < -128 ? -128 : q > 127 ? 127 : q);
}

// An f32 scalar argument: design.py passes every scalar as int32, so f32 parameters (eps,
// offsets, scales) travel as their IEEE bit pattern. Plain code, the same on both builds.
inline float f32_from_bits(int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline int32_t f32_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

}  // namespace xk

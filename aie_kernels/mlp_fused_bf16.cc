// mlp_fused_bf16_*: the stage entry points of the mlp_fused design (bf16 weights), called by the
// emitted design.py in the core's program order (design.h CoreStep; docs/npu-designs.md, "Core
// programs"): x, gate_up (per 2 KiB DDR object), gate_up_give / gate_up_take (exchange h),
// down (per object), down_give / down_take (exchange y), down_result (the last core).
// npu (needs hardware and the toolchain, unverified here).
// Numerical reference: npu-sim's mlp stage (src/npu/sim_exec.cpp, mlp): gemv_bf16 of the core's
// gate and up rows, act (SiLU or tanh-GELU) x up, exchange, gemv_bf16 of its down rows. The rows
// arrive row-major, one 2 KiB object (1024 values) at a time; k % 16 == 0, so an object never
// splits a 16-value block, and one row's 16-lane f32 accumulator, reduced pairwise when the
// row ends, gives gemv_bf16's lane order and result. tests/npu/test_aie_kernels.cpp runs the
// design's program over these entry points and compares with npu-sim bit for bit.
// Scalars (name order, as design.py passes them): cores, gelu, hidden, intermediate.
#include <algorithm>
#include <cstring>

#include "kernels.h"

namespace {

constexpr int32_t kObjValues = 1024;  // one 2 KiB DDR object of bf16
constexpr int32_t kLanes = 16;

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

xk_impl::MlpFusedState g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::MlpFusedState& own_state() { return xk::core_state(g_own); }

struct Shape {
  int32_t cores, hidden, inter, ri, rh, slice;  // ri / rh: the core's gate-up / down rows; slice in bf16
};
Shape shape(int32_t cores, int32_t hidden, int32_t inter) {
  Shape s{cores, hidden, inter, ceil_div(inter, cores), ceil_div(hidden, cores), 0};
  s.slice = ceil_div(2 * (s.ri > s.rh ? s.ri : s.rh), 4) * 2;  // round_up(bytes, 4) / 2
  return s;
}

// Rows of the weights part: values [first, first + rows * k) are this stage's matrix; the
// values of `obj` start at st.pos. Row r's result goes to out[r].
void stream_rows(xk_impl::MlpFusedState& st, const xk::bf16* obj, int32_t n, int64_t first, int32_t rows,
                 int32_t k, const xk::bf16* x, xk::bf16* out, xk::Rounding rnd) {
  for (int32_t i = 0; i < n; i += kLanes, st.pos += kLanes) {
    const int64_t e = st.pos - first;
    if (e < 0 || e >= int64_t(rows) * k) continue;
    const int32_t row = int32_t(e / k), col = int32_t(e % k);
    if (col == 0) st.acc = xk::zeros<xk::accfloat, kLanes>();
    st.acc = xk::mac(st.acc, xk::load_v<kLanes>(obj + i), xk::load_v<kLanes>(x + col));
    if (col + kLanes == k) out[row] = xk::to_bf16(xk::reduce_add_pairwise(st.acc), rnd);
  }
}

}  // namespace

namespace xk_impl {
MlpFusedState& mlp_fused_bf16_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void mlp_fused_bf16_x(const xk::bf16* obj, int32_t cores, int32_t gelu, int32_t hidden, int32_t inter) {
  xk_impl::MlpFusedState& st = own_state();
  const int32_t n = hidden - st.x_have < kObjValues ? hidden - st.x_have : kObjValues;
  std::memcpy(st.x + st.x_have, obj, size_t(n) * 2);
  st.x_have += n;
  st.pos = 0;  // the weights part starts at a new object
}

extern "C" void mlp_fused_bf16_gate_up(const xk::bf16* obj, int32_t cores, int32_t gelu, int32_t hidden,
                                       int32_t inter) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::MlpFusedState& st = own_state();
  const Shape s = shape(cores, hidden, inter);
  const int64_t end = 2 * int64_t(s.ri) * hidden;  // gate rows, then up rows
  const int64_t start = st.pos;
  stream_rows(st, obj, kObjValues, 0, 2 * s.ri, hidden, st.x, st.gate_up, scope.mode);
  // The tail of an object that straddles into the down rows waits for h.
  st.carry = 0;
  if (start + kObjValues > end && end > start) {
    st.carry = int32_t(start + kObjValues - end);
    std::memcpy(st.carry_values, obj + (end - start), size_t(st.carry) * 2);
  }
}

extern "C" void mlp_fused_bf16_gate_up_give(xk::bf16* slice, int32_t cores, int32_t gelu, int32_t hidden,
                                            int32_t inter) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::MlpFusedState& st = own_state();
  const Shape s = shape(cores, hidden, inter);
  xk::bf16 act[xk_impl::MlpFusedState::kMaxRows];
  if (gelu) xk_impl::gelu_tanh_bf16(st.gate_up, act, s.ri, scope.mode);
  else xk_impl::silu_bf16(st.gate_up, act, s.ri, scope.mode);
  std::fill(slice, slice + s.slice, xk::bf16{});
  xk_impl::mul_bf16(act, st.gate_up + s.ri, slice, s.ri, scope.mode);
}

extern "C" void mlp_fused_bf16_gate_up_take(const xk::bf16* act, int32_t cores, int32_t gelu, int32_t hidden,
                                            int32_t inter) {
  xk_impl::MlpFusedState& st = own_state();
  const Shape s = shape(cores, hidden, inter);
  for (int32_t i = 0; i < inter; ++i) st.h[i] = act[(i / s.ri) * s.slice + i % s.ri];
  if (st.carry > 0) {  // the down rows that came with the last gate/up object
    const xk::rounding_scope scope(xk::Rounding::NearestEven);
    st.pos -= st.carry;
    stream_rows(st, st.carry_values, st.carry, 2 * int64_t(s.ri) * hidden, s.rh, inter, st.h, st.down, scope.mode);
    st.carry = 0;
  }
}

extern "C" void mlp_fused_bf16_down(const xk::bf16* obj, int32_t cores, int32_t gelu, int32_t hidden,
                                    int32_t inter) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  xk_impl::MlpFusedState& st = own_state();
  const Shape s = shape(cores, hidden, inter);
  stream_rows(st, obj, kObjValues, 2 * int64_t(s.ri) * hidden, s.rh, inter, st.h, st.down, scope.mode);
}

extern "C" void mlp_fused_bf16_down_give(xk::bf16* slice, int32_t cores, int32_t gelu, int32_t hidden,
                                         int32_t inter) {
  const Shape s = shape(cores, hidden, inter);
  std::fill(slice, slice + s.slice, xk::bf16{});
  std::memcpy(slice, own_state().down, size_t(s.rh) * 2);
}

extern "C" void mlp_fused_bf16_down_take(const xk::bf16* act, int32_t cores, int32_t gelu, int32_t hidden,
                                         int32_t inter) {
  xk_impl::MlpFusedState& st = own_state();
  const Shape s = shape(cores, hidden, inter);
  for (int32_t i = 0; i < hidden; ++i) st.y[i] = act[(i / s.rh) * s.slice + i % s.rh];
  st.x_have = 0;  // ready for the next invocation
}

extern "C" void mlp_fused_bf16_down_result(xk::bf16* out, int32_t cores, int32_t gelu, int32_t hidden,
                                           int32_t inter) {
  std::memcpy(out, own_state().y, size_t(hidden) * 2);
}

// lm_head_int8_*: the stage entry points of the lm_head design with int8 weights, called by the
// emitted design.py in the core's program order as lm_head_bf16.cc's: x, norm (the final-norm
// gamma), rows (per object of the core's head rows and scales) and rows_out (one f32 logits
// object of `chunk` rows, joined per column and drained).
// npu (needs hardware and the toolchain, unverified here).
// Numerical reference: lm_head_bf16.cc with its GEMV replaced by fused_stage_int8.h's: rmsnorm_bf16
// of x, the normalised x quantized per row, each row's exact 32-bit sum, the logit
// float(sum) * sx * scale (f32, unrounded, as lm_head_bf16's logits). tests/npu/test_sim_fused_int8.cpp
// compares it bit for bit with that sequence and with npu-sim's unfused int8 MatMul within a
// stated tolerance.
// Stream: [gamma][per logits object: its `chunk` rows (int8, hidden each)][their f32 scales,
// padded to 32 bytes]], taken in 32-byte blocks. Rows of the next object that share a DDR
// object with this one are taken at once into the other half of a two-object ring.
// Scalars (name order, then the runtime ones): cores, hidden, vocab; eps_bits, offset_bits.
// State in the core's L1 (xk_impl::LmHeadInt8State).
#include "fused_stage_int8.h"

namespace {

xk_impl::LmHeadInt8State g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::LmHeadInt8State& own_state() { return xk::core_state(g_own); }

using namespace xk_fused::lm_head;  // Stage, chunk_rows, enter

// The weights part: [gamma][per logits object: rows, scales], in 32-byte blocks, a logits
// object's rows in runs (to the end of the DDR object or of the rows). Row r's sum and scale go
// to slot r mod (2 chunk).
void weights(const uint8_t* obj, int32_t cores, int32_t hidden, int32_t vocab, float eps, float offset,
             xk::Rounding rnd) {
  xk_impl::LmHeadInt8State& st = own_state();
  const int32_t chunk = chunk_rows(cores, vocab);
  const int64_t objects = xk_fused::ceil_div(xk_fused::ceil_div(vocab, cores), chunk);  // the core's
  const int64_t chunk_bytes = xk_fused::i8_matrix_bytes(chunk, hidden), gamma = 2 * int64_t(hidden);
  const int64_t rows_bytes = int64_t(chunk) * hidden;  // of a logits object
  constexpr int32_t kObjBytes = 2 * xk_fused::kObjValues;
  for (int32_t i = 0; i < kObjBytes;) {
    const int64_t e = st.pos;
    int32_t n = xk_fused::kBlockBytes;
    if (e < gamma) {
      std::memcpy(st.gamma + e / 2, obj + i, xk_fused::kBlockBytes);
    } else {
      if (e == gamma) {
        xk_impl::rmsnorm_bf16(st.x, st.gamma, st.xn, hidden, eps, offset, rnd);
        st.i8.sx = xk_fused::quantize_row(st.xn, st.i8.q, hidden);
      }
      const int64_t c = (e - gamma) / chunk_bytes, w = (e - gamma) % chunk_bytes;
      const int32_t slot = int32_t(c % 2) * chunk;
      if (c < objects && w < rows_bytes) {
        n = xk_fused::run_bytes(w, rows_bytes, kObjBytes - i);
        xk_fused::gemv_i8_run(st.i8.acc, obj + i, w, n, hidden, st.i8.q, st.i8.sums + slot);
      } else if (c < objects) {  // (past the core's objects: padding)
        xk_fused::take_scales(st.i8.scales + slot, obj + i, w - rows_bytes, chunk);
      }
    }
    i += n, st.pos += n;
  }
}

}  // namespace

namespace xk_impl {
LmHeadInt8State& lm_head_int8_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void lm_head_int8_x(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                               int32_t offset_bits) {
  enter(own_state(), kX, true);
  xk_fused::take_vector(own_state().x, own_state().x_have, hidden, obj);
}

extern "C" void lm_head_int8_norm(const uint8_t* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                                  int32_t offset_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(own_state(), kNorm, true);
  weights(obj, cores, hidden, vocab, xk::f32_from_bits(eps_bits), xk::f32_from_bits(offset_bits), scope.mode);
}

extern "C" void lm_head_int8_rows(const uint8_t* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                                  int32_t offset_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(own_state(), kRows, false);
  weights(obj, cores, hidden, vocab, xk::f32_from_bits(eps_bits), xk::f32_from_bits(offset_bits), scope.mode);
}

extern "C" void lm_head_int8_rows_out(float* out, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                                      int32_t offset_bits) {
  const int32_t chunk = chunk_rows(cores, vocab), slot = (own_state().chunk_out % 2) * chunk;
  for (int32_t r = 0; r < chunk; ++r)
    out[r] = float(own_state().i8.sums[slot + r]) * own_state().i8.sx * own_state().i8.scales[slot + r];
  ++own_state().chunk_out;
}

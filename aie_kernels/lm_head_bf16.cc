// lm_head_bf16_*: the stage entry points of the lm_head design (bf16 weights), called by the
// emitted design.py in the core's program order (design.h CoreStep; docs/npu-designs.md, "Core
// programs"): x (per 2 KiB object of the replicated hidden state), norm (the final-norm gamma),
// rows (per object of the core's head rows) and rows_out (one f32 logits object of `chunk` rows,
// joined per column and drained). npu (needs hardware and the toolchain, unverified here).
// Numerical reference: the composition below (npu-sim's lm_head family runs the design's core
// programs over these entry points: src/npu/sim_exec.cpp, run_design):
// rmsnorm_bf16 of x, then gemv_bf16_f32 of the core's rows (16-lane f32 accumulators, pairwise
// reduction, the f32 sum stored unrounded). Rows arrive in 16-value blocks with one row's
// accumulator live (hidden % 16 == 0: a block never straddles a row), so the lane order is
// gemv_bf16_f32's. Rows of the next logits object that share a DDR object with this one are
// taken at once (they need only the normalised x), into the other half of a two-object ring.
// tests/npu/test_aie_stage_kernels.cpp runs the design's programs over these entry points and compares with npu-sim bit for bit.
// Scalars (name order, then the runtime ones): cores, hidden, vocab; eps_bits, offset_bits
// (RMSNorm eps and gamma offset, f32 bits). State in the core's L1 (xk_impl::LmHeadState).
#include "fused_stage.h"

namespace {

xk_impl::LmHeadState g_own;  // the core's own (L1)
// The core's state: g_own on the core; under npu-sim, the copy it keeps for the core it runs
// (xdna_aie_api.h, core_state).
xk_impl::LmHeadState& own_state() { return xk::core_state(g_own); }

using namespace xk_fused::lm_head;  // Stage, chunk_rows, enter

// The weights part: [gamma][rows], taken in 16-value blocks.
// Row r's logit goes to slot r mod (2 chunk): the rows of the next object that share a DDR
// object with this one land in the other half before this one is out.
void weights(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab, float eps, float offset,
             xk::Rounding rnd) {
  xk_impl::LmHeadState& st = own_state();
  const int32_t chunk = chunk_rows(cores, vocab);
  const int64_t rows = int64_t(xk_fused::round_up(xk_fused::ceil_div(vocab, cores), chunk));  // the core's, padded
  for (int32_t i = 0; i < xk_fused::kObjValues; i += xk_fused::kLanes, st.pos += xk_fused::kLanes) {
    const int64_t e = st.pos;
    if (e < hidden) {
      std::memcpy(st.gamma + e, obj + i, xk_fused::kLanes * 2);
      continue;
    }
    if (e == hidden) xk_impl::rmsnorm_bf16(st.x, st.gamma, st.xn, hidden, eps, offset, rnd);
    const int64_t r = (e - hidden) / hidden;
    float dot;
    if (r < rows && xk_fused::gemv_block(st.acc, obj + i, e - hidden, hidden, st.xn, dot))
      st.logits[r % (2 * chunk)] = dot;
  }
}

}  // namespace

namespace xk_impl {
LmHeadState& lm_head_bf16_state() { return own_state(); }
}  // namespace xk_impl

extern "C" void lm_head_bf16_x(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                               int32_t offset_bits) {
  enter(own_state(), kX, true);
  xk_fused::take_vector(own_state().x, own_state().x_have, hidden, obj);
}

extern "C" void lm_head_bf16_norm(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab,
                                  int32_t eps_bits, int32_t offset_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(own_state(), kNorm, true);
  weights(obj, cores, hidden, vocab, xk::f32_from_bits(eps_bits), xk::f32_from_bits(offset_bits), scope.mode);
}

extern "C" void lm_head_bf16_rows(const xk::bf16* obj, int32_t cores, int32_t hidden, int32_t vocab,
                                  int32_t eps_bits, int32_t offset_bits) {
  const xk::rounding_scope scope(xk::Rounding::NearestEven);
  enter(own_state(), kRows, false);
  weights(obj, cores, hidden, vocab, xk::f32_from_bits(eps_bits), xk::f32_from_bits(offset_bits), scope.mode);
}

extern "C" void lm_head_bf16_rows_out(float* out, int32_t cores, int32_t hidden, int32_t vocab, int32_t eps_bits,
                                      int32_t offset_bits) {
  const int32_t chunk = chunk_rows(cores, vocab);
  std::memcpy(out, own_state().logits + (own_state().chunk_out % 2) * chunk, size_t(chunk) * 4);
  ++own_state().chunk_out;
}

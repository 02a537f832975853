// The entry points of the core kernels in this directory, as the emitted design.py calls them
// (FIFO buffers in design order, then int32 scalars). On the host every *.cc here is compiled
// into xdna_npu against the host mapping of xdna_aie_api.h, so the simulator and the tests call
// exactly the source the cores would run. Add a kernel: its .cc here, its prototype below.
#pragma once
#include <cstdint>

#include "xdna_aie_api.h"

extern "C" {
void eltwise_add_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n);
void eltwise_exp_bf16(const xk::bf16* x, xk::bf16* y, int32_t n);
void eltwise_gelu_bf16(const xk::bf16* x, xk::bf16* y, int32_t n);
void eltwise_mul_bf16(const xk::bf16* a, const xk::bf16* b, xk::bf16* c, int32_t n);
void eltwise_scale_bf16(const xk::bf16* x, const uint8_t* s_bytes, xk::bf16* y, int32_t n);
void gemv_bf16(const xk::bf16* W, const xk::bf16* x, xk::bf16* y, int32_t k, int32_t rows);
void gemv_int8(const int8_t* W, const int8_t* x, int8_t* y, int32_t k, int32_t rows, int32_t shift);
void rmsnorm_bf16(const xk::bf16* x, const xk::bf16* gamma, xk::bf16* y, int32_t hidden);
}

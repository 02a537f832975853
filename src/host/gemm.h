// Internal interface between the matmul driver (matmul.cpp, gemm.cpp) and the per-ISA kernels
// (gemm_scalar.cpp, gemm_avx2.cpp, gemm_avx512.cpp). Not part of the public API.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace xdna::host {

// A weight matrix w[N, K] as rows of its storage dtype. int8/int4 rows carry f32 scales, one per
// `group` values (group == K: per output channel).
struct WeightRows {
  DType dtype = DType::F32;
  const uint8_t* data = nullptr;
  int64_t row_bytes = 0;  // distance between rows
  int64_t rows = 0, cols = 0;
  const float* scales = nullptr;
  int64_t group = 0;
  bool q6_k_repacked = false;  // Q6_K rows in repack_q6_k_blocks' layout (rows_q6_k_repacked_avx512)

  const uint8_t* row(int64_t n) const { return data + n * row_bytes; }
  const float* row_scales(int64_t n) const { return scales ? scales + n * (cols / group) : nullptr; }
};

// The activation row a GEMV dots against, prepared once per call: x itself plus the even/odd
// deinterleaved copies the packed-pair formats (int4) read.
struct XRow {
  const float* x = nullptr;
  const float* even = nullptr;  // x[0], x[2], ...
  const float* odd = nullptr;   // x[1], x[3], ...
  int64_t k = 0;
  // x quantized to int8 per block of 32 (scale max|x|/127) for the int4 VNNI dot, deinterleaved
  // like even/odd; per 8 values of x: 8·Σq (the offset of the unsigned nibbles) and the scale.
  const int8_t* q_even = nullptr;
  const int8_t* q_odd = nullptr;
  const int32_t* q_corr8 = nullptr;
  const float* q_scale8 = nullptr;
  // The same quantized x in natural order as unsigned q + 128 (int8 VNNI dot), scale per 4 values.
  const uint8_t* q_u8 = nullptr;
  const float* q_scale4 = nullptr;
  // The same quantized x as signed int8 in natural order (GGML dots; q_scale4 gives the scales),
  // and per 16 values the dequantized sum s·Σq (the offset/min terms of the GGML formats).
  const int8_t* q_s8 = nullptr;
  const float* q_xsum16 = nullptr;
  // x rounded to bf16 (nearest even) for the vdpbf16ps bf16 dot.
  const uint16_t* x_bf16 = nullptr;
  // Row kernels (RowsKernel): Σx̂ per weight group (the offset of unsigned int8/int4
  // weights, removed once per group), and 128·Σq per 4 values (the same for bfp16 mantissas).
  const float* q_xsum_group = nullptr;
  const int32_t* q_off4 = nullptr;
  // -8·Σq per 4 values: the Q4_0 row kernel's vpdpbusd starts from it (the nibbles' -8 offset);
  // the Q5_0 one starts from twice it (its 5-bit values' -16 offset).
  const int32_t* q_neg8sum4 = nullptr;
};

// A GEMV kernel over `count` consecutive weight rows (1 <= count <= kGemvRows), one after
// another: out[r] = Σ_k w[n + r][k]·x[k] with the row's scales applied. One call per chunk of rows
// keeps the per-row dispatch out of the driver's loop.
constexpr int kGemvRows = 16;
using RowsKernel = void (*)(const WeightRows& w, int64_t n, int count, const XRow& x, float* out);

// f32 GEMM microkernel: C[mr, nr] (+)= Ap · Bp over kc, where Ap is packed [kc][MR] and Bp
// [kc][NR] (zero-padded); mr <= MR and nr <= NR say how much of the tile to store.
using SgemmUkernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                              int64_t mr, int64_t nr, bool accumulate);
// bf16 GEMM microkernel (vdpbf16ps): Ap packed [kc/2][MR] and Bp [kc/2][NR] as uint32 pairs of
// bf16 (k even in the low half), f32 accumulation.
using Bf16Ukernel = void (*)(int64_t kpairs, const uint32_t* a, const uint32_t* b, float* c,
                             int64_t ldc, int64_t mr, int64_t nr, bool accumulate);

// One instruction set's kernels. Every dot returns Σ_k w[k]·x[k] for one weight row of length
// x.k with the row's scales (int8/int4) applied.
struct IsaKernels {
  const char* name;
  int mr, nr;  // f32 microkernel tile
  SgemmUkernel sgemm;
  int bf16_mr, bf16_nr;  // 0 when the ISA has no bf16 microkernel
  Bf16Ukernel bf16gemm;
  float (*dot_f32)(const float* w, const XRow& x);
  float (*dot_f16)(const uint16_t* w, const XRow& x);
  float (*dot_bf16)(const uint16_t* w, const XRow& x);
  float (*dot_i8)(const int8_t* w, const float* scales, int64_t group, const XRow& x);
  float (*dot_i4)(const uint8_t* w, const float* scales, int64_t group, const XRow& x);
  float (*dot_bfp16)(const uint8_t* w, const XRow& x);
  // int4 · int8-quantized x with vpdpbusd (nullptr without VNNI); needs K and group % 128 == 0.
  float (*dot_i4_q8)(const uint8_t* w, const float* scales, int64_t group, const XRow& x);
  // int8 · int8-quantized x with vpdpbusd (nullptr without VNNI); needs K and group % 64 == 0.
  float (*dot_i8_q8)(const int8_t* w, const float* scales, int64_t group, const XRow& x);
  // Converts n values of a row (starting on a block boundary) to f32: B-panel packing for GEMM.
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  // B-panel packing: dst[k·NR + c] = src[c][k] for c < nr (zero for nr <= c < NR), k < kc.
  void (*pack_panel)(const float* const* src, int64_t nr, int64_t NR, int64_t kc, float* dst);
  // Rounds n f32 values to bf16 (nearest even): packing x for the bf16 GEMM.
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n);
  // bfp16 · int8-quantized x (q_u8) with vpdpbusd (nullptr without AVX512-VBMI); needs K % 64 == 0.
  float (*dot_bfp16_q8)(const uint8_t* w, const XRow& x) = nullptr;
  // GGML rows · int8-quantized x (q_s8, q_scale4, q_xsum16); nullptr where the ISA has none (the
  // row is then decoded with dequantize_row and dotted in f32).
  float (*dot_q8_0)(const uint8_t* w, const XRow& x) = nullptr;
  float (*dot_q4_0)(const uint8_t* w, const XRow& x) = nullptr;
  float (*dot_q5_0)(const uint8_t* w, const XRow& x) = nullptr;  // bit-identical to dot_q8_0 on its q8_0 form
  float (*dot_q4_k)(const uint8_t* w, const XRow& x) = nullptr;
  float (*dot_q5_k)(const uint8_t* w, const XRow& x) = nullptr;
  float (*dot_q6_k)(const uint8_t* w, const XRow& x) = nullptr;
  // bf16 row · x_bf16 with vdpbf16ps (bf16 products, f32 sums); only valid where has_avx512_bf16().
  float (*dot_bf16_bf16)(const uint16_t* w, const XRow& x) = nullptr;
  // GEMV row kernels (nullptr: the driver calls the one-row dots). What each reads of XRow:
  RowsKernel rows_bf16 = nullptr;   // x_bf16; only valid where has_avx512_bf16()
  RowsKernel rows_i8 = nullptr;     // q_s8, q_scale4, q_xsum_group; K and group % 64 == 0
  RowsKernel rows_i4 = nullptr;     // q_even, q_odd, q_scale8, q_xsum_group; K and group % 128 == 0
  RowsKernel rows_bfp16 = nullptr;  // q_s8, q_scale4, q_off4; K % 64 == 0
  // x -> signed int8 per block of 32 (q_s8, q_scale4, q_xsum16; K % 32 == 0), bit-identical to
  // the scalar quantizer in matmul.cpp; nullptr: the scalar one runs.
  void (*quantize_x_s8)(const float* x, int64_t K, int8_t* q, float* scale4, float* xsum16) = nullptr;
  // The same deinterleaved for the int4 dots (q_even | q_odd, q_corr8, q_scale8; K % 32 == 0).
  void (*quantize_x_q8)(const float* x, int64_t K, int8_t* q, int32_t* corr8, float* scale8) = nullptr;
  // Q4_0 row kernel, four rows per pass (gemm_ggml_avx512.cpp; needs AVX-512 VNNI): reads q_s8,
  // q_scale4, q_neg8sum4.
  RowsKernel rows_q4_0 = nullptr;
  // Q6_K row kernel, four rows per pass (gemm_ggml_avx512.cpp; AVX-512 VNNI): q_s8, q_scale4, q_xsum16.
  RowsKernel rows_q6_k = nullptr;
  // Q8_0 row kernel, four rows per pass (gemm_ggml_avx512.cpp; AVX-512 VNNI): q_s8, q_scale4.
  // Bit-identical to dot_q8_0.
  RowsKernel rows_q8_0 = nullptr;
  // Q5_0 row kernel, four rows per pass (gemm_ggml_avx512.cpp; AVX-512 VNNI): q_s8, q_scale4,
  // q_neg8sum4. Bit-identical to rows_q8_0 on the same weights as q8_0 (same d, q - 16 as int8).
  RowsKernel rows_q5_0 = nullptr;
};

void rows_q4_0_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out);
void rows_q6_k_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out);
void rows_q8_0_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out);
void rows_q5_0_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out);
// Q6_K super-blocks reordered for the AVX-512 GEMV (gemm_q6k_avx512.cpp; the same 210 bytes
// each), and that GEMV (AVX-512 VNNI; reads q_s8, q_scale4). It differs from the GGML-layout
// kernels only in f32 rounding order (its integer sums are exact). Both are compiled for AVX-512:
// call them only where the AVX-512 VNNI kernels are active.
void repack_q6_k_blocks(const uint8_t* src, uint8_t* dst, int64_t blocks);
void rows_q6_k_repacked_avx512(const WeightRows& w, int64_t n, int count, const XRow& x, float* out);

// The AVX2 panel packer, shared by the AVX-512 table (every AVX-512 CPU has AVX2).
void pack_panel_avx2(const float* const* src, int64_t nr, int64_t NR, int64_t kc, float* dst);

const IsaKernels& scalar_kernels();
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();
// The table for xdna::active_isa(), with the bf16 microkernel only where has_avx512_bf16().
const IsaKernels& active_kernels();

// Scalar reference conversions shared by all paths (they define the numerics).
float half_to_float(uint16_t h);
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16_rne(float x);
// 2^(E-133): the scale of a bfp16 block with exponent byte E (mantissa m gives m · scale).
const float* bfp16_scale_table();

// Dequantizes w[n, k0 : k0 + len] to f32 (k0 and len on block boundaries, except at row end).
void dequant_range(const IsaKernels& kern, const WeightRows& w, int64_t n, int64_t k0,
                   int64_t len, float* out);

// A whole weight matrix packed once for the GEMM microkernel: NR-row panels over all of K,
// panel p at p·K·NR floats (f32 kernel) or p·⌈K/2⌉·NR bf16 pairs (bf16 kernel). A KC slice of a
// panel is then exactly what the per-call packing would produce, so results are bit-identical.
struct PackedWeights {
  bool bf16 = false;  // packed as bf16 pairs for the vdpbf16ps kernel
  int nr = 0;         // panel width (the ISA's microkernel NR)
  // int8 per-channel weights for the VNNI GEMM (gemm_i8_avx512.cpp): panels of 32 columns ×
  // K padded to blocks of 32 (as k-quads × 4 bytes), with -128·Σw per block and column (the
  // u8-offset correction, [panel][block][32]) and each column's scale.
  bool i8 = false;
  int64_t kquads = 0;
  std::vector<int32_t> colsum;
  std::vector<float> col_scale;
  int64_t rows = 0, cols = 0;
  std::unique_ptr<HeapBuffer> storage;  // 64-byte aligned (the microkernels' aligned loads)
  const float* f32() const { return reinterpret_cast<const float*>(storage->data()); }
  const uint32_t* pairs() const { return reinterpret_cast<const uint32_t*>(storage->data()); }
  size_t bytes() const { return storage ? storage->size() : 0; }
};
std::shared_ptr<const PackedWeights> pack_weights(const WeightRows& w);

// int8 weights with per-channel scales go to the VNNI GEMM (AVX-512 VNNI only).
bool use_i8_vnni_gemm(const WeightRows& w);
void pack_weights_i8(const WeightRows& w, PackedWeights& p);
void gemm_i8_vnni(const float* x, int64_t ldx, int64_t m, const PackedWeights& p, float* y, int64_t ldy);
// GGML Q8_0 / Q4_0 / Q5_0 weights with more than a few x rows (prefill) go to the same int8 VNNI tile,
// x quantized per block of 32 (as the GGML GEMV does), the weights unpacked per panel on the fly.
bool use_ggml_vnni_gemm(const WeightRows& w);
void gemm_ggml_vnni(const float* x, int64_t ldx, int64_t m, const WeightRows& w, float* y, int64_t ldy,
                    const float* bias);

// y[M, N] = x[M, K] · wᵀ (+ bias[N]), row strides ldx / ldy; blocked, packed, multi-threaded.
// `packed` (optional) is pack_weights(w): the weight panels are then read from it instead of
// re-packed. `bias` (optional) is added to each output tile as it is finished.
void gemm(const float* x, int64_t ldx, const WeightRows& w, float* y, int64_t ldy, int64_t m,
          const PackedWeights* packed = nullptr, const float* bias = nullptr);

// Below this many flops (2·M·N·K) a GEMM runs on the calling thread: splitting it costs more in
// fork/join than the second core gives back. Measured (best of 400, both cores free, Zen 4):
// 8x128x256 (0.5 MFLOP) 9.8 us on one thread vs 8.6 on two; 16x384x384 (4.7 MFLOP) 80 vs 47.
constexpr int64_t kGemmSerialFlops = int64_t{1} << 20;

// Packed-weight cache for constant (read-only, mapped) weights, keyed by buffer, offset, dtype
// and shape. Entries hold the weight buffer, so its address cannot be reused while cached.
// Bounded by XDNA_PACK_CACHE_MB (default 1024 MiB); weights past the bound are packed per call.
std::shared_ptr<const PackedWeights> cached_packed_weights(const Tensor& w, const WeightRows& wr);
void clear_packed_weight_cache();
// Packs constant weights now and keeps them cached past the bound (and outside its count) while
// the returned handle lives; nullptr for weights the cache never holds (writable buffers).
std::shared_ptr<void> pin_packed_weights(const Tensor& w, const WeightRows& wr);
size_t packed_weight_cache_bytes();
// For the GEMV: Q6_K weights in a file mapping, on AVX-512 VNNI, come back as a view of their
// repacked copy (q6_k_repacked set; `hold` keeps it alive), made once and cached. Repacking
// releases the mapping's pages as it goes (read again from the page cache only if something
// else touches them), so the weights are not held twice. Any other weights (heap, including a
// model's weight arena) come back unchanged.
WeightRows q6_k_repacked_rows(const Tensor& w, const WeightRows& wr, std::shared_ptr<const PackedWeights>& hold);

}  // namespace xdna::host

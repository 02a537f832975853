// matmul: checks shapes and dtypes, then runs the GEMV path (small M: streams each weight row
// once and dots it with every x row while it is in cache) or the blocked GEMM (gemm.cpp).
#include "host/matmul.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/ggml_blocks.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "host/gemm.h"

namespace xdna::host {
namespace {

// Up to this many x rows the weights are streamed once (GEMV); above it, packing pays off.
constexpr int64_t kGemvMaxRows = 4;

// y[r] = out[r] + bias[r] (+ 0 without a bias, so -0 still becomes +0 as it always has).
void store_rows(const float* __restrict out, const float* __restrict bias, float* __restrict y, int count) {
  if (bias)
    for (int r = 0; r < count; ++r) y[r] = out[r] + bias[r];
  else
    for (int r = 0; r < count; ++r) y[r] = out[r] + 0.f;
}

[[noreturn]] void fail(const Tensor& x, const Tensor& w, const std::string& why) {
  throw std::invalid_argument("matmul: x " + shape_str(x.shape()) + " (" + std::string(dtype_name(x.dtype())) +
                              ") and w " + shape_str(w.shape()) + " (" + std::string(dtype_name(w.dtype())) +
                              "): " + why);
}

WeightRows weight_rows(const Tensor& x, const Tensor& w) {
  if (w.ndim() != 2) fail(x, w, "weights must be 2-D [out, in]");
  WeightRows r;
  r.dtype = w.dtype();
  r.rows = w.dim(0);
  r.cols = w.dim(1);
  r.data = reinterpret_cast<const uint8_t*>(w.raw());
  const auto& tr = traits(w.dtype());
  if (w.dtype() == DType::I32) fail(x, w, "i32 is not a weight dtype");
  if (tr.block_elems == 1) {
    if (w.strides()[1] != 1) fail(x, w, "weight rows must be contiguous");
    r.row_bytes = w.strides()[0] * tr.block_bytes;
  } else {
    r.row_bytes = dtype_bytes(w.dtype(), w.strides()[0]);
  }
  if (w.dtype() == DType::I8 || w.dtype() == DType::I4) {
    const auto& sc = w.scales();
    if (!sc || w.group_size() <= 0) fail(x, w, "int8/int4 weights need scales");
    r.group = w.group_size();
    if (r.cols % r.group != 0 || sc->numel() != r.rows * (r.cols / r.group))
      fail(x, w, "scales " + shape_str(sc->shape()) + " with group " + std::to_string(r.group) +
                     " do not match the weights");
    if (w.dtype() == DType::I4 && r.group % 2 != 0) fail(x, w, "int4 groups must be even");
    r.scales = sc->data<float>();
  }
  return r;
}

// x -> int8 per block of 32 (scale max|x|/127, round to nearest), stored deinterleaved as
// [even k | odd k], plus per 8 values the nibble-offset correction 8·Σq and the block scale.
void quantize_x_q8(const float* x, int64_t K, int8_t* q, int32_t* corr8, float* scale8) {
  int8_t* even = q;
  int8_t* odd = q + K / 2;
  for (int64_t b = 0; b < K; b += 32) {
    float amax = 0;
    for (int64_t k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float s = amax / 127, inv = amax > 0 ? 127 / amax : 0;
    for (int64_t j = b; j < b + 32; j += 8) {
      int32_t sum = 0;
      for (int64_t k = j; k < j + 8; ++k) {
        const int v = static_cast<int>(std::nearbyint(x[k] * inv));
        sum += v;
        if (k % 2) odd[k / 2] = static_cast<int8_t>(v);
        else even[k / 2] = static_cast<int8_t>(v);
      }
      corr8[j / 8] = 8 * sum;
      scale8[j / 8] = s;
    }
  }
}

// x -> int8 per block of 32 as above, signed and in natural order (the GGML dots), with the
// scale per 4 values and the dequantized sum s·Σq per 16 values.
void quantize_x_s8(const float* x, int64_t K, int8_t* q, float* scale4, float* xsum16) {
  for (int64_t b = 0; b < K; b += 32) {
    float amax = 0;
    for (int64_t k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float s = amax / 127, inv = amax > 0 ? 127 / amax : 0;
    for (int64_t j = b; j < b + 32; j += 16) {
      int32_t sum = 0;
      for (int64_t k = j; k < j + 16; ++k) {
        const int v = static_cast<int>(std::nearbyint(x[k] * inv));
        q[k] = static_cast<int8_t>(v);
        sum += v;
      }
      xsum16[j / 16] = s * static_cast<float>(sum);
    }
    for (int64_t j = b; j < b + 32; j += 4) scale4[j / 4] = s;
  }
}

// The GGML dot for dtype t, or nullptr when this ISA has none.
auto ggml_dot(const IsaKernels& kern, DType t) -> float (*)(const uint8_t*, const XRow&) {
  switch (t) {
    case DType::Q8_0: return kern.dot_q8_0;
    case DType::Q4_0: return kern.dot_q4_0;
    case DType::Q5_0: return kern.dot_q5_0;
    case DType::Q4_K: return kern.dot_q4_k;
    case DType::Q5_K: return kern.dot_q5_k;
    case DType::Q6_K: return kern.dot_q6_k;
    default: return nullptr;
  }
}

float dot_row(const IsaKernels& kern, const WeightRows& w, int64_t n, const XRow& x, float* scratch) {
  const uint8_t* row = w.row(n);
  switch (w.dtype) {
    case DType::F32: return kern.dot_f32(reinterpret_cast<const float*>(row), x);
    case DType::F16: return kern.dot_f16(reinterpret_cast<const uint16_t*>(row), x);
    case DType::BF16:
      if (x.x_bf16) return kern.dot_bf16_bf16(reinterpret_cast<const uint16_t*>(row), x);
      return kern.dot_bf16(reinterpret_cast<const uint16_t*>(row), x);
    case DType::I8: return kern.dot_i8(reinterpret_cast<const int8_t*>(row), w.row_scales(n), w.group, x);
    case DType::I4: return kern.dot_i4(row, w.row_scales(n), w.group, x);
    case DType::BFP16: return kern.dot_bfp16(row, x);
    default: break;
  }
  if (x.q_s8) return ggml_dot(kern, w.dtype)(row, x);
  // GGML blocks without a SIMD dot: decode the row (reference numerics), then an f32 dot.
  dequantize_row(w.dtype, row, scratch, w.cols);
  return kern.dot_f32(scratch, x);
}

// The row kernel for w on this ISA, or nullptr (then the one-row f32-x dots run). The int8, int4
// and bfp16 ones quantize x to int8 and need AVX-512 VNNI (bfp16 also VBMI: only then is it set).
RowsKernel rows_kernel(const IsaKernels& kern, const WeightRows& w) {
  const int64_t K = w.cols;
  switch (w.dtype) {
    case DType::BF16: return has_avx512_bf16() ? kern.rows_bf16 : nullptr;
    case DType::I8: return has_avx512_vnni() && K % 64 == 0 && w.group % 64 == 0 ? kern.rows_i8 : nullptr;
    case DType::I4: return has_avx512_vnni() && K % 128 == 0 && w.group % 128 == 0 ? kern.rows_i4 : nullptr;
    case DType::BFP16: return has_avx512_vnni() && K % 64 == 0 ? kern.rows_bfp16 : nullptr;
    case DType::Q4_0: return has_avx512_vnni() ? kern.rows_q4_0 : nullptr;
    case DType::Q6_K:
      if (w.q6_k_repacked) return rows_q6_k_repacked_avx512;  // only made where it runs
      return has_avx512_vnni() ? kern.rows_q6_k : nullptr;
    case DType::Q8_0: return has_avx512_vnni() ? kern.rows_q8_0 : nullptr;
    case DType::Q5_0: return has_avx512_vnni() ? kern.rows_q5_0 : nullptr;
    default: return nullptr;
  }
}

void gemv(const float* x, int64_t m, const WeightRows& w, const float* bias, float* y) {
  const IsaKernels& kern = active_kernels();
  const int64_t N = w.rows, K = w.cols;
  const RowsKernel rows = rows_kernel(kern, w);
  // What x has to be turned into, once per call, for the kernels that will run.
  const bool f32_deint = w.dtype == DType::I4 && !rows;  // int4 f32 dot: even/odd x
  const bool q8_deint = w.dtype == DType::I4 && rows;    // int4 row kernel: int8 x, even/odd
  // GGML rows are whole blocks of 32 or 256 values, so K is a multiple of 32.
  const bool q8_s8 = ggml_dot(kern, w.dtype) != nullptr || (rows && (w.dtype == DType::I8 || w.dtype == DType::BFP16));
  const bool bf16_x = rows && w.dtype == DType::BF16;  // rounded to bf16 once (the bf16 GEMM's numerics)
  const int64_t groups = w.group > 0 ? K / w.group : 0;
  std::vector<float> deint(f32_deint ? m * K : 0);
  std::vector<int8_t> xq(q8_deint || q8_s8 ? m * K : 0);
  std::vector<int32_t> corr(q8_deint ? m * K / 8 : 0), off4(rows && w.dtype == DType::BFP16 ? m * K / 4 : 0);
  const bool neg8 = rows && (w.dtype == DType::Q4_0 || w.dtype == DType::Q5_0);  // their row kernels' offsets
  std::vector<int32_t> neg8sum4(neg8 ? m * K / 4 : 0);
  std::vector<float> qscale8(q8_deint ? m * K / 8 : 0), qscale4(q8_s8 ? m * K / 4 : 0), xsum16(q8_s8 ? m * K / 16 : 0);
  std::vector<float> xsum_group(rows && groups ? m * groups : 0);
  std::vector<uint16_t> xb(bf16_x ? m * K : 0);
  std::vector<XRow> xr(m);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * K;
    XRow& r = xr[i];
    r = {xi, nullptr, nullptr, K};
    if (f32_deint) {
      float* even = deint.data() + i * K;
      float* odd = even + K / 2;
      for (int64_t k = 0; k < K / 2; ++k) {
        even[k] = xi[2 * k];
        odd[k] = xi[2 * k + 1];
      }
      r.even = even;
      r.odd = odd;
    }
    if (q8_deint) {
      (kern.quantize_x_q8 ? kern.quantize_x_q8 : quantize_x_q8)(xi, K, xq.data() + i * K, corr.data() + i * K / 8,
                                                               qscale8.data() + i * K / 8);
      r.q_even = xq.data() + i * K;
      r.q_odd = r.q_even + K / 2;
      r.q_corr8 = corr.data() + i * K / 8;
      r.q_scale8 = qscale8.data() + i * K / 8;
      // Σx̂ per group: Σ scale · (8·Σq) / 8 over its 8-value chunks.
      float* sums = xsum_group.data() + i * groups;
      for (int64_t g = 0; g < groups; ++g) {
        float t = 0;
        for (int64_t j = g * w.group / 8; j < (g + 1) * w.group / 8; ++j) t += r.q_scale8[j] * static_cast<float>(r.q_corr8[j] / 8);
        sums[g] = t;
      }
      r.q_xsum_group = sums;
    }
    if (bf16_x) {
      kern.f32_to_bf16(xi, xb.data() + i * K, K);
      r.x_bf16 = xb.data() + i * K;
    }
    if (q8_s8) {
      (kern.quantize_x_s8 ? kern.quantize_x_s8 : quantize_x_s8)(xi, K, xq.data() + i * K, qscale4.data() + i * K / 4,
                                                               xsum16.data() + i * K / 16);
      r.q_s8 = xq.data() + i * K;
      r.q_scale4 = qscale4.data() + i * K / 4;
      r.q_xsum16 = xsum16.data() + i * K / 16;
      if (rows && w.dtype == DType::I8) {  // Σx̂ per group from the per-16 sums
        float* sums = xsum_group.data() + i * groups;
        for (int64_t g = 0; g < groups; ++g) {
          float t = 0;
          for (int64_t j = g * w.group / 16; j < (g + 1) * w.group / 16; ++j) t += r.q_xsum16[j];
          sums[g] = t;
        }
        r.q_xsum_group = sums;
      }
      if (rows && w.dtype == DType::BFP16) {  // 128·Σq per 4 values: the mantissas' +128 offset
        int32_t* o = off4.data() + i * K / 4;
        for (int64_t j = 0; j < K / 4; ++j) {
          const int8_t* q = r.q_s8 + 4 * j;
          o[j] = 128 * (q[0] + q[1] + q[2] + q[3]);
        }
        r.q_off4 = o;
      }
      if (neg8) {  // -8·Σq per 4 values: Q4_0's nibble offset (Q5_0 doubles it)
        int32_t* o = neg8sum4.data() + i * K / 4;
        for (int64_t j = 0; j < K / 4; ++j) {
          const int8_t* q = r.q_s8 + 4 * j;
          o[j] = -8 * (q[0] + q[1] + q[2] + q[3]);
        }
        r.q_neg8sum4 = o;
      }
    }
  }
  if (rows) {
    // Each thread streams one contiguous range of rows, start to end.
    parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
      // The outputs go through plain locals: with -fno-strict-aliasing the copy loop reloaded
      // every captured pointer after each store, ~19 scalar instructions per output (1.8% of
      // Gemma 3 270M's decode samples, for its 262144-row head).
      float* const yy = y;
      const float* const bb = bias;
      const int64_t ld = N;
      float out[kGemvRows];
      for (int64_t n = n0; n < n1; n += kGemvRows) {
        const int count = static_cast<int>(std::min<int64_t>(kGemvRows, n1 - n));
        for (int64_t i = 0; i < m; ++i) {
          rows(w, n, count, xr[i], out);
          store_rows(out, bb ? bb + n : nullptr, yy + i * ld + n, count);
        }
      }
    });
    return;
  }
  // Rows per chunk: enough to amortise the call, few enough to balance threads.
  parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    std::vector<float> scratch(ggml::is_block_dtype(w.dtype) && !q8_s8 ? K : 0);
    auto one = [&](int64_t n) {
      for (int64_t i = 0; i < m; ++i)
        y[i * N + n] = dot_row(kern, w, n, xr[i], scratch.data()) + (bias ? bias[n] : 0.f);
    };
    // Two interleaved halves: two sequential DRAM streams in flight per core instead of one.
    const int64_t half = (n1 - n0 + 1) / 2;
    for (int64_t j = 0; j < half; ++j) {
      one(n0 + j);
      if (n0 + half + j < n1) one(n0 + half + j);
    }
  });
}

}  // namespace

void matmul(const Tensor& x_in, const Tensor& w, const Tensor* bias, Tensor& y) {
  if (x_in.dtype() != DType::F32) fail(x_in, w, "x must be f32");
  if (x_in.ndim() < 1) fail(x_in, w, "x must have at least one dimension");
  const WeightRows wr = weight_rows(x_in, w);
  const int64_t K = wr.cols, N = wr.rows;
  if (x_in.dim(-1) != K)
    fail(x_in, w, "inner dimensions differ (" + std::to_string(x_in.dim(-1)) + " vs " + std::to_string(K) + ")");
  Shape out_shape = x_in.shape();
  out_shape.back() = N;
  if (bias && (bias->dtype() != DType::F32 || bias->shape() != Shape{N}))
    fail(x_in, w, "bias " + shape_str(bias->shape()) + " (" + std::string(dtype_name(bias->dtype())) +
                      ") must be f32 " + shape_str({N}));
  if (y.dtype() != DType::F32 || y.shape() != out_shape || !y.is_contiguous() || !y.writable())
    fail(x_in, w, "output " + shape_str(y.shape()) + " must be a writable contiguous f32 " + shape_str(out_shape));

  const Tensor x = x_in.contiguous();
  const int64_t M = K ? x.numel() / K : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  if (M == 0 || N == 0) return;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const Tensor b = bias ? bias->contiguous() : Tensor();
  const float* bp = bias ? b.data<float>() : nullptr;
  if (M <= kGemvMaxRows) {
    std::shared_ptr<const PackedWeights> repacked;  // Q6_K: the GEMV's own layout, made once
    gemv(xp, M, q6_k_repacked_rows(w, wr, repacked), bp, yp);
    return;
  }
  if (use_ggml_vnni_gemm(wr)) {
    gemm_ggml_vnni(xp, K, M, wr, yp, N, bp);
    return;
  }
  // Constant weights are packed once (bit-identical to packing per call).
  // int8 per-channel weights on VNNI always run the int8 GEMM (packed per call if not cached).
  auto packed = cached_packed_weights(w, wr);
  if (!packed && use_i8_vnni_gemm(wr)) packed = pack_weights(wr);
  gemm(xp, K, wr, yp, N, M, packed.get(), bp);  // the bias is added to each tile as it finishes
}

std::shared_ptr<void> pin_packed_weights(const Tensor& w) {
  return pin_packed_weights(w, weight_rows(w, w));
}

Tensor matmul(const Tensor& x, const Tensor& w, const Tensor* bias) {
  if (x.ndim() < 1 || w.ndim() != 2) fail(x, w, "x must be [..., in] and w 2-D [out, in]");
  Shape out_shape = x.shape();
  out_shape.back() = w.dim(0);
  Tensor y = Tensor::empty(out_shape, DType::F32);
  matmul(x, w, bias, y);
  return y;
}

}  // namespace xdna::host

#include "host/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/cpu.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "host/ops_math.h"
#include "host/ops_simd.h"

namespace xdna::host {

// Elementwise work below this many values runs on the calling thread: waking the team costs more.
constexpr int64_t kGrainElems = 1 << 15;

[[noreturn]] static void bad_shape(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

static Tensor packed_f32(const char* op, const Tensor& x) {
  if (!x.defined()) bad_shape(op, "input tensor is undefined");
  if (x.dtype() != DType::F32)
    bad_shape(op, "expects f32 activations, got " + std::string(dtype_name(x.dtype())));
  return x.contiguous();
}

// A new packed f32 tensor with x's values, for ops that work in place on their output.
static Tensor packed_copy(const char* op, const Tensor& x) {
  Tensor p = packed_f32(op, x);
  return p.buffer() == x.buffer() ? p.clone() : p;  // contiguous() already copied strided input
}

// Rows of `d` values a kernel handles per parallel chunk so a chunk is at least kGrainElems.
static int64_t row_grain(int64_t d) { return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(d, 1)); }

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.contiguous();
  return Tensor::from_vector(t.shape(), t.to_vector());
}

// ---- elementwise -------------------------------------------------------------------------------

// The loops live in functions over plain pointer arguments: the build uses -fno-strict-aliasing,
// so a loop inside a lambda would reload captured pointers after every store and not vectorize.
template <typename Fn>
static void map1(const float* x, float* y, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i) y[i] = fn(x[i]);
}
template <typename Fn>
static void map2(const float* a, const float* b, float* y, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i) y[i] = fn(a[i], b[i]);
}

template <typename Fn>
static Tensor binary(const char* op, const Tensor& a_in, const Tensor& b_in, Fn fn) {
  const Tensor a = packed_f32(op, a_in), b = packed_f32(op, b_in);
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const bool suffix = sb.size() <= sa.size() && std::equal(sb.begin(), sb.end(), sa.end() - sb.size());
  if (!suffix)
    bad_shape(op, "second input " + shape_str(sb) + " does not broadcast over " + shape_str(sa));
  Tensor y = Tensor::empty(sa);
  const int64_t n = a.numel(), m = b.numel();
  if (n == 0) return y;
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  if (m == n) {  // same shapes: split the flat range, not the (single) row
    parallel_for(n, kGrainElems, [&](int64_t i0, int64_t i1) {
      map2(pa + i0, pb + i0, py + i0, i1 - i0, fn);
    });
    return y;
  }
  parallel_for(n / m, row_grain(m), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) map2(pa + r * m, pb, py + r * m, m, fn);
  });
  return y;
}

template <typename Fn>
static Tensor unary(const char* op, const Tensor& x_in, Fn fn) {
  const Tensor x = packed_f32(op, x_in);
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  float* py = y.data<float>();
  parallel_for(x.numel(), kGrainElems, [&](int64_t i0, int64_t i1) {
    map1(px + i0, py + i0, i1 - i0, fn);
  });
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) {
  return binary("add", a, b, [](float x, float y) { return x + y; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary("mul", a, b, [](float x, float y) { return x * y; });
}
Tensor scale(const Tensor& x, float s) {
  return unary("scale", x, [s](float v) { return v * s; });
}

// ---- portable row kernels (the AVX2 / AVX-512 ones are in ops_avx2.cpp / ops_avx512.cpp) ------

static float gelu_one(float v) { return 0.5f * v * (1.0f + erf_approx(v * 0.70710678118654752f)); }
static float gelu_tanh_one(float v) {
  const float k = 0.79788456080286536f;  // sqrt(2 / pi)
  // 1 + tanh(u) = 2 / (1 + e^(-2u)), so the tanh costs one vectorizable exp.
  const float u = k * (v + 0.044715f * v * v * v);
  return v / (1.0f + exp_approx(-2.0f * u));
}
static float silu_one(float v) { return v / (1.0f + exp_approx(-v)); }

// Lambdas, not the function pointers: each map1 instance then inlines its function and vectorizes.
static void gelu_portable(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](float v) { return gelu_one(v); });
}
static void gelu_tanh_portable(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](float v) { return gelu_tanh_one(v); });
}
static void silu_portable(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](float v) { return silu_one(v); });
}

static void softmax_row_portable(float* row, int64_t d) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float mx = kNegInf;
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < d; ++i) mx = std::max(mx, row[i]);
  if (mx == kNegInf) {  // fully masked: no key is visible, so no probability mass
    std::fill(row, row + d, 0.0f);
    return;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) {
    row[i] = exp_approx(row[i] - mx);
    sum += row[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < d; ++i) row[i] *= inv;
}

// One row of d values. Sums in double and two passes: exact enough even when |mean| >> std.
static void layer_norm_row_portable(const float* x, const float* w, const float* b, float* y,
                                    int64_t d, float eps) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) sum += x[i];
  const float mean = float(sum / double(d));
  double var = 0.0;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < d; ++i) var += double(x[i] - mean) * double(x[i] - mean);
  const float inv = float(1.0 / std::sqrt(var / double(d) + eps));
  if (b)
    for (int64_t i = 0; i < d; ++i) y[i] = (x[i] - mean) * inv * w[i] + b[i];
  else
    for (int64_t i = 0; i < d; ++i) y[i] = (x[i] - mean) * inv * w[i];
}

static void rms_norm_row_portable(const float* x, const float* w, float* y, int64_t d, float eps,
                                  float offset) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(d) + eps));
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * inv * (offset + w[i]);
}

static const RowKernels kRowKernelsPortable{gelu_portable,         gelu_tanh_portable,
                                            silu_portable,         softmax_row_portable,
                                            layer_norm_row_portable, rms_norm_row_portable};

// The kernel set for the active instruction set (force_isa may change it between calls).
static const RowKernels& row_kernels() {
  switch (active_isa()) {
    case Isa::Avx512: return kRowKernelsAvx512;
    case Isa::Avx2: return kRowKernelsAvx2;
    default: return kRowKernelsPortable;
  }
}

// Applies a row kernel to x over the flat range, split across threads.
static Tensor unary_rows(const char* op, const Tensor& x_in,
                         void (*kernel)(const float*, float*, int64_t)) {
  const Tensor x = packed_f32(op, x_in);
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  float* py = y.data<float>();
  parallel_for(x.numel(), kGrainElems, [&](int64_t i0, int64_t i1) {
    kernel(px + i0, py + i0, i1 - i0);
  });
  return y;
}

Tensor gelu(const Tensor& x) { return unary_rows("gelu", x, row_kernels().gelu); }
Tensor gelu_tanh(const Tensor& x) { return unary_rows("gelu_tanh", x, row_kernels().gelu_tanh); }
Tensor silu(const Tensor& x) { return unary_rows("silu", x, row_kernels().silu); }
Tensor relu(const Tensor& x) {
  return unary("relu", x, [](float v) { return v > 0.0f ? v : 0.0f; });
}

// ---- norms ---------------------------------------------------------------------------------------

// Checks a per-channel parameter against the last dimension and returns it as packed f32.
static Tensor channel_param(const char* op, const char* what, const Tensor& p, const Tensor& x) {
  if (!p.defined() || p.numel() != x.dim(-1) || p.ndim() != 1)
    bad_shape(op, std::string(what) + " " + (p.defined() ? shape_str(p.shape()) : "undefined") +
                      " does not match input " + shape_str(x.shape()));
  return to_f32(p);
}

Tensor layer_norm(const Tensor& x_in, const Tensor& w_in, const Tensor* b_in, float eps) {
  const Tensor x = packed_f32("layer_norm", x_in);
  if (x.ndim() < 1) bad_shape("layer_norm", "input is a scalar");
  const Tensor w = channel_param("layer_norm", "weight", w_in, x);
  const Tensor b = b_in ? channel_param("layer_norm", "bias", *b_in, x) : Tensor();
  const int64_t d = x.dim(-1), rows = d ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape());
  const float* pw = w.data<float>();
  const float* pb = b.defined() ? b.data<float>() : nullptr;
  const auto layer_norm_row = row_kernels().layer_norm_row;
  parallel_for(rows, row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      layer_norm_row(x.data<float>() + r * d, pw, pb, y.data<float>() + r * d, d, eps);
  });
  return y;
}

Tensor rms_norm(const Tensor& x_in, const Tensor& w_in, float eps, float offset) {
  const Tensor x = packed_f32("rms_norm", x_in);
  if (x.ndim() < 1) bad_shape("rms_norm", "input is a scalar");
  const Tensor w = channel_param("rms_norm", "weight", w_in, x);
  const int64_t d = x.dim(-1), rows = d ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape());
  const float* pw = w.data<float>();
  const auto rms_norm_row = row_kernels().rms_norm_row;
  parallel_for(rows, row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      rms_norm_row(x.data<float>() + r * d, pw, y.data<float>() + r * d, d, eps, offset);
  });
  return y;
}

// ---- softmax -------------------------------------------------------------------------------------

void softmax_rows(float* x, int64_t n, int64_t d) {
  const auto softmax_row = row_kernels().softmax_row;
  for (int64_t r = 0; r < n; ++r) softmax_row(x + r * d, d);
}

Tensor softmax(const Tensor& x_in) {
  Tensor y = packed_copy("softmax", x_in);
  if (y.ndim() < 1) bad_shape("softmax", "input is a scalar");
  const int64_t d = y.dim(-1), rows = d ? y.numel() / d : 0;
  parallel_for(rows, row_grain(d), [&](int64_t r0, int64_t r1) {
    softmax_rows(y.data<float>() + r0 * d, r1 - r0, d);
  });
  return y;
}

// ---- rope ----------------------------------------------------------------------------------------

// Rotates the `half` pairs of one head: HalfSplit pairs (i, i + half), Interleaved (2i, 2i + 1).
static void rotate_head(float* v, const float* c, const float* s, int64_t half, RopeLayout layout) {
  if (layout == RopeLayout::HalfSplit) {
    float* hi = v + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = hi[i];
      v[i] = a * c[i] - b * s[i];
      hi[i] = b * c[i] + a * s[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * c[i] - b * s[i];
      v[2 * i + 1] = b * c[i] + a * s[i];
    }
  }
}

Tensor rope(const Tensor& x_in, int64_t position, float theta, int64_t rope_dims,
            RopeLayout layout) {
  Tensor y = packed_copy("rope", x_in);
  if (y.ndim() != 3) bad_shape("rope", "expects x [T, H, D], got " + shape_str(y.shape()));
  const int64_t T = y.dim(0), H = y.dim(1), D = y.dim(2);
  const int64_t rd = rope_dims ? rope_dims : D;
  if (rd < 0 || rd > D || rd % 2)
    bad_shape("rope", "rope_dims " + std::to_string(rope_dims) + " must be even and <= D in " +
                          shape_str(y.shape()));
  if (position < 0) bad_shape("rope", "negative position " + std::to_string(position));
  const int64_t half = rd / 2;
  // Frequencies and angles in f32 exactly as Hugging Face computes them, so long positions
  // round the same way as the reference.
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(theta, float(2 * i) / float(rd));
  parallel_for(T, row_grain(H * D), [&](int64_t t0, int64_t t1) {
    std::vector<float> c(half), s(half);
    for (int64_t t = t0; t < t1; ++t) {
      const float pos = float(position + t);
      for (int64_t i = 0; i < half; ++i) {
        const float a = pos * inv_freq[i];
        c[i] = std::cos(a);
        s[i] = std::sin(a);
      }
      for (int64_t h = 0; h < H; ++h)
        rotate_head(y.data<float>() + (t * H + h) * D, c.data(), s.data(), half, layout);
    }
  });
  return y;
}

// ---- embedding -----------------------------------------------------------------------------------

Tensor embedding(const Tensor& table, const Tensor& ids_in) {
  if (!table.defined() || table.ndim() != 2 || !table.is_contiguous())
    bad_shape("embedding", "table must be a packed [V, D] tensor, got " +
                               (table.defined() ? shape_str(table.shape()) : "undefined"));
  if (!ids_in.defined() || ids_in.dtype() != DType::I32)
    bad_shape("embedding", "ids must be i32");
  const Tensor ids = ids_in.contiguous();
  const int64_t V = table.dim(0), D = table.dim(1), n = ids.numel();
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor y = Tensor::empty(out_shape);
  const int32_t* pid = ids.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (pid[i] < 0 || pid[i] >= V)
      bad_shape("embedding", "id " + std::to_string(pid[i]) + " outside table " +
                                 shape_str(table.shape()));
  const int64_t row_bytes = dtype_bytes(table.dtype(), D);
  const int64_t group = table.group_size();
  const int64_t groups_per_row = (table.scales() && group > 0) ? D / group : 0;
  parallel_for(n, row_grain(D), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* sc = table.scales() ? table.scales()->data<float>() + pid[i] * groups_per_row : nullptr;
      dequantize_row(table.dtype(), table.raw() + pid[i] * row_bytes, y.data<float>() + i * D, D,
                     sc, group);
    }
  });
  return y;
}

// ---- shape ops -----------------------------------------------------------------------------------

static int64_t norm_axis(const char* op, int64_t axis, int64_t ndim) {
  const int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    bad_shape(op, "axis " + std::to_string(axis) + " out of range for a " + std::to_string(ndim) +
                      "-d tensor");
  return a;
}

Tensor concat(std::span<const Tensor> xs, int64_t axis) {
  if (xs.empty()) bad_shape("concat", "no inputs");
  for (const Tensor& x : xs)
    if (!x.defined()) bad_shape("concat", "an input is undefined");
  const DType dt = xs[0].dtype();
  if (traits(dt).block_elems != 1 || dt == DType::I8)
    bad_shape("concat", "plain dtypes only, got " + std::string(dtype_name(dt)));
  const Shape& s0 = xs[0].shape();
  const int64_t a = norm_axis("concat", axis, static_cast<int64_t>(s0.size()));
  Shape out = s0;
  out[a] = 0;
  for (const Tensor& x : xs) {
    bool ok = x.dtype() == dt && x.ndim() == static_cast<int64_t>(s0.size());
    for (size_t i = 0; ok && i < s0.size(); ++i) ok = int64_t(i) == a || x.shape()[i] == s0[i];
    if (!ok)
      bad_shape("concat", "input " + shape_str(x.shape()) + " does not match " + shape_str(s0) +
                              " outside axis " + std::to_string(a));
    out[a] += x.shape()[a];
  }
  Tensor y = Tensor::empty(out, dt);
  // Copy each input as [outer, extent * inner] blocks into the output's rows.
  const int64_t esize = traits(dt).block_bytes;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < a; ++i) outer *= out[i];
  for (size_t i = a + 1; i < out.size(); ++i) inner *= out[i];
  const int64_t out_row = out[a] * inner * esize;
  int64_t at = 0;
  for (const Tensor& x_in : xs) {
    const Tensor x = x_in.contiguous();
    const int64_t row = x.shape()[a] * inner * esize;
    for (int64_t o = 0; o < outer && row; ++o)
      std::memcpy(y.raw() + o * out_row + at, x.raw() + o * row, row);
    at += row;
  }
  return y;
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end) {
  if (!x.defined()) bad_shape("slice", "input is undefined");
  const int64_t a = norm_axis("slice", axis, x.ndim());
  if (start < 0 || end < start || end > x.dim(a))
    bad_shape("slice", "range [" + std::to_string(start) + ", " + std::to_string(end) +
                           ") outside axis " + std::to_string(a) + " of " + shape_str(x.shape()));
  return x.slice(a, start, end);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  if (!x.defined()) bad_shape("transpose", "input is undefined");
  return x.transpose(norm_axis("transpose", d0, x.ndim()), norm_axis("transpose", d1, x.ndim()));
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  if (!x.defined()) bad_shape("reshape", "input is undefined");
  try {
    return x.contiguous().reshape(shape);
  } catch (const std::invalid_argument& e) {
    bad_shape("reshape", std::string(e.what()));
  }
}

}  // namespace xdna::host

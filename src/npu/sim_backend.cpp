#include "npu/sim_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/numeric.h"
#include "aie_kernels/kernels.h"
#include "npu/aie_kernels.h"
#include "npu/aie_numerics.h"
#include "npu/design_families.h"
#include "npu/sim_exec_encoder.h"

namespace xdna::npu {

namespace {

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// The kernels store bf16 results rounding to nearest even (aie::rounding_mode::conv_even); the
// hardware default (floor) would bias every output downwards.
constexpr aie::Rounding kStoreRounding = aie::Rounding::NearestEven;

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }
float store_bf16(float x) { return aie::to_float(aie::to_bf16(x, kStoreRounding)); }

std::vector<aie::bf16> bf16_values(const float* x, int64_t n) {
  std::vector<aie::bf16> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) b[size_t(i)] = {f32_to_bf16(x[i])};
  return b;
}

bool plain_activation(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

int64_t rows_of(const Shape& s) {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
  return r;
}

// Packed f32 values of a tensor: the tensor's own memory when it already is packed f32.
const float* f32_values(const Tensor& t, std::vector<float>& storage) {
  if (t.dtype() == DType::F32 && t.is_contiguous()) return t.data<float>();
  storage = t.to_vector();
  return storage.data();
}

}  // namespace

ValueInfo value_info(const Tensor& t) {
  return {t.shape(), t.dtype(), t.scales() ? t.group_size() : 0};
}

const char* xclbin_policy_name(XclbinPolicy p) {
  return p == XclbinPolicy::Single ? "single" : "per-design";
}

std::shared_ptr<const Design> DesignCache::get(const std::string& key,
                                               const std::function<Design()>& make,
                                               std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = designs_.find(key); it != designs_.end()) return it->second;
  if (auto it = errors_.find(key); it != errors_.end()) {
    error = it->second;
    return nullptr;
  }
  try {
    Design d = make();
    validate_design(d);
    return designs_[key] = std::make_shared<const Design>(std::move(d));
  } catch (const std::exception& e) {
    error = errors_[key] = std::string("no valid design: ") + e.what();
    return nullptr;
  }
}

OpChoice DesignCache::choose(const Node& node, std::span<const ValueInfo> in) {
  OpChoice c;
  auto refuse = [&](std::string why) {
    c.on_npu = false;
    c.reason = std::move(why);
    return c;
  };
  auto use = [&](const std::string& key, const std::function<Design()>& make, SimPath path) {
    std::string error;
    c.design = get(key, make, error);
    if (!c.design) return refuse(error);
    c.on_npu = true;
    c.path = path;
    c.xclbin = policy_ == XclbinPolicy::Single ? "model.xclbin" : c.design->name + ".xclbin";
    return c;
  };
  if (in.empty() || !plain_activation(in[0].dtype))
    return refuse("first input is not an f32/bf16/f16 activation");
  const Shape& xs = in[0].shape;
  const int64_t numel = shape_numel(xs);
  if (xs.empty() || numel == 0) return refuse("empty or scalar input");
  const int64_t last = xs.back(), rows = rows_of(xs);

  switch (node.op) {
    case OpKind::MatMul: {
      if (in.size() < 2 || in[1].shape.size() != 2) return refuse("weights are not a 2-d [out, in] matrix");
      const ValueInfo& w = in[1];
      const int64_t N = w.shape[0], K = w.shape[1];
      if (K != last) return refuse("x's last dimension does not match the weights' inner dimension");
      if (in.size() > 2 && (in[2].dtype != DType::F32 || in[2].shape != Shape{N}))
        return refuse("bias is not f32 [out]");
      DType dt;
      SimPath path;
      switch (w.dtype) {
        case DType::F32: case DType::F16: case DType::BF16:
          dt = DType::BF16;
          path = rows == 1 ? SimPath::GemvBf16 : SimPath::GemmBf16;
          break;
        case DType::BFP16:
          if (K % 8 != 0) return refuse("bfp16 weights with K not a whole number of 8-value blocks");
          dt = DType::BFP16;
          path = SimPath::MatmulBfp16;
          break;
        case DType::I8:
          if (w.group != K)
            return refuse("int8 weights with scale groups of " + std::to_string(w.group) +
                          " (the int8 design applies one scale per output channel)");
          dt = DType::I8;
          path = SimPath::MatmulInt8;
          break;
        default:
          return refuse("weights in " + std::string(dtype_name(w.dtype)) +
                        ": no NPU design (bake to bf16, bfp16 or int8)");
      }
      // The host pads activations (and the bake step weights) with zeros up to whole tiles;
      // zero products add nothing. GEMV needs K in 16s (32 for int8), GEMM in 64s.
      const int64_t kq = rows == 1 ? (dt == DType::I8 ? 32 : 16) : 64;
      c.rows = rows, c.k = K, c.n = N, c.k_pad = round_up(K, kq);
      const std::string dn(dtype_name(dt));
      if (rows == 1)
        return use("gemv/" + dn + "/" + std::to_string(N) + "x" + std::to_string(c.k_pad),
                   [=] { return gemv_design(dt, N, c.k_pad); }, path);
      return use("gemm/" + dn + "/" + std::to_string(rows) + "x" + std::to_string(c.k_pad) + "x" +
                     std::to_string(N),
                 [=] { return gemm_design(dt, rows, c.k_pad, N); }, path);
    }
    case OpKind::Add:
    case OpKind::Mul: {
      if (in.size() != 2 || in[1].shape != xs || !plain_activation(in[1].dtype))
        return refuse("the elementwise design takes two inputs of one shape (no broadcasting)");
      const std::string op = node.op == OpKind::Add ? "add" : "mul";
      return use("elementwise/" + op + "/" + std::to_string(numel),
                 [=] { return elementwise_design(op, numel); },
                 node.op == OpKind::Add ? SimPath::Add : SimPath::Mul);
    }
    case OpKind::Scale:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::GeluTanh: {
      const std::string op = node.op == OpKind::Scale ? "scale" : node.op == OpKind::Silu ? "silu" : "gelu";
      const SimPath p = node.op == OpKind::Scale ? SimPath::Scale
                        : node.op == OpKind::Silu ? SimPath::Silu : SimPath::Gelu;
      return use("elementwise/" + op + "/" + std::to_string(numel),
                 [=] { return elementwise_design(op, numel); }, p);
    }
    case OpKind::LayerNorm:
    case OpKind::RMSNorm: {
      const bool layer = node.op == OpKind::LayerNorm;
      if (in.size() < 2 || in[1].shape != Shape{last} || !plain_activation(in[1].dtype))
        return refuse("norm weight is not [hidden]");
      if (layer && in.size() > 2 && (in[2].shape != Shape{last} || !plain_activation(in[2].dtype)))
        return refuse("norm bias is not [hidden]");
      const NormKind k = layer ? NormKind::Layer : NormKind::RMS;
      return use(std::string(layer ? "layernorm/" : "rmsnorm/") + std::to_string(rows) + "x" +
                     std::to_string(last),
                 [=] { return norm_design(k, rows, last); },
                 layer ? SimPath::LayerNorm : SimPath::RMSNorm);
    }
    case OpKind::Softmax:
      return use("softmax/" + std::to_string(rows) + "x" + std::to_string(last),
                 [=] { return softmax_design(rows, last); }, SimPath::Softmax);
    case OpKind::Attention: {
      // q [T, H, D], k/v [S, Hkv, D]: the encoder attention design (key j at position j, query
      // i at q_offset + i). Masks, soft-capping and query offsets have no design yet.
      if (in.size() != 3) return refuse("attention with a mask input: no design (the design masks by position only)");
      if (node.attrs.softcap != 0.0f) return refuse("attention logit soft-capping: no design");
      if (node.attrs.q_offset != 0) return refuse("attention with a query offset (decode): no design here");
      const Shape &ks = in[1].shape, &vs = in[2].shape;
      if (xs.size() != 3 || ks.size() != 3 || vs != ks || !plain_activation(in[1].dtype) || !plain_activation(in[2].dtype))
        return refuse("attention inputs are not q [T, H, D] and k, v [S, Hkv, D] activations of one head_dim");
      if (ks[2] != xs[2] || ks[1] <= 0 || xs[1] % ks[1] != 0)
        return refuse("attention k/v heads or head_dim do not match q");
      const EncoderAttentionShape es{xs[0], ks[0], xs[1], ks[1], xs[2], node.attrs.causal, node.attrs.window};
      char key[160];
      std::snprintf(key, sizeof key, "encoder_attention/%lldx%lld/h%lldkv%lldd%lld/c%dw%lld", (long long)es.T,
                    (long long)es.S, (long long)es.heads, (long long)es.kv_heads, (long long)es.head_dim,
                    int(es.causal), (long long)es.window);
      return use(key, [=] { return encoder_attention_design(es); }, SimPath::Attention);
    }
    default:
      return refuse("no design family for " + std::string(op_name(node.op)));
  }
}

// ---- cost -------------------------------------------------------------------------------------

CostReport cost_report(std::span<const Invocation> invocations) {
  CostReport r;
  r.run = model_run(invocations);
  std::map<std::string, DesignCost> costs;
  for (const Invocation& inv : invocations) {
    auto it = costs.find(inv.design->name);
    if (it == costs.end()) it = costs.emplace(inv.design->name, model_design(*inv.design)).first;
    const DesignCost& c = it->second;
    const double comp = std::min(c.compute_s, c.total_s);
    r.compute_s += comp;
    r.exposed_dma_s += c.total_s - comp;
    r.designs[inv.design->name] += 1;
  }
  r.reconfig_s = r.run.configure_s + r.run.xclbin_switch_s;
  return r;
}

std::string CostReport::text() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%.*s: %d dispatches, %d configures, %d xclbin switches, %zu distinct designs, "
                "%.2f MB DDR traffic\n"
                "  modelled latency %.1f us = compute %.1f + exposed DMA %.1f + dispatch overhead "
                "%.1f + reconfiguration %.1f (configure %.1f, xclbin switch %.1f)\n",
                int(label.size()), label.data(), run.dispatches, run.configures,
                run.xclbin_switches, designs.size(), double(run.ddr_bytes) / 1e6,
                run.total_s * 1e6, compute_s * 1e6, exposed_dma_s * 1e6, run.dispatch_s * 1e6,
                reconfig_s * 1e6, run.configure_s * 1e6, run.xclbin_switch_s * 1e6);
  return buf;
}

nlohmann::json CostReport::to_json() const {
  return {{"label", label},
          {"dispatches", run.dispatches},
          {"configures", run.configures},
          {"xclbin_switches", run.xclbin_switches},
          {"ddr_bytes", run.ddr_bytes},
          {"modelled_us",
           {{"total", run.total_s * 1e6},
            {"compute", compute_s * 1e6},
            {"exposed_dma", exposed_dma_s * 1e6},
            {"dispatch", run.dispatch_s * 1e6},
            {"reconfiguration", reconfig_s * 1e6},
            {"configure", run.configure_s * 1e6},
            {"xclbin_switch", run.xclbin_switch_s * 1e6}}},
          {"designs", designs}};
}

// ---- numerics ---------------------------------------------------------------------------------

// Weights as the bake step would lay them out for the chosen design, prepared once per tensor.
struct NpuSimBackend::PreparedWeight {
  std::shared_ptr<xdna::Buffer> keep;    // the source buffer stays alive, so its address stays unique
  std::vector<float> wt_bf16;      // GEMM bf16: [K_pad][N] values rounded to bf16 (B = w^T)
  std::vector<aie::bf16> rows_bf16;  // GEMV bf16: [N][K_pad]
  std::vector<uint8_t> b_bfp16;    // bfp16: [N_pad/8][K_pad/8] 72-byte sub-blocks
  std::vector<int8_t> q_i8;        // int8: [N][K_pad]
  std::vector<float> s_i8;         // int8: per-row scales
};

const NpuSimBackend::PreparedWeight& NpuSimBackend::prepare(const Tensor& w, const OpChoice& c) {
  char key[160];
  std::snprintf(key, sizeof key, "%p+%zu/%d/%lldx%lld/%d", static_cast<void*>(w.buffer().get()),
                w.byte_offset(), int(c.path), (long long)c.n, (long long)c.k_pad,
                int(w.dtype()));
  auto& slot = weights_[key];
  if (slot) return *slot;
  auto p = std::make_shared<PreparedWeight>();
  p->keep = w.buffer();
  const int64_t N = c.n, K = c.k, Kp = c.k_pad;
  switch (c.path) {
    case SimPath::GemmBf16: {
      const std::vector<float> v = w.to_vector();
      p->wt_bf16.assign(size_t(Kp * N), 0.0f);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) p->wt_bf16[size_t(k * N + j)] = bf16_round(v[size_t(j * K + k)]);
      break;
    }
    case SimPath::GemvBf16: {
      const std::vector<float> v = w.to_vector();
      p->rows_bf16.assign(size_t(N * Kp), aie::bf16{});
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k)
          p->rows_bf16[size_t(j * Kp + k)] = {f32_to_bf16(v[size_t(j * K + k)])};
      break;
    }
    case SimPath::MatmulBfp16: {
      // Reuse the stored blocks as they are: column j of B = w^T is row j of w.
      const Tensor wc = w.contiguous();
      const uint8_t* src = wc.data<uint8_t>();
      const int64_t Np = round_up(N, 8), kb = Kp / 8, kb_src = K / 8;
      p->b_bfp16.assign(size_t(Np * kb * 9), 0);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t b = 0; b < kb_src; ++b)
          std::memcpy(&p->b_bfp16[size_t((((j / 8) * kb + b) * 8 + j % 8) * 9)],
                      src + (j * kb_src + b) * 9, 9);
      break;
    }
    case SimPath::MatmulInt8: {
      const Tensor wc = w.contiguous();
      const Tensor sc = w.scales()->contiguous();
      p->q_i8.assign(size_t(N * Kp), 0);
      for (int64_t j = 0; j < N; ++j)
        std::memcpy(&p->q_i8[size_t(j * Kp)], wc.data<int8_t>() + j * K, size_t(K));
      const std::vector<float> s = sc.to_vector();
      p->s_i8.assign(s.begin(), s.begin() + N);
      break;
    }
    default:
      throw std::logic_error("npu-sim: prepare called for a non-matmul path");
  }
  slot = std::move(p);
  return *slot;
}

bool NpuSimBackend::supports(const Node& node, std::span<const Tensor> inputs) const {
  std::vector<ValueInfo> info;
  for (const Tensor& t : inputs) info.push_back(value_info(t));
  const OpChoice c = cache_.choose(node, info);
  if (!c.on_npu) refusals_[std::string(op_name(node.op))] = c.reason;
  return c.on_npu;
}

Tensor NpuSimBackend::compute(const Node& node, std::span<const Tensor> inputs) {
  std::vector<ValueInfo> info;
  for (const Tensor& t : inputs) info.push_back(value_info(t));
  const OpChoice c = cache_.choose(node, info);
  if (!c.on_npu)
    throw std::invalid_argument("npu-sim cannot run '" + node.name + "': " + c.reason);

  std::vector<float> xs_store;
  const float* x = f32_values(inputs[0], xs_store);
  const Shape& xshape = inputs[0].shape();
  const int64_t numel = shape_numel(xshape), last = xshape.back(), rows = numel / last;
  Tensor out;

  switch (c.path) {
    case SimPath::GemvBf16:
    case SimPath::GemmBf16:
    case SimPath::MatmulBfp16:
    case SimPath::MatmulInt8: {
      const PreparedWeight& pw = prepare(inputs[1], c);
      const int64_t M = c.rows, K = c.k, Kp = c.k_pad, N = c.n;
      Shape oshape = xshape;
      oshape.back() = N;
      out = Tensor::empty(oshape);
      float* y = out.data<float>();
      if (c.path == SimPath::GemvBf16) {
        std::vector<aie::bf16> xb(static_cast<size_t>(Kp)), yb(static_cast<size_t>(N));
        for (int64_t k = 0; k < K; ++k) xb[size_t(k)] = {f32_to_bf16(x[k])};
        ::gemv_bf16(pw.rows_bf16.data(), xb.data(), yb.data(), int32_t(Kp), int32_t(N));  // aie_kernels/gemv_bf16.cc
        for (int64_t j = 0; j < N; ++j) y[j] = aie::to_float(yb[size_t(j)]);
      } else if (c.path == SimPath::GemmBf16) {
        // One f32 accumulator per output, products (exact: bf16 x bf16) added in increasing k
        // with one rounding each; stored to bf16. Padded k adds zeros: skipped.
        const float* wt = pw.wt_bf16.data();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; ++i) {
          std::vector<float> acc(static_cast<size_t>(N), 0.0f);
          float* a = acc.data();
          for (int64_t k = 0; k < K; ++k) {
            const float xv = bf16_round(x[i * K + k]);
            const float* b = wt + k * N;
            for (int64_t j = 0; j < N; ++j) a[j] += xv * b[j];
          }
          for (int64_t j = 0; j < N; ++j) y[i * N + j] = store_bf16(a[j]);
        }
      } else if (c.path == SimPath::MatmulBfp16) {
        // Activations encoded to bfp16 by the host (truncating mantissas), 8 x 8 x 8 mmuls.
        const int64_t Mp = round_up(M, 8), Np = round_up(N, 8), kb = Kp / 8;
        std::vector<float> xa(static_cast<size_t>(Mp * Kp), 0.0f);
        for (int64_t i = 0; i < M; ++i) std::copy(x + i * K, x + i * K + K, xa.begin() + i * Kp);
        std::vector<uint8_t> a(static_cast<size_t>(Mp * kb * 9));
        aie::pack_bfp16_a(xa.data(), Mp, Kp, a.data());
        std::vector<float> cbuf(static_cast<size_t>(Mp * Np), 0.0f);
#pragma omp parallel for schedule(static)
        for (int64_t ib = 0; ib < Mp / 8; ++ib)
          aie::gemm_bfp16(a.data() + ib * kb * 72, pw.b_bfp16.data(), cbuf.data() + ib * 8 * Np, 8,
                          Kp, Np);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) y[i * N + j] = store_bf16(cbuf[size_t(i * Np + j)]);
      } else {
        // int8: activations quantized per row (symmetric, max|x| / 127), exact 32-bit
        // accumulation, then shift-round-saturate to int8 with the smallest shift that keeps
        // this dispatch's accumulators in range (stands in for per-layer calibration).
        std::vector<int8_t> qx(static_cast<size_t>(M * Kp), 0);
        std::vector<float> sx(static_cast<size_t>(M));
        std::vector<int8_t> qrow(static_cast<size_t>(K));
        for (int64_t i = 0; i < M; ++i) {
          quantize_int8(x + i * K, 1, K, K, qrow.data(), &sx[size_t(i)]);
          std::copy(qrow.begin(), qrow.end(), qx.begin() + i * Kp);
        }
        std::vector<int32_t> acc(static_cast<size_t>(M * N));
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const int8_t* a = qx.data() + i * Kp;
            const int8_t* b = pw.q_i8.data() + j * Kp;
            int32_t s = 0;
            for (int64_t k = 0; k < Kp; ++k) s += int32_t(a[k]) * int32_t(b[k]);
            acc[size_t(i * N + j)] = s;
          }
        int64_t amax = 0;
        for (int32_t v : acc) amax = std::max<int64_t>(amax, std::abs(int64_t(v)));
        int shift = 0;
        while (shift < 31 && (amax >> shift) > 127) ++shift;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const int8_t q = aie::srs_int8(acc[size_t(i * N + j)], shift, kStoreRounding);
            y[i * N + j] = std::ldexp(float(q), shift) * sx[size_t(i)] * pw.s_i8[size_t(j)];
          }
      }
      if (inputs.size() > 2) {  // bias: added to the stored output in f32
        std::vector<float> bs;
        const float* bias = f32_values(inputs[2], bs);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) y[i * N + j] += bias[j];
      }
      break;
    }
    case SimPath::Add:
    case SimPath::Mul:
    case SimPath::Scale:
    case SimPath::Silu:
    case SimPath::Gelu: {
      out = Tensor::empty(xshape);
      float* y = out.data<float>();
      std::vector<float> bs;
      const float* b = inputs.size() > 1 ? f32_values(inputs[1], bs) : nullptr;
      const float s = node.attrs.scale;
      // The core kernels (aie_kernels/eltwise_*.cc) on bf16 copies (the fused designs run the same ones).
      const std::vector<aie::bf16> xb = bf16_values(x, numel);
      std::vector<aie::bf16> yb(static_cast<size_t>(numel));
      switch (c.path) {
        case SimPath::Add:
          ::eltwise_add_bf16(xb.data(), bf16_values(b, numel).data(), yb.data(), int32_t(numel));
          break;
        case SimPath::Mul:
          ::eltwise_mul_bf16(xb.data(), bf16_values(b, numel).data(), yb.data(), int32_t(numel));
          break;
        case SimPath::Scale: {
          uint8_t s_bytes[4];
          std::memcpy(s_bytes, &s, 4);
          ::eltwise_scale_bf16(xb.data(), s_bytes, yb.data(), int32_t(numel));
          break;
        }
        case SimPath::Silu:  // x * 1 / (1 + exp(-x)) through the exp and reciprocal tables
          ::eltwise_silu_bf16(xb.data(), yb.data(), int32_t(numel));
          break;
        default:  // gelu, tanh form as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
          ::eltwise_gelu_bf16(xb.data(), yb.data(), int32_t(numel));
      }
      for (int64_t i = 0; i < numel; ++i) y[i] = aie::to_float(yb[size_t(i)]);
      break;
    }
    case SimPath::LayerNorm:
    case SimPath::RMSNorm: {
      out = Tensor::empty(xshape);
      float* y = out.data<float>();
      const int64_t H = last;
      std::vector<float> ws, bs;
      const float* w = f32_values(inputs[1], ws);
      const bool layer = c.path == SimPath::LayerNorm;
      const float* b = layer && inputs.size() > 2 ? f32_values(inputs[2], bs) : nullptr;
      std::vector<float> g(static_cast<size_t>(H)), be(static_cast<size_t>(H), 0.0f);
      for (int64_t j = 0; j < H; ++j) {
        g[size_t(j)] = bf16_round(w[j]) + (layer ? 0.0f : node.attrs.rms_offset);
        if (b) be[size_t(j)] = bf16_round(b[j]);
      }
      const float eps = node.attrs.eps;
      if (!layer) {  // the rmsnorm kernel (aie_kernels/rmsnorm_bf16.cc), as the fused designs run it
        const std::vector<aie::bf16> gb = bf16_values(w, H);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<aie::bf16> xb = bf16_values(x + r * H, H);
          std::vector<aie::bf16> yb(static_cast<size_t>(H));
          ::rmsnorm_bf16(xb.data(), gb.data(), yb.data(), int32_t(H), xk::f32_bits(eps), xk::f32_bits(node.attrs.rms_offset));
          for (int64_t j = 0; j < H; ++j) y[r * H + j] = aie::to_float(yb[size_t(j)]);
        }
        break;
      }
      // The layernorm kernel (aie_kernels/layernorm_bf16.cc): gamma then beta (0 without bias).
      std::vector<aie::bf16> gbe(static_cast<size_t>(2 * H));
      for (int64_t j = 0; j < H; ++j) gbe[size_t(j)] = {f32_to_bf16(g[size_t(j)])}, gbe[size_t(H + j)] = {f32_to_bf16(be[size_t(j)])};
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<aie::bf16> xb = bf16_values(x + r * H, H);
        std::vector<aie::bf16> yb(static_cast<size_t>(H));
        ::layernorm_bf16(xb.data(), gbe.data(), yb.data(), int32_t(H), xk::f32_bits(eps));
        for (int64_t j = 0; j < H; ++j) y[r * H + j] = aie::to_float(yb[size_t(j)]);
      }
      break;
    }
    case SimPath::Attention: {  // the encoder_attention design run tile by tile (sim_exec_encoder.h)
      std::vector<float> ks, vs;
      const float* k = f32_values(inputs[1], ks);
      const float* v = f32_values(inputs[2], vs);
      const std::vector<float> o = sim_encoder_attention(*c.design, {x, size_t(numel)}, {k, size_t(inputs[1].numel())},
                                                         {v, size_t(inputs[2].numel())}, node.attrs.attn_scale);
      out = Tensor::empty(xshape);
      std::copy(o.begin(), o.end(), out.data<float>());
      break;
    }
    case SimPath::Softmax: {
      out = Tensor::empty(xshape);
      float* y = out.data<float>();
      const int64_t L = last;
      for (int64_t r = 0; r < rows; ++r) {  // the softmax kernel (aie_kernels/softmax_bf16.cc)
        const std::vector<aie::bf16> xb = bf16_values(x + r * L, L);
        std::vector<aie::bf16> yb(static_cast<size_t>(L));
        ::softmax_bf16(xb.data(), yb.data(), int32_t(L));
        for (int64_t j = 0; j < L; ++j) y[r * L + j] = aie::to_float(yb[size_t(j)]);
      }
      break;
    }
  }
  invocations_.push_back({c.design.get(), c.xclbin, true});
  keep_.push_back(c.design);
  return out;
}

}  // namespace xdna::npu

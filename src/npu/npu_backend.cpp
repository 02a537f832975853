#include "npu/npu_backend.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/numeric.h"
#include "npu/runtime/device_runtime.h"

namespace xdna {

namespace npu {

namespace {

int find_arg(const Design& d, const std::string& name) {
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == name) return static_cast<int>(i);
  throw std::logic_error("npu: design " + d.name + " has no host argument '" + name + "'");
}

// Writes `values` as bf16 (round to nearest even, as the host encodes activations) at element
// `at` of the argument; the rest of it stays zero (padding adds nothing to the results).
void put_bf16(const Design& d, std::vector<uint8_t>& arg, const std::string& name, const float* values,
              int64_t n, int64_t at = 0) {
  if (int64_t((at + n) * 2) > int64_t(arg.size()))
    throw std::logic_error("npu: " + std::to_string(n) + " bf16 values do not fit argument '" + name +
                           "' of design " + d.name + " (" + std::to_string(arg.size()) + " bytes)");
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t b = f32_to_bf16(values[i]);
    std::memcpy(arg.data() + (at + i) * 2, &b, 2);
  }
}

std::vector<float> values_of(const Tensor& t) { return t.to_vector(); }

}  // namespace

std::string pack_reason(SimPath path) {
  switch (path) {
    case SimPath::GemmBf16:
      return "the device runtime does not yet lay out GEMM operands (B tiled [N_pad/n][K][n])";
    case SimPath::MatmulBfp16:
      return "the device runtime does not yet lay out bfp16 matmul operands";
    case SimPath::MatmulInt8:
      return "the device runtime does not yet lay out int8 matmul operands and scales";
    default:
      return "";
  }
}

std::string pack_args(const Node& node, std::span<const Tensor> inputs, const OpChoice& c,
                      std::vector<std::vector<uint8_t>>& args) {
  if (std::string why = pack_reason(c.path); !why.empty()) return why;
  const Design& d = *c.design;
  std::vector<std::vector<uint8_t>> a;
  for (const HostArg& h : d.args) a.emplace_back(static_cast<size_t>(h.bytes), uint8_t{0});
  const std::vector<float> x = values_of(inputs[0]);
  switch (c.path) {
    case SimPath::GemvBf16: {
      const std::vector<float> w = values_of(inputs[1]);  // [N][K]
      const int w_arg = find_arg(d, "weights");
      for (int64_t j = 0; j < c.n; ++j)
        put_bf16(d, a[w_arg], "weights", w.data() + j * c.k, c.k, j * c.k_pad);
      put_bf16(d, a[find_arg(d, "x")], "x", x.data(), c.k);
      break;
    }
    case SimPath::Add:
    case SimPath::Mul: {
      const std::vector<float> y = values_of(inputs[1]);
      put_bf16(d, a[find_arg(d, "in0")], "in0", x.data(), int64_t(x.size()));
      put_bf16(d, a[find_arg(d, "in1")], "in1", y.data(), int64_t(y.size()));
      break;
    }
    case SimPath::Scale:
    case SimPath::Silu:
    case SimPath::Gelu:
    case SimPath::Softmax:
      put_bf16(d, a[find_arg(d, "in0")], "in0", x.data(), int64_t(x.size()));
      if (c.path == SimPath::Scale) {
        // Assumption: the scale kernel reads its factor as one f32 (the family's 4-byte const).
        std::vector<uint8_t>& k = a[find_arg(d, "const")];
        if (k.size() < 4) throw std::logic_error("npu: design " + d.name + ": const argument under 4 bytes");
        std::memcpy(k.data(), &node.attrs.scale, 4);
      }
      break;
    case SimPath::LayerNorm:
    case SimPath::RMSNorm: {
      const int64_t H = inputs[0].shape().back();
      put_bf16(d, a[find_arg(d, "in0")], "in0", x.data(), int64_t(x.size()));
      std::vector<float> g = values_of(inputs[1]);
      if (c.path == SimPath::RMSNorm)  // Gemma's (1 + w): folded into gamma as npu-sim does
        for (float& v : g) v += node.attrs.rms_offset;
      const int k_arg = find_arg(d, "const");
      put_bf16(d, a[k_arg], "const", g.data(), H);
      if (c.path == SimPath::LayerNorm) {
        std::vector<float> b(static_cast<size_t>(H), 0.0f);
        if (inputs.size() > 2) b = values_of(inputs[2]);
        put_bf16(d, a[k_arg], "const", b.data(), H, H);
      }
      break;
    }
    default:
      break;  // pack_reason refused the others above
  }
  args = std::move(a);
  return "";
}

Tensor unpack_output(const Node& node, std::span<const Tensor> inputs, const OpChoice& c,
                     const std::vector<std::vector<uint8_t>>& args, const Shape& shape) {
  const Design& d = *c.design;
  const bool matmul = c.path == SimPath::GemvBf16;
  const std::string name = matmul ? "y" : "out";
  const std::vector<uint8_t>& o = args.at(static_cast<size_t>(find_arg(d, name)));
  Tensor out = Tensor::empty(shape);
  const int64_t n = out.numel();
  if (n * 2 > int64_t(o.size()))
    throw std::logic_error("npu: design " + d.name + " output '" + name + "' holds fewer than " +
                           std::to_string(n) + " bf16 values");
  float* y = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, o.data() + i * 2, 2);
    y[i] = bf16_to_f32(b);
  }
  if (matmul && inputs.size() > 2) {  // bias: added to the stored output in f32, as npu-sim does
    const std::vector<float> bias = inputs[2].to_vector();
    for (int64_t j = 0; j < n; ++j) y[j] += bias[size_t(j % c.n)];
  }
  (void)node;
  return out;
}

}  // namespace npu

NpuBackend::NpuBackend(std::unique_ptr<npu::DeviceRuntime> runtime, npu::XclbinPolicy policy)
    : runtime_(std::move(runtime)), cache_(policy) {}

NpuBackend::~NpuBackend() = default;

void NpuBackend::set_runtime(std::unique_ptr<npu::DeviceRuntime> runtime) { runtime_ = std::move(runtime); }

npu::OpChoice NpuBackend::choose(const Node& node, std::span<const Tensor> inputs) const {
  npu::OpChoice c;
  if (!runtime_) {
    c.reason = "no NPU runtime";
    return c;
  }
  std::vector<npu::ValueInfo> info;
  for (const Tensor& t : inputs) info.push_back(npu::value_info(t));
  c = cache_.choose(node, info);  // the decision npu-sim makes
  if (!c.on_npu) return c;
  if (!runtime_->has_artifact(c.design->name)) {
    c.on_npu = false;
    c.reason = "no compiled artifact for design " + c.design->name + " in " + runtime_->manifest().dir;
  }
  return c;
}

std::string NpuBackend::refusal(const Node& node, std::span<const Tensor> inputs) const {
  npu::OpChoice c = choose(node, inputs);
  return c.on_npu ? npu::pack_reason(c.path) : c.reason;
}

bool NpuBackend::supports(const Node& node, std::span<const Tensor> inputs) const {
  const std::string why = refusal(node, inputs);
  if (!why.empty()) refusals_[std::string(op_name(node.op))] = why;
  return why.empty();
}

Tensor NpuBackend::compute(const Node& node, std::span<const Tensor> inputs) {
  const npu::OpChoice c = choose(node, inputs);
  if (!c.on_npu)
    throw std::logic_error("npu backend cannot run " + std::string(op_name(node.op)) + " ('" + node.name +
                           "'): " + c.reason);
  std::vector<std::vector<uint8_t>> args;
  if (std::string why = npu::pack_args(node, inputs, c, args); !why.empty())
    throw std::logic_error("npu backend cannot run '" + node.name + "': " + why);
  std::vector<std::span<uint8_t>> spans(args.begin(), args.end());
  runtime_->run(*c.design, spans);
  dispatches_[c.design->name] += 1;
  Shape shape = inputs[0].shape();
  if (c.path == npu::SimPath::GemvBf16) shape.back() = c.n;
  return npu::unpack_output(node, inputs, c, args, shape);
}

}  // namespace xdna

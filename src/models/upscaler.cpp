// Keras layer graph -> host ops. Keras stores conv kernels as [Kh, Kw, Cin, Cout] (HWIO) and
// tensors as NHWC; the engine's conv2d wants [Cout, Cin, Kh, Kw] and [C, H, W], so kernels are
// transposed once here and activations stay channels-first throughout.
#include "models/upscaler.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/parallel.h"
#include "host/conv.h"
#include "host/ops.h"
#include "weights/source.h"
#include "weights/torch_checkpoint.h"

namespace xdna {

using nlohmann::json;

namespace {

constexpr size_t kSpareActivations = 2;  // freed activations run_upscaler keeps for reuse

[[noreturn]] void fail(const UpscalerNet& net, const std::string& layer, const std::string& what) {
  throw std::invalid_argument(net.origin + ": layer '" + layer + "': " + what);
}

int pair_value(const json& cfg, const char* key, int index, int fallback) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  const json& v = cfg[key];
  if (v.is_number_integer()) return v.get<int>();
  if (v.is_array() && v.size() == 2 && v[index].is_number_integer()) return v[index].get<int>();
  throw std::invalid_argument(std::string("bad '") + key + "'");
}

UpActivation parse_activation(const std::string& a) {
  if (a == "linear") return UpActivation::Linear;
  if (a == "relu") return UpActivation::Relu;
  if (a == "relu6") return UpActivation::Relu6;
  if (a == "sigmoid") return UpActivation::Sigmoid;
  if (a == "tanh") return UpActivation::Tanh;
  if (a == "swish" || a == "silu") return UpActivation::Swish;
  if (a == "elu") return UpActivation::Elu;
  throw std::invalid_argument("unsupported activation '" + a + "'");
}

const Tensor& find_weight(const TfjsModel& m, const std::string& layer, const std::string& what) {
  auto it = m.weights.find(layer + "/" + what);
  if (it != m.weights.end()) return it->second;
  for (const auto& [name, t] : m.weights)  // some converters prefix a scope: "model/layer/kernel"
    if (name.size() > layer.size() + what.size() + 1 && name.ends_with("/" + layer + "/" + what)) return t;
  return m.weight(layer + "/" + what);  // throws naming the missing weight
}

// [Kh, Kw, Cin/g, Cout] -> [Cout, Cin/g, Kh, Kw].
Tensor hwio_to_oihw(const Tensor& k) {
  const int64_t kh = k.dim(0), kw = k.dim(1), ci = k.dim(2), co = k.dim(3);
  Tensor w = Tensor::empty({co, ci, kh, kw});
  const float* s = k.data<float>();
  float* d = w.data<float>();
  for (int64_t y = 0; y < kh; ++y)
    for (int64_t x = 0; x < kw; ++x)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t o = 0; o < co; ++o) d[((o * ci + i) * kh + y) * kw + x] = s[((y * kw + x) * ci + i) * co + o];
  return w;
}

void build_conv(const TfjsModel& m, const TfjsLayer& l, UpLayer& u, int cin, const UpscalerNet& net) {
  const json& c = l.config;
  if (c.value("data_format", "channels_last") != "channels_last") fail(net, l.name, "only channels_last is supported");
  u.kind = UpLayerKind::Conv;
  u.channels = c.value("filters", 0);
  for (int i = 0; i < 2; ++i) {
    u.kernel[i] = pair_value(c, "kernel_size", i, 1);
    u.stride[i] = pair_value(c, "strides", i, 1);
    u.dilation[i] = pair_value(c, "dilation_rate", i, 1);
  }
  if (u.stride[0] != 1 || u.stride[1] != 1) fail(net, l.name, "strided convolutions are not supported in upscalers");
  u.groups = c.value("groups", 1);
  const std::string padding = c.value("padding", "valid");
  if (padding != "same" && padding != "valid") fail(net, l.name, "unsupported padding '" + padding + "'");
  u.same_padding = padding == "same";
  u.act = parse_activation(c.value("activation", "linear"));
  const Tensor& k = find_weight(m, l.name, "kernel");
  if (k.ndim() != 4 || k.dim(0) != u.kernel[0] || k.dim(1) != u.kernel[1] || k.dim(3) != u.channels ||
      u.groups < 1 || k.dim(2) * u.groups != cin)
    fail(net, l.name, "kernel shape " + shape_str(k.shape()) + " does not fit " + std::to_string(cin) +
                          " input channels, filters " + std::to_string(u.channels));
  u.weight = hwio_to_oihw(k);
  if (c.value("use_bias", true)) {
    u.bias = find_weight(m, l.name, "bias");
    if (u.bias.numel() != u.channels) fail(net, l.name, "bias has " + std::to_string(u.bias.numel()) + " values");
  }
}

// ReLU without a cap (EDSR's blocks, most of the RDNs) as its own loop, which vectorizes; the
// others go through activate() per element.
void relu_range(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

void activate_inplace(Tensor& t, UpActivation a, float alpha, float cap) {
  if (a == UpActivation::Linear) return;
  float* p = t.data<float>();
  parallel_for(t.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
    if (a == UpActivation::Relu && cap <= 0) return relu_range(p + i0, i1 - i0);
    for (int64_t i = i0; i < i1; ++i) p[i] = activate(a, p[i], alpha, cap);
  });
}

// TF "same" padding with stride 1: total (k - 1) d, the extra pixel of an even total at the end.
// The result goes into `y` when it is a spare buffer of the right size (conv2d_into).
void run_conv(const UpLayer& u, const Tensor& x, Tensor& y, const host::ConvEpilogue& e) {
  host::ConvParams p;
  p.dilation[0] = u.dilation[0];
  p.dilation[1] = u.dilation[1];
  p.groups = u.groups;
  const Tensor* bias = u.bias.defined() ? &u.bias : nullptr;
  if (!u.same_padding) return host::conv2d_into(x, u.weight, bias, p, y, e);
  const int64_t th = int64_t{u.kernel[0] - 1} * u.dilation[0], tw = int64_t{u.kernel[1] - 1} * u.dilation[1];
  if (th % 2 == 0 && tw % 2 == 0) {
    p.padding[0] = th / 2;
    p.padding[1] = tw / 2;
    return host::conv2d_into(x, u.weight, bias, p, y, e);
  }
  // Asymmetric: pad explicitly (before = total / 2) and convolve without padding.
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2), top = th / 2, left = tw / 2;
  Tensor padded = Tensor::zeros({C, H + th, W + tw});
  const float* s = x.data<float>();
  float* d = padded.data<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < H; ++r)
      std::copy(s + (c * H + r) * W, s + (c * H + r + 1) * W, d + (c * (H + th) + r + top) * (W + tw) + left);
  host::conv2d_into(padded, u.weight, bias, p, y, e);
}

Tensor upsample_nearest(const Tensor& x, int r) {
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2);
  Tensor y = Tensor::empty({C, H * r, W * r});
  const float* s = x.data<float>();
  float* d = y.data<float>();
  parallel_for(C * H, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t ch = r0; ch < r1; ++ch) {
      const float* in = s + ch * W;
      float* out = d + ch * r * W * r;
      for (int64_t w = 0; w < W; ++w)
        for (int j = 0; j < r; ++j) out[w * r + j] = in[w];
      for (int i = 1; i < r; ++i) std::copy(out, out + W * r, out + i * W * r);
    }
  });
  return y;
}

// The scale, receptive radius and peak activation bytes per input pixel of a built layer list.
void derive_sizes(UpscalerNet& net) {
  const UpLayer& out = net.layers[net.output];
  net.scale = out.factor;
  std::vector<int> radius(net.layers.size(), 0);  // per layer, in input pixels
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const UpLayer& u = net.layers[i];
    for (int j : u.inputs) radius[i] = std::max(radius[i], radius[j]);
    if (u.kind == UpLayerKind::Conv) {
      const int reach = std::max((u.kernel[0] - 1) * u.dilation[0], (u.kernel[1] - 1) * u.dilation[1]);
      radius[i] += ((reach + 1) / 2 + u.factor - 1) / u.factor;  // in input pixels, rounded up
    }
  }
  net.receptive_radius = radius[net.output];
  // Peak of live activations, freeing each tensor after its last reader (as run_upscaler does),
  // plus the spare buffers it keeps (at most the largest activation each).
  std::vector<int> readers(net.layers.size(), 0);
  for (const UpLayer& u : net.layers)
    for (int i : u.inputs) ++readers[i];
  double live = 0, largest = 0;
  net.peak_bytes_per_pixel = 0;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const UpLayer& u = net.layers[i];
    const double bytes = 4.0 * u.channels * u.factor * u.factor;
    live += bytes;
    largest = std::max(largest, bytes);
    net.peak_bytes_per_pixel = std::max(net.peak_bytes_per_pixel, live);
    for (int j : u.inputs)
      if (--readers[j] == 0) live -= 4.0 * net.layers[j].channels * net.layers[j].factor * net.layers[j].factor;
  }
  net.peak_bytes_per_pixel += kSpareActivations * largest;
}

}  // namespace

float activate(UpActivation a, float v, float alpha, float cap) {
  switch (a) {
    case UpActivation::Linear: return v;
    case UpActivation::Relu: return cap > 0 ? std::min(std::max(v, 0.0f), cap) : std::max(v, 0.0f);
    case UpActivation::Relu6: return std::min(std::max(v, 0.0f), 6.0f);
    case UpActivation::LeakyRelu: return v >= 0 ? v : alpha * v;
    case UpActivation::Sigmoid: return 1.0f / (1.0f + std::exp(-v));
    case UpActivation::Tanh: return std::tanh(v);
    case UpActivation::Swish: return v / (1.0f + std::exp(-v));
    case UpActivation::Elu: return v >= 0 ? v : std::expm1(v);
  }
  return v;
}

Tensor depth_to_space(const Tensor& x, int r) {
  if (x.ndim() != 3 || r < 1 || x.dim(0) % (int64_t{r} * r) != 0)
    throw std::invalid_argument("depth_to_space: input " + shape_str(x.shape()) + " is not [C r^2, H, W] for r " +
                                std::to_string(r));
  const Tensor xc = x.contiguous();
  const int64_t C = x.dim(0) / (r * r), H = x.dim(1), W = x.dim(2);
  Tensor y = Tensor::empty({C, H * r, W * r});
  const float* s = xc.data<float>();
  float* d = y.data<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int i = 0; i < r; ++i)
        for (int64_t w = 0; w < W; ++w)
          for (int j = 0; j < r; ++j)
            d[(c * H * r + h * r + i) * W * r + w * r + j] = s[((int64_t{i} * r + j) * C + c) * H * W + h * W + w];
  return y;
}

UpscalerNet build_upscaler(const TfjsModel& m) {
  UpscalerNet net;
  net.origin = m.origin;
  if (m.input_layers.size() != 1 || m.output_layers.size() != 1)
    throw std::invalid_argument(m.origin + ": an upscaler needs one input and one output layer");
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < net.layers.size(); ++i)
      if (net.layers[i].name == name) return static_cast<int>(i);
    fail(net, name, "used before it is defined (the layer list is not topologically sorted)");
  };
  for (const TfjsLayer& l : m.layers) {
    UpLayer u;
    u.name = l.name;
    for (const std::string& in : l.inputs) u.inputs.push_back(index_of(in));
    const json& c = l.config;
    const std::string& k = l.class_name;
    const bool unary = u.inputs.size() == 1;
    const UpLayer* first = u.inputs.empty() ? nullptr : &net.layers[u.inputs[0]];
    try {
      if (k == "InputLayer") {
        u.kind = UpLayerKind::Input;
        u.channels = 3;
        const json& shape = c.contains("batch_input_shape") ? c["batch_input_shape"] : c.value("batch_shape", json());
        if (shape.is_array() && shape.size() == 4 && shape[3].is_number_integer()) u.channels = shape[3].get<int>();
        if (u.channels != 3) fail(net, l.name, "the input has " + std::to_string(u.channels) + " channels, not RGB");
        if (l.name != m.input_layers[0]) fail(net, l.name, "a second input layer");
      } else if (!first) {
        fail(net, l.name, k + " has no inputs");
      } else if (k == "Conv2D") {
        if (!unary) fail(net, l.name, "Conv2D takes one input");
        build_conv(m, l, u, first->channels, net);
        u.factor = first->factor;
      } else if (k == "Add" || k == "Concatenate") {
        u.kind = k == "Add" ? UpLayerKind::Add : UpLayerKind::Concat;
        if (u.kind == UpLayerKind::Concat) {
          const int axis = c.value("axis", -1);
          if (axis != -1 && axis != 3) fail(net, l.name, "concatenation along axis " + std::to_string(axis));
        }
        u.factor = first->factor;
        u.channels = u.kind == UpLayerKind::Add ? first->channels : 0;
        for (int i : u.inputs) {
          if (net.layers[i].factor != u.factor) fail(net, l.name, "inputs of different resolutions");
          if (u.kind == UpLayerKind::Concat) u.channels += net.layers[i].channels;
          else if (net.layers[i].channels != u.channels) fail(net, l.name, "inputs of different channel counts");
        }
      } else if (k == "Activation" || k == "ReLU" || k == "LeakyReLU" || k == "MultiplyBeta" || k == "Rescaling") {
        if (!unary) fail(net, l.name, k + " takes one input");
        u.kind = UpLayerKind::Act;
        u.channels = first->channels;
        u.factor = first->factor;
        if (k == "Activation") {
          u.act = parse_activation(c.value("activation", "linear"));
        } else if (k == "ReLU") {
          const float slope = c.value("negative_slope", 0.0f), threshold = c.value("threshold", 0.0f);
          if (threshold != 0) fail(net, l.name, "ReLU threshold is not supported");
          u.act = slope != 0 ? UpActivation::LeakyRelu : UpActivation::Relu;
          u.alpha = slope;
          u.max_value = c.contains("max_value") && c["max_value"].is_number() ? c["max_value"].get<float>() : 0.0f;
          if (slope != 0 && u.max_value > 0) fail(net, l.name, "ReLU with both a slope and a cap");
        } else if (k == "LeakyReLU") {
          u.act = UpActivation::LeakyRelu;
          u.alpha = c.value("alpha", c.value("negative_slope", 0.3f));
        } else {
          u.kind = UpLayerKind::Rescale;
          u.scale = k == "MultiplyBeta" ? 0.2f : c.value("scale", 1.0f);  // UpscalerJS's BETA
          u.offset = k == "MultiplyBeta" ? 0.0f : c.value("offset", 0.0f);
        }
      } else if (k == "PReLU") {
        if (!unary) fail(net, l.name, "PReLU takes one input");
        u.kind = UpLayerKind::PRelu;
        u.channels = first->channels;
        u.factor = first->factor;
        const Tensor& a = find_weight(m, l.name, "alpha");
        if (a.numel() != u.channels) fail(net, l.name, "only per-channel PReLU (shared_axes [1, 2]) is supported");
        u.prelu = a.reshape({u.channels});
      } else if (k == "UpSampling2D") {
        if (!unary) fail(net, l.name, "UpSampling2D takes one input");
        if (c.value("interpolation", "nearest") != "nearest") fail(net, l.name, "only nearest upsampling is supported");
        u.kind = UpLayerKind::Upsample;
        u.block = pair_value(c, "size", 0, 2);
        if (pair_value(c, "size", 1, 2) != u.block || u.block < 1) fail(net, l.name, "non-square upsampling");
        u.channels = first->channels;
        u.factor = first->factor * u.block;
      } else if (k.starts_with("PixelShuffle") && k.ends_with("x")) {
        // UpscalerJS's custom layer `PixelShuffle<scale>x`: tf.depthToSpace(x, scale, 'NHWC').
        if (!unary) fail(net, l.name, "PixelShuffle takes one input");
        u.kind = UpLayerKind::DepthToSpace;
        u.block = std::stoi(k.substr(12, k.size() - 13));
        if (u.block < 1 || first->channels % (u.block * u.block) != 0)
          fail(net, l.name, "channels " + std::to_string(first->channels) + " do not split into blocks of " +
                                std::to_string(u.block));
        u.channels = first->channels / (u.block * u.block);
        u.factor = first->factor * u.block;
      } else {
        fail(net, l.name, "unsupported layer class '" + k + "'");
      }
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      if (what.starts_with(net.origin)) throw;
      fail(net, l.name, what);
    }
    net.layers.push_back(std::move(u));
  }
  net.output = index_of(m.output_layers[0]);
  const UpLayer& out = net.layers[net.output];
  if (out.channels != 3) fail(net, out.name, "the output has " + std::to_string(out.channels) + " channels, not RGB");
  derive_sizes(net);
  return net;
}

namespace {

// Appends the layers of a PyTorch network to `net`, reading convolutions from `w` by key.
struct TorchNetBuilder {
  const WeightSource& w;
  UpscalerNet& net;

  [[noreturn]] void fail_key(const std::string& key, const std::string& what) const {
    throw std::invalid_argument(net.origin + ": " + key + ": " + what);
  }
  int add(UpLayer u) {
    net.layers.push_back(std::move(u));
    return static_cast<int>(net.layers.size()) - 1;
  }
  // PyTorch Conv2d with padding k // 2 (odd kernels: TF "same"), stride 1, optional bias.
  int conv(const std::string& prefix, int input, UpActivation act = UpActivation::Linear) {
    if (!w.contains(prefix + ".weight")) fail_key(prefix + ".weight", "missing from the state dict");
    const Tensor k = host::to_f32(w.get(prefix + ".weight")).contiguous();
    const UpLayer& in = net.layers[input];
    if (k.ndim() != 4 || k.dim(1) != in.channels || k.dim(2) % 2 == 0 || k.dim(3) % 2 == 0)
      fail_key(prefix + ".weight", "shape " + shape_str(k.shape()) + " is not [Cout, " + std::to_string(in.channels) +
                                       ", K, K] with an odd K");
    UpLayer u;
    u.kind = UpLayerKind::Conv;
    u.name = prefix;
    u.inputs = {input};
    u.channels = static_cast<int>(k.dim(0));
    u.factor = in.factor;
    u.kernel[0] = static_cast<int>(k.dim(2));
    u.kernel[1] = static_cast<int>(k.dim(3));
    u.same_padding = true;
    u.act = act;
    u.weight = k;
    if (w.contains(prefix + ".bias")) {
      u.bias = host::to_f32(w.get(prefix + ".bias")).contiguous();
      if (u.bias.numel() != u.channels) fail_key(prefix + ".bias", "has " + std::to_string(u.bias.numel()) + " values");
    }
    return add(std::move(u));
  }
  int unary(UpLayerKind kind, const std::string& name, int input) {
    UpLayer u;
    u.kind = kind;
    u.name = name;
    u.inputs = {input};
    u.channels = net.layers[input].channels;
    u.factor = net.layers[input].factor;
    return add(std::move(u));
  }
  int shuffle(const std::string& name, int input, int r) {
    const int c = net.layers[input].channels;
    if (c % (r * r) != 0)
      fail_key(name, std::to_string(c) + " channels do not pixel-shuffle by " + std::to_string(r));
    const int i = unary(UpLayerKind::PixelShuffle, name, input);
    net.layers[i].block = r;
    net.layers[i].channels = c / (r * r);
    net.layers[i].factor *= r;
    return i;
  }
  int sum(const std::string& name, int a, int b) {
    const int i = unary(UpLayerKind::Add, name, a);
    net.layers[i].inputs.push_back(b);
    if (net.layers[b].channels != net.layers[a].channels)
      fail_key(name, "adds " + std::to_string(net.layers[b].channels) + " channels to " +
                         std::to_string(net.layers[a].channels));
    return i;
  }
};

int count_prefixed(const WeightSource& w, const std::string& prefix, const std::string& suffix) {
  int n = 0;
  while (w.contains(prefix + std::to_string(n) + suffix)) ++n;
  return n;
}

void build_espcn(TorchNetBuilder& b) {
  int x = b.conv("first_part.0", 0, UpActivation::Tanh);
  x = b.conv("first_part.2", x, UpActivation::Tanh);
  x = b.conv("last_part.0", x);
  const int c = b.net.layers[x].channels, r = static_cast<int>(std::lround(std::sqrt(c / 3.0)));
  if (r < 1 || 3 * r * r != c) b.fail_key("last_part.0.weight", std::to_string(c) + " outputs are not 3 r^2");
  b.net.output = b.shuffle("last_part.1", x, r);
}

void build_edsr(TorchNetBuilder& b, float res_scale) {
  const WeightSource& w = b.w;
  const int blocks = count_prefixed(w, "body.", ".body.0.weight");
  const int head = b.conv("head.0", b.conv("sub_mean", 0));
  int h = head;
  for (int i = 0; i < blocks; ++i) {
    const std::string p = "body." + std::to_string(i);
    int r = b.conv(p + ".body.2", b.conv(p + ".body.0", h, UpActivation::Relu));
    if (res_scale != 1.0f) {
      r = b.unary(UpLayerKind::Rescale, p + ".res_scale", r);
      b.net.layers[r].scale = res_scale;
    }
    h = b.sum(p, r, h);
  }
  int x = b.sum("body", b.conv("body." + std::to_string(blocks), h), head);
  // Upsampler: x2 / x3 one conv + shuffle (4F or 9F outputs); x4 two x2 stages.
  const int feats = b.net.layers[head].channels;
  int stage = 0;
  for (; w.contains("tail.0." + std::to_string(2 * stage) + ".weight"); ++stage) {
    const std::string p = "tail.0." + std::to_string(2 * stage);
    x = b.conv(p, x);
    const int c = b.net.layers[x].channels;
    if (c != 4 * feats && c != 9 * feats)
      b.fail_key(p + ".weight", std::to_string(c) + " outputs: an upsampler conv has 4 or 9 x " + std::to_string(feats));
    x = b.shuffle("tail.0." + std::to_string(2 * stage + 1), x, c == 4 * feats ? 2 : 3);
  }
  if (stage == 0) b.fail_key("tail.0.0.weight", "missing from the state dict (no upsampler)");
  b.net.output = b.conv("add_mean", b.conv("tail.1", x));
}

}  // namespace

UpscalerNet build_torch_upscaler(const WeightSource& w, float res_scale) {
  UpscalerNet net;
  net.origin = w.path();
  if (!(res_scale > 0.0f) || !std::isfinite(res_scale))
    throw std::invalid_argument(net.origin + ": res_scale must be positive, got " + std::to_string(res_scale));
  UpLayer in;
  in.kind = UpLayerKind::Input;
  in.name = "input";
  in.channels = 3;
  net.layers.push_back(in);
  TorchNetBuilder b{w, net};
  if (w.contains("first_part.0.weight")) build_espcn(b);
  else if (w.contains("head.0.weight")) build_edsr(b, res_scale);
  else
    throw std::invalid_argument(net.origin + ": not an ESPCN (first_part.0.weight) or EDSR (head.0.weight) state dict");
  const UpLayer& out = net.layers[net.output];
  if (out.channels != 3) fail(net, out.name, "the output has " + std::to_string(out.channels) + " channels, not RGB");
  derive_sizes(net);
  return net;
}

UpscalerNet load_upscaler(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string ext = fs::path(path).extension().string();
  if (ext != ".pt" && ext != ".pth" && ext != ".safetensors") return build_upscaler(load_tfjs_model(path));
  std::unique_ptr<WeightSource> w;
  if (ext == ".safetensors") w = open_weights(path);
  else w = std::make_unique<TorchCheckpoint>(path);
  float res_scale = 1.0f;
  const json meta = w->metadata();
  if (ext == ".safetensors" && meta.is_object() && meta.contains("res_scale") && meta["res_scale"].is_string())
    res_scale = std::stof(meta["res_scale"].get<std::string>());
  const fs::path side = fs::path(path).replace_extension(".json");
  if (fs::is_regular_file(side)) {
    std::ifstream f(side);
    const json j = json::parse(f, nullptr, false);
    if (!j.is_object() || (j.contains("res_scale") && !j["res_scale"].is_number()))
      throw std::invalid_argument(side.string() + ": expected a JSON object with a numeric res_scale");
    res_scale = j.value("res_scale", res_scale);
  }
  return build_torch_upscaler(*w, res_scale);
}

Tensor run_upscaler(const UpscalerNet& net, const Tensor& x) {
  if (x.ndim() != 3 || x.dim(0) != 3 || x.dtype() != DType::F32)
    throw std::invalid_argument("run_upscaler: input " + shape_str(x.shape()) + " is not f32 [3, H, W]");
  std::vector<int> readers(net.layers.size(), 0);
  for (const UpLayer& u : net.layers)
    for (int i : u.inputs) ++readers[i];
  ++readers[net.output];
  std::vector<Tensor> v(net.layers.size());
  // Freed activations kept for reuse as conv outputs: writing into fresh multi-MB buffers costs
  // their page faults each time (the kernel zeroing pages was a quarter of the time).
  std::vector<Tensor> spare;
  auto take_spare = [&](int64_t numel) {
    for (size_t i = 0; i < spare.size(); ++i)
      if (spare[i].numel() == numel) {
        Tensor t = std::move(spare[i]);
        spare.erase(spare.begin() + static_cast<std::ptrdiff_t>(i));
        return t;
      }
    return Tensor();
  };
  // Layers whose work a conv's epilogue already did (its Rescale and residual Add): they pass
  // their first input through.
  std::vector<bool> absorbed(net.layers.size(), false);
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const UpLayer& u = net.layers[li];
    Tensor y;
    if (absorbed[li]) y = v[u.inputs[0]];
    else switch (u.kind) {
      case UpLayerKind::Input: y = x.clone(); break;  // never alias the caller's tensor
      case UpLayerKind::Conv: {
        const Tensor& in = v[u.inputs[0]];
        const int64_t grow_h = u.same_padding ? 0 : int64_t{u.kernel[0] - 1} * u.dilation[0];
        const int64_t grow_w = u.same_padding ? 0 : int64_t{u.kernel[1] - 1} * u.dilation[1];
        y = take_spare(int64_t{u.channels} * (in.dim(1) - grow_h) * (in.dim(2) - grow_w));
        host::ConvEpilogue e;
        e.constant_weights = true;  // loaded once, never rewritten
        bool act_done = false;
        if (u.act == UpActivation::Relu || u.act == UpActivation::Relu6) {  // a clamp: fused
          e.lo = 0.0f;
          if (u.act == UpActivation::Relu6) e.hi = 6.0f;
          else if (u.max_value > 0) e.hi = u.max_value;
          act_done = true;
        }
        // conv -> [Rescale s] -> Add(conv, other) (EDSR's residual blocks) as one epilogue
        // s (conv + bias) + other, when the conv's output has no other reader.
        size_t next = li + 1;
        if (u.act == UpActivation::Linear && readers[li] == 1 && next < net.layers.size() &&
            net.layers[next].kind == UpLayerKind::Rescale && net.layers[next].inputs[0] == int(li) &&
            net.layers[next].offset == 0.0f && readers[next] == 1) {
          e.res_scale = net.layers[next].scale;
          ++next;
        }
        if (u.act == UpActivation::Linear && next < net.layers.size() && net.layers[next].kind == UpLayerKind::Add &&
            net.layers[next].inputs.size() == 2 && net.layers[next].inputs[0] == int(next - 1) &&
            (next == li + 1 ? readers[li] == 1 : true)) {
          const Tensor& other = v[net.layers[next].inputs[1]];
          if (other.defined()) {
            e.residual = &other;
            for (size_t k = li + 1; k <= next; ++k) absorbed[k] = true;
          }
        }
        if (!e.residual) e.res_scale = 1.0f;  // the Rescale then runs as its own layer
        // conv -> PixelShuffle (ESPCN / EDSR upsamplers): the conv stores the shuffled layout
        // itself, sparing the largest buffer of the network (and its page faults). The activation
        // is pointwise, so it may run after the shuffle.
        if (!e.residual && readers[li] == 1 && li + 1 < net.layers.size() &&
            net.layers[li + 1].kind == UpLayerKind::PixelShuffle && net.layers[li + 1].inputs[0] == int(li)) {
          e.pixel_shuffle = net.layers[li + 1].block;
          absorbed[li + 1] = true;
        }
        run_conv(u, in, y, e);
        if (!act_done) activate_inplace(y, u.act, u.alpha, u.max_value);
        break;
      }
      case UpLayerKind::Act:
        y = readers[u.inputs[0]] == 1 ? v[u.inputs[0]] : v[u.inputs[0]].clone();  // in place when last reader
        activate_inplace(y, u.act, u.alpha, u.max_value);
        break;
      case UpLayerKind::Rescale: {
        y = readers[u.inputs[0]] == 1 ? v[u.inputs[0]] : v[u.inputs[0]].clone();  // in place when last reader
        float* p = y.data<float>();
        parallel_for(y.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) p[i] = p[i] * u.scale + u.offset;
        });
        break;
      }
      case UpLayerKind::PRelu: {
        y = v[u.inputs[0]].clone();
        const int64_t plane = y.dim(1) * y.dim(2);
        float* p = y.data<float>();
        const float* a = u.prelu.data<float>();
        for (int64_t c = 0; c < u.channels; ++c)
          for (int64_t i = 0; i < plane; ++i) p[c * plane + i] = p[c * plane + i] >= 0 ? p[c * plane + i] : a[c] * p[c * plane + i];
        break;
      }
      case UpLayerKind::Add: {
        y = readers[u.inputs[0]] == 1 ? v[u.inputs[0]] : v[u.inputs[0]].clone();  // in place when last reader
        float* p = y.data<float>();
        for (size_t k = 1; k < u.inputs.size(); ++k) {
          const Tensor& b = v[u.inputs[k]];
          if (b.shape() != y.shape()) fail(net, u.name, "adding " + shape_str(b.shape()) + " to " + shape_str(y.shape()));
          const float* q = b.data<float>();
          parallel_for(y.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) p[i] += q[i];
          });
        }
        break;
      }
      case UpLayerKind::Concat: {
        const Tensor& a = v[u.inputs[0]];
        y = Tensor::empty({u.channels, a.dim(1), a.dim(2)});
        float* p = y.data<float>();
        for (int i : u.inputs) {
          const Tensor& b = v[i];
          if (b.dim(1) != a.dim(1) || b.dim(2) != a.dim(2)) fail(net, u.name, "inputs of different sizes");
          p = std::copy(b.data<float>(), b.data<float>() + b.numel(), p);
        }
        break;
      }
      case UpLayerKind::Upsample: y = upsample_nearest(v[u.inputs[0]], u.block); break;
      case UpLayerKind::DepthToSpace: y = depth_to_space(v[u.inputs[0]], u.block); break;
      case UpLayerKind::PixelShuffle: y = host::pixel_shuffle(v[u.inputs[0]], u.block); break;
    }
    v[li] = std::move(y);
    for (int j : u.inputs)
      if (--readers[j] == 0) {  // free activations after their last reader, keeping two spares
        if (v[j].defined() && v[j].buffer().use_count() == 1) spare.push_back(std::move(v[j]));
        if (spare.size() > kSpareActivations) spare.erase(spare.begin());
        v[j] = Tensor();
      }
  }
  return v[net.output];
}

}  // namespace xdna

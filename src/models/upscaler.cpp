// Keras layer graph -> host ops. Keras stores conv kernels as [Kh, Kw, Cin, Cout] (HWIO) and
// tensors as NHWC; the engine's conv2d wants [Cout, Cin, Kh, Kw] and [C, H, W], so kernels are
// transposed once here and activations stay channels-first throughout.
#include "models/upscaler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/parallel.h"
#include "host/conv.h"

namespace xdna {

using nlohmann::json;

namespace {

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

void activate_inplace(Tensor& t, UpActivation a, float alpha, float cap) {
  if (a == UpActivation::Linear) return;
  float* p = t.data<float>();
  parallel_for(t.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) p[i] = activate(a, p[i], alpha, cap);
  });
}

// TF "same" padding with stride 1: total (k - 1) d, the extra pixel of an even total at the end.
Tensor run_conv(const UpLayer& u, const Tensor& x) {
  host::ConvParams p;
  p.dilation[0] = u.dilation[0];
  p.dilation[1] = u.dilation[1];
  p.groups = u.groups;
  const Tensor* bias = u.bias.defined() ? &u.bias : nullptr;
  if (!u.same_padding) return host::conv2d(x, u.weight, bias, p);
  const int64_t th = int64_t{u.kernel[0] - 1} * u.dilation[0], tw = int64_t{u.kernel[1] - 1} * u.dilation[1];
  if (th % 2 == 0 && tw % 2 == 0) {
    p.padding[0] = th / 2;
    p.padding[1] = tw / 2;
    return host::conv2d(x, u.weight, bias, p);
  }
  // Asymmetric: pad explicitly (before = total / 2) and convolve without padding.
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2), top = th / 2, left = tw / 2;
  Tensor padded = Tensor::zeros({C, H + th, W + tw});
  const float* s = x.data<float>();
  float* d = padded.data<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      std::copy(s + (c * H + y) * W, s + (c * H + y + 1) * W, d + (c * (H + th) + y + top) * (W + tw) + left);
  return host::conv2d(padded, u.weight, bias, p);
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

}  // namespace

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
  std::vector<int> radius;  // per layer, in input pixels
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
    int r = 0;
    for (int i : u.inputs) r = std::max(r, radius[i]);
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
        const int reach = std::max((u.kernel[0] - 1) * u.dilation[0], (u.kernel[1] - 1) * u.dilation[1]);
        r += ((reach + 1) / 2 + u.factor - 1) / u.factor;  // in input pixels, rounded up
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
    radius.push_back(r);
  }
  net.output = index_of(m.output_layers[0]);
  const UpLayer& out = net.layers[net.output];
  if (out.channels != 3) fail(net, out.name, "the output has " + std::to_string(out.channels) + " channels, not RGB");
  net.scale = out.factor;
  net.receptive_radius = radius[net.output];
  // Peak of live activations, freeing each tensor after its last reader (as run_upscaler does).
  std::vector<int> readers(net.layers.size(), 0);
  for (const UpLayer& u : net.layers)
    for (int i : u.inputs) ++readers[i];
  double live = 0;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const UpLayer& u = net.layers[i];
    live += 4.0 * u.channels * u.factor * u.factor;
    net.peak_bytes_per_pixel = std::max(net.peak_bytes_per_pixel, live);
    for (int j : u.inputs)
      if (--readers[j] == 0) live -= 4.0 * net.layers[j].channels * net.layers[j].factor * net.layers[j].factor;
  }
  return net;
}

UpscalerNet load_upscaler(const std::string& model_json_path) { return build_upscaler(load_tfjs_model(model_json_path)); }

Tensor run_upscaler(const UpscalerNet& net, const Tensor& x) {
  if (x.ndim() != 3 || x.dim(0) != 3 || x.dtype() != DType::F32)
    throw std::invalid_argument("run_upscaler: input " + shape_str(x.shape()) + " is not f32 [3, H, W]");
  std::vector<int> readers(net.layers.size(), 0);
  for (const UpLayer& u : net.layers)
    for (int i : u.inputs) ++readers[i];
  ++readers[net.output];
  std::vector<Tensor> v(net.layers.size());
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const UpLayer& u = net.layers[li];
    Tensor y;
    switch (u.kind) {
      case UpLayerKind::Input: y = x.clone(); break;  // never alias the caller's tensor
      case UpLayerKind::Conv:
        y = run_conv(u, v[u.inputs[0]]);
        activate_inplace(y, u.act, u.alpha, u.max_value);
        break;
      case UpLayerKind::Act:
        y = readers[u.inputs[0]] == 1 ? v[u.inputs[0]] : v[u.inputs[0]].clone();  // in place when last reader
        activate_inplace(y, u.act, u.alpha, u.max_value);
        break;
      case UpLayerKind::Rescale: {
        y = v[u.inputs[0]].clone();
        float* p = y.data<float>();
        for (int64_t i = 0; i < y.numel(); ++i) p[i] = p[i] * u.scale + u.offset;
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
        y = v[u.inputs[0]].clone();
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
    }
    v[li] = std::move(y);
    for (int j : u.inputs)
      if (--readers[j] == 0) v[j] = Tensor();  // free activations after their last reader
  }
  return v[net.output];
}

}  // namespace xdna

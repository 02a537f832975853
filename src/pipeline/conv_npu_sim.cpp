#include "pipeline/conv_npu_sim.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "host/conv.h"

namespace xdna {

namespace {

// Why each non-conv op stays on the host (the planner and the npu-sim run say the same).
const std::map<std::string, std::string> kHostReason = {
    {"add", "elementwise add of two activations: the conv design has no second input stream (a residual "
            "epilogue is not written yet); runs on the host between dispatches"},
    {"concat", "channel concatenation: a host copy (a DMA access pattern on the next conv's input is possible, not emitted)"},
    {"pixel_shuffle", "a permutation (depth to space): a host copy between dispatches (a strided drain pattern on "
                      "the conv's output is possible, not emitted)"},
    {"rescale", "x * scale + offset: not folded into the conv epilogue"},
    {"activation", "activation not in the conv kernel's epilogue (it has bias, negative slope and clamp only)"},
    {"prelu", "per-channel PReLU: not in the conv kernel's epilogue"},
    {"upsample", "nearest upsampling: a host copy"},
    {"pool", "max pool: no pooling design"},
    {"head", "global average pool + the Linear classifier in f32 (a GEMV the LLM designs could take; not wired for conv models)"},
};

std::string reason(const std::string& kind) { return kHostReason.at(kind); }

std::string dims(int64_t c, int64_t h, int64_t w) {
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

// ---- Upscaler layers as conv sim layers ----------------------------------------------------------

// The conv as a ConvSimLayer; `post` gets the activation kind the epilogue cannot take ("" if none).
npu::ConvSimLayer up_conv(const UpLayer& u, std::string* unsupported, bool* post_act) {
  npu::ConvSimLayer l;
  l.w = u.weight;
  if (u.bias.defined()) l.bias = u.bias;
  l.groups = u.groups;
  l.stride = u.stride[0];
  *unsupported = "";
  if (u.stride[0] != u.stride[1]) *unsupported = "different strides along height and width";
  if (u.dilation[0] != 1 || u.dilation[1] != 1) *unsupported = "a dilated conv: the conv designs have dilation 1";
  if (unsupported->empty()) *unsupported = npu::conv_sim_unsupported(l);
  if (u.same_padding) {
    const int64_t th = int64_t{u.kernel[0] - 1} * u.dilation[0], tw = int64_t{u.kernel[1] - 1} * u.dilation[1];
    l.pad[0] = th / 2, l.pad[1] = th - th / 2, l.pad[2] = tw / 2, l.pad[3] = tw - tw / 2;
  }
  *post_act = false;
  switch (u.act) {
    case UpActivation::Linear: break;
    case UpActivation::Relu: l.lo = 0, l.neg_slope = 0; if (u.max_value > 0) l.hi = u.max_value; break;
    case UpActivation::Relu6: l.lo = 0, l.hi = 6, l.neg_slope = 0; break;
    case UpActivation::LeakyRelu: l.neg_slope = u.alpha; break;
    default: *post_act = true;
  }
  return l;
}

Tensor padded(const Tensor& x, const int64_t pad[4]) {
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2), Hp = H + pad[0] + pad[1], Wp = W + pad[2] + pad[3];
  Tensor y = Tensor::zeros({C, Hp, Wp});
  const float* s = x.data<float>();
  float* d = y.data<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < H; ++r)
      std::copy(s + (c * H + r) * W, s + (c * H + r + 1) * W, d + (c * Hp + r + pad[0]) * Wp + pad[2]);
  return y;
}

// A conv no design takes, in f32 on the host (the layer's epilogue applied after).
Tensor host_conv(const Tensor& x, const npu::ConvSimLayer& l, int64_t dil_h, int64_t dil_w) {
  host::ConvParams p;
  p.stride[0] = p.stride[1] = l.stride;
  p.dilation[0] = dil_h, p.dilation[1] = dil_w;
  p.groups = l.groups;
  Tensor y = host::conv2d(padded(x.contiguous(), l.pad), l.w, l.bias.defined() ? &l.bias : nullptr, p);
  float* v = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    float t = v[i] < 0 ? v[i] * l.neg_slope : v[i];
    v[i] = std::min(std::max(t, l.lo), l.hi);
  }
  return y;
}

struct Recorder {
  ConvSimRun* run;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  void operator()(const std::string& node, OpKind op, const std::string& host_kind) {
    const auto t1 = std::chrono::steady_clock::now();
    if (run) {
      run->report.ops.push_back({node, op, host_kind.empty() ? "npu-sim" : "host", !host_kind.empty(),
                                 std::chrono::duration<double, std::milli>(t1 - t0).count()});
      if (!host_kind.empty()) run->host_ops.emplace(host_kind, reason(host_kind));
    }
    t0 = t1;
  }
};

// ---- ConvNet layers ---------------------------------------------------------------------------

npu::ConvSimLayer net_conv(const ConvLayer& c, bool relu_after = false) {
  npu::ConvSimLayer l;
  l.w = c.w;
  l.bias = c.bias;
  l.stride = c.stride;
  l.groups = c.groups;
  std::copy(c.pad, c.pad + 4, l.pad);
  if (c.act != ConvLayer::Act::None || relu_after) l.lo = 0, l.neg_slope = 0;
  if (c.act == ConvLayer::Act::Relu6) l.hi = 6;
  return l;
}

Tensor run_net_conv(const Tensor& x, const npu::ConvSimLayer& l, ConvSimRun* run, Recorder& rec, const std::string& name) {
  const std::string why = npu::conv_sim_unsupported(l);
  Tensor y = why.empty() ? npu::conv2d_npu_sim(x, l, run ? &run->stats : nullptr) : host_conv(x, l, 1, 1);
  if (!why.empty() && run) run->host_ops.emplace("conv", why);
  if (run) run->report.ops.push_back({name, OpKind::Conv2d, why.empty() ? "npu-sim" : "host", !why.empty(), 0});
  rec.t0 = std::chrono::steady_clock::now();
  return y;
}

void add_into(Tensor& y, const Tensor& s, bool relu) {
  if (s.shape() != y.shape())
    throw std::logic_error("conv npu-sim: residual of shape " + shape_str(s.shape()) + " for " + shape_str(y.shape()));
  float* v = y.data<float>();
  const float* p = s.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) v[i] = relu ? std::max(v[i] + p[i], 0.0f) : v[i] + p[i];
}

}  // namespace

std::map<std::string, std::string> conv_host_reasons(const RunReport& report) {
  std::map<std::string, std::string> out;
  for (const OpRecord& r : report.ops) {
    if (r.backend != "host") continue;
    const size_t dot = r.node.rfind('.');
    const std::string kind = dot == std::string::npos ? r.node : r.node.substr(dot + 1);
    if (auto it = kHostReason.find(kind); it != kHostReason.end()) out.emplace(kind, it->second);
  }
  return out;
}

Tensor run_upscaler_npu_sim(const UpscalerNet& net, const Tensor& x, ConvSimRun* run) {
  if (x.ndim() != 3 || x.dim(0) != 3 || x.dtype() != DType::F32)
    throw std::invalid_argument("run_upscaler_npu_sim: input " + shape_str(x.shape()) + " is not f32 [3, H, W]");
  std::vector<Tensor> v(net.layers.size());
  Recorder rec{run};
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const UpLayer& u = net.layers[li];
    const Tensor in = u.inputs.empty() ? Tensor() : v[u.inputs[0]];
    Tensor y;
    switch (u.kind) {
      case UpLayerKind::Input: y = x.contiguous().clone(); break;
      case UpLayerKind::Conv: {
        std::string why;
        bool post = false;
        const npu::ConvSimLayer l = up_conv(u, &why, &post);
        if (why.empty()) {
          y = npu::conv2d_npu_sim(in, l, run ? &run->stats : nullptr);
        } else {
          y = host_conv(in, l, u.dilation[0], u.dilation[1]);
          if (run) run->host_ops.emplace("conv", why);
        }
        if (run) run->report.ops.push_back({u.name, OpKind::Conv2d, why.empty() ? "npu-sim" : "host", !why.empty(), 0});
        rec.t0 = std::chrono::steady_clock::now();
        if (post) {
          float* p = y.data<float>();
          for (int64_t i = 0; i < y.numel(); ++i) p[i] = activate(u.act, p[i], u.alpha, u.max_value);
          rec(u.name + ".act", OpKind::Relu, "activation");
        }
        break;
      }
      case UpLayerKind::Act: {
        y = in.clone();
        float* p = y.data<float>();
        for (int64_t i = 0; i < y.numel(); ++i) p[i] = activate(u.act, p[i], u.alpha, u.max_value);
        rec(u.name, OpKind::Relu, "activation");
        break;
      }
      case UpLayerKind::Rescale: {
        y = in.clone();
        float* p = y.data<float>();
        for (int64_t i = 0; i < y.numel(); ++i) p[i] = p[i] * u.scale + u.offset;
        rec(u.name, OpKind::Scale, "rescale");
        break;
      }
      case UpLayerKind::PRelu: {
        y = in.clone();
        const int64_t plane = y.dim(1) * y.dim(2);
        float* p = y.data<float>();
        const float* a = u.prelu.data<float>();
        for (int64_t c = 0; c < u.channels; ++c)
          for (int64_t i = 0; i < plane; ++i) p[c * plane + i] = p[c * plane + i] >= 0 ? p[c * plane + i] : a[c] * p[c * plane + i];
        rec(u.name, OpKind::Relu, "prelu");
        break;
      }
      case UpLayerKind::Add: {
        y = in.clone();
        for (size_t k = 1; k < u.inputs.size(); ++k) add_into(y, v[u.inputs[k]], false);
        rec(u.name, OpKind::Add, "add");
        break;
      }
      case UpLayerKind::Concat: {
        y = Tensor::empty({u.channels, in.dim(1), in.dim(2)});
        float* p = y.data<float>();
        for (int i : u.inputs) p = std::copy(v[i].data<float>(), v[i].data<float>() + v[i].numel(), p);
        rec(u.name, OpKind::Concat, "concat");
        break;
      }
      case UpLayerKind::Upsample: {
        const int r = u.block;
        const int64_t C = in.dim(0), H = in.dim(1), W = in.dim(2);
        y = Tensor::empty({C, H * r, W * r});
        const float* s = in.data<float>();
        float* d = y.data<float>();
        for (int64_t c = 0; c < C; ++c)
          for (int64_t h = 0; h < H * r; ++h)
            for (int64_t w = 0; w < W * r; ++w) d[(c * H * r + h) * W * r + w] = s[(c * H + h / r) * W + w / r];
        rec(u.name, OpKind::PixelShuffle, "upsample");
        break;
      }
      case UpLayerKind::DepthToSpace:
        y = depth_to_space(in, u.block);
        rec(u.name, OpKind::PixelShuffle, "pixel_shuffle");
        break;
      case UpLayerKind::PixelShuffle:
        y = host::pixel_shuffle(in, u.block);
        rec(u.name, OpKind::PixelShuffle, "pixel_shuffle");
        break;
    }
    v[li] = std::move(y);
  }
  return v[net.output];
}

Tensor convnet_forward_npu_sim(const ConvNet& net, const Tensor& pixels, ConvSimRun* run) {
  if (pixels.ndim() != 4 || pixels.dim(1) != net.spec().channels || pixels.dtype() != DType::F32)
    throw std::invalid_argument("convnet_forward_npu_sim: pixels must be f32 [N, " + std::to_string(net.spec().channels) +
                                ", H, W], got " + shape_str(pixels.shape()));
  const Tensor px = pixels.contiguous();
  const int64_t N = px.dim(0), labels = net.fc_w.dim(0), features = net.fc_w.dim(1);
  Tensor logits = Tensor::empty({N, labels});
  Recorder rec{run};
  for (int64_t n = 0; n < N; ++n) {
    Tensor x = px.row(n).contiguous();
    int64_t bi = 0;
    for (const ConvBlock& b : net.blocks) {
      const std::string bn = "block" + std::to_string(bi++);
      Tensor skip = x;
      for (size_t i = 0; i < b.shortcut.size(); ++i)
        skip = run_net_conv(skip, net_conv(b.shortcut[i]), run, rec, bn + ".shortcut");
      Tensor y = x;
      for (size_t i = 0; i < b.convs.size(); ++i)
        y = run_net_conv(y, net_conv(b.convs[i]), run, rec, bn + ".conv" + std::to_string(i));
      if (b.max_pool > 0) {
        const int64_t k[2] = {b.max_pool, b.max_pool}, st[2] = {2, 2}, pad[2] = {b.max_pool / 2, b.max_pool / 2};
        y = host::pool2d(y, PoolKind::Max, k, st, pad);
        rec(bn + ".pool", OpKind::Pool2d, "pool");
      }
      if (b.residual) {
        y = y.clone();
        add_into(y, skip, b.relu_after_add);
        rec(bn + ".add", OpKind::Add, "add");
      }
      x = y;
    }
    if (x.dim(0) != features)
      throw std::logic_error("conv npu-sim: " + std::to_string(x.dim(0)) + " features for a classifier of " + std::to_string(features));
    const int64_t hw = x.dim(1) * x.dim(2);
    const float* feat = x.data<float>();
    std::vector<double> pooled(size_t(features), 0.0);
    for (int64_t c = 0; c < features; ++c) {
      double s = 0;
      for (int64_t i = 0; i < hw; ++i) s += feat[c * hw + i];
      pooled[size_t(c)] = s / double(hw);
    }
    const float* fw = net.fc_w.data<float>();
    const float* fb = net.fc_b.data<float>();
    for (int64_t o = 0; o < labels; ++o) {
      double s = 0;
      for (int64_t c = 0; c < features; ++c) s += double(fw[o * features + c]) * pooled[size_t(c)];
      logits.data<float>()[n * labels + o] = float(fb[o] + s);
    }
    rec("head", OpKind::MatMul, "head");
  }
  return logits;
}

npu::ConvPlanInput upscaler_plan_input(const UpscalerNet& net, int64_t height, int64_t width, const std::string& name) {
  npu::ConvPlanInput p;
  p.name = name, p.family = "upscaler x" + std::to_string(net.scale), p.height = height, p.width = width;
  std::vector<std::array<int64_t, 3>> shape(net.layers.size());  // C, H, W per layer
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const UpLayer& u = net.layers[li];
    const std::array<int64_t, 3> in = u.inputs.empty() ? std::array<int64_t, 3>{3, height, width} : shape[size_t(u.inputs[0])];
    std::array<int64_t, 3> out = {u.channels, in[1], in[2]};
    auto host = [&](const std::string& kind) {
      p.ops.push_back({u.name, kind, {}, "", reason(kind), dims(out[0], out[1], out[2])});
    };
    switch (u.kind) {
      case UpLayerKind::Input: out = in; break;
      case UpLayerKind::Conv: {
        std::string why;
        bool post = false;
        const npu::ConvSimLayer l = up_conv(u, &why, &post);
        npu::ConvModelOp op{u.name, "conv", {}, why, "", ""};
        op.shape.height = in[1], op.shape.width = in[2], op.shape.c_in = in[0], op.shape.c_out = u.channels;
        op.shape.kernel = u.kernel[0], op.shape.stride = l.stride, op.shape.depthwise = l.groups > 1;
        const int64_t eh = int64_t{u.kernel[0] - 1} * u.dilation[0], ew = int64_t{u.kernel[1] - 1} * u.dilation[1];
        op.shape.out_height = (in[1] + l.pad[0] + l.pad[1] - eh - 1) / l.stride + 1;
        op.shape.out_width = (in[2] + l.pad[2] + l.pad[3] - ew - 1) / l.stride + 1;
        out = {u.channels, op.shape.out_height, op.shape.out_width};
        op.out_shape = dims(out[0], out[1], out[2]);
        p.ops.push_back(op);
        if (post) host("activation");
        break;
      }
      case UpLayerKind::Act: host("activation"); break;
      case UpLayerKind::Rescale: host("rescale"); break;
      case UpLayerKind::PRelu: host("prelu"); break;
      case UpLayerKind::Add: host("add"); break;
      case UpLayerKind::Concat: host("concat"); break;
      case UpLayerKind::Upsample: out = {in[0], in[1] * u.block, in[2] * u.block}; host("upsample"); break;
      case UpLayerKind::DepthToSpace:
      case UpLayerKind::PixelShuffle:
        out = {in[0] / (u.block * u.block), in[1] * u.block, in[2] * u.block};
        host("pixel_shuffle");
        break;
    }
    shape[li] = out;
  }
  return p;
}

npu::ConvPlanInput convnet_plan_input(const ConvNet& net, int64_t height, int64_t width, const std::string& name) {
  npu::ConvPlanInput p;
  p.name = name, p.family = net.spec().family, p.height = height, p.width = width;
  int64_t C = net.spec().channels, H = height, W = width;
  auto conv = [&](const ConvLayer& c, const std::string& nm, int64_t& cc, int64_t& hh, int64_t& ww) {
    const npu::ConvSimLayer l = net_conv(c);
    npu::ConvModelOp op{nm, "conv", npu::conv_sim_shape(l, cc, hh, ww), npu::conv_sim_unsupported(l), "", ""};
    cc = op.shape.c_out, hh = op.shape.out_height, ww = op.shape.out_width;
    op.out_shape = dims(cc, hh, ww);
    p.ops.push_back(op);
  };
  int64_t bi = 0;
  for (const ConvBlock& b : net.blocks) {
    const std::string bn = "block" + std::to_string(bi++);
    int64_t sc = C, sh = H, sw = W;
    for (const ConvLayer& c : b.shortcut) conv(c, bn + ".shortcut", sc, sh, sw);
    for (size_t i = 0; i < b.convs.size(); ++i) conv(b.convs[i], bn + ".conv" + std::to_string(i), C, H, W);
    if (b.max_pool > 0) {
      H = (H + 2 * (b.max_pool / 2) - b.max_pool) / 2 + 1, W = (W + 2 * (b.max_pool / 2) - b.max_pool) / 2 + 1;
      p.ops.push_back({bn + ".pool", "pool", {}, "", reason("pool"), dims(C, H, W)});
    }
    if (b.residual) p.ops.push_back({bn + ".add", "add", {}, "", reason("add"), dims(C, H, W)});
  }
  p.ops.push_back({"head", "head", {}, "", reason("head"), std::to_string(net.num_labels())});
  return p;
}

}  // namespace xdna

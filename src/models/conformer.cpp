// Conformer encoder (FastConformer / GigaAM) and CTC head; see conformer.h.
//
// The encoder runs as a chain of graphs, one per gap between conformer convolution modules: every
// matmul, norm, activation, the subsampling convolutions, rotary positions and the per-head
// attention are graph ops (RunReport says where each ran). The relative-position shift of
// Transformer-XL is lowered into Reshape/Slice ops. One step per layer runs directly on the host
// because the op set has no sigmoid: GLU + depthwise conv1d (batch norm folded) + SiLU, fused in
// one loop over [T, d]; the report lists it as a Conv1d on backend "host-direct". lower_encoder()
// builds the same chain without running it (for `npu plan`).
#include "models/conformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/parallel.h"
#include "host/conv.h"
#include "host/host_backend.h"
#include "host/matmul.h"
#include "host/ops.h"
#include "models/graph_builder.h"

namespace xdna {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

struct Linear {
  Tensor w, b;  // b undefined: no bias
};

struct Norm {
  Tensor w, b;
};

struct ConformerLayer {
  Norm ff1_norm, attn_norm, conv_norm, ff2_norm, out_norm;
  Linear ff1_in, ff1_out, ff2_in, ff2_out;
  Linear q, k, v, out;
  std::vector<Tensor> pos_heads;  // rel_pos: linear_pos rows of each head, [D, d] views
  Tensor bias_u, bias_v;          // rel_pos: pos_bias_u / pos_bias_v flattened to [d]
  Linear pw1;                     // [2d, d]
  Tensor dw_w, dw_b;              // depthwise conv [K, d] (tap-major) and bias [d], batch norm folded in
  Norm dw_norm;                   // conv_norm "layer_norm" (GigaAM v3): LayerNorm over channels after it
  Linear pw2;                     // [d, d]
};

struct SubsamplingConv {
  Linear conv;  // [Cout, Cin / groups, k, k]
  int64_t groups = 1;
  int64_t stride = 1, padding = 0;
  bool relu = false;  // ReLU after this convolution
  bool time_only = false;  // "conv1d" subsampling: the kernel spans all features, strides over time only
};

class Loader {
 public:
  explicit Loader(const WeightSource& src) : src_(src) {}
  Tensor get(const std::string& name, const Shape& expect) const {
    if (!src_.contains(name))
      throw std::runtime_error(src_.path() + ": missing tensor '" + name + "' (conformer weights)");
    Tensor t = src_.get(name);
    if (t.shape() != expect)
      throw std::runtime_error(src_.path() + ": tensor '" + name + "' has shape " + shape_str(t.shape()) +
                               ", expected " + shape_str(expect));
    return t;
  }
  Tensor f32(const std::string& name, const Shape& expect) const { return host::to_f32(get(name, expect)); }
  Linear linear(const std::string& name, int64_t out, int64_t in, bool bias) const {
    Linear l;
    l.w = get(name + ".weight", {out, in});
    if (bias) l.b = f32(name + ".bias", {out});
    return l;
  }
  // A kernel-1 Conv1d [out, in, 1] as a matmul weight [out, in].
  Linear pointwise(const std::string& name, int64_t out, int64_t in, bool bias) const {
    Linear l;
    l.w = get(name + ".weight", {out, in, 1}).contiguous().reshape({out, in});
    if (bias) l.b = f32(name + ".bias", {out});
    return l;
  }
  Norm norm(const std::string& name, int64_t d) const {
    return {f32(name + ".weight", {d}), f32(name + ".bias", {d})};
  }

 private:
  const WeightSource& src_;
};

int64_t log2_exact(int64_t v) {
  int64_t n = 0;
  while (v > 1 && v % 2 == 0) {
    v /= 2;
    ++n;
  }
  return v == 1 ? n : -1;
}

void check_config(const ConformerConfig& c) {
  const std::string who = "conformer config (" + (c.family.empty() ? std::string("?") : c.family) + "): ";
  const auto fail = [&](const std::string& what) { throw std::runtime_error(who + what); };
  if (c.subsampling != "dw_striding" && c.subsampling != "striding" && c.subsampling != "conv1d")
    fail("subsampling \"" + c.subsampling + "\" is not supported (dw_striding, striding, conv1d)");
  if (log2_exact(c.subsampling_factor) < 1) fail("subsampling_factor " + num(c.subsampling_factor) + " is not 2, 4, 8, ...");
  if (c.subsampling_kernel < 1 || c.subsampling_kernel % 2 == 0) fail("subsampling_kernel must be odd");
  if (c.self_attention != "rel_pos" && c.self_attention != "rotary")
    fail("self_attention \"" + c.self_attention + "\" is not supported (rel_pos, rotary)");
  if (c.conv_norm != "batch_norm" && c.conv_norm != "layer_norm")
    fail("conv_norm \"" + c.conv_norm + "\" is not supported (batch_norm, layer_norm)");
  if (c.n_mels <= 0 || c.d_model <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.ff_dim <= 0 ||
      c.subsampling_channels <= 0)
    fail("sizes must be positive");
  if (c.d_model % c.n_heads != 0) fail("d_model " + num(c.d_model) + " is not a multiple of n_heads " + num(c.n_heads));
  if (c.self_attention == "rotary" && c.head_dim() % 2 != 0) fail("rotary attention needs an even head dim");
  if (c.conv_kernel < 1 || c.conv_kernel % 2 == 0) fail("conv_kernel " + num(c.conv_kernel) + " must be odd");
  if (c.head != "ctc" && c.head != "rnnt" && c.head != "tdt") fail("head \"" + c.head + "\" is not ctc, rnnt or tdt");
  if (c.vocab_size <= 0) fail("vocab_size must be positive");
}

// Feature length after one stride-2 convolution, as NeMo's calc_length computes it (in floats).
int64_t conv_out(int64_t len, int64_t kernel) {
  const int64_t pad = (kernel - 1) / 2;
  return static_cast<int64_t>(std::floor(static_cast<double>(len + 2 * pad - kernel) / 2.0 + 1.0));
}

// Transformer-XL sinusoids for relative positions T-1 ... -(T-1): row r holds position T-1-r,
// sin in even and cos in odd columns (NeMo's RelPositionalEncoding).
Tensor relative_positions(int64_t T, int64_t d) {
  Tensor pe = Tensor::empty({2 * T - 1, d});
  float* p = pe.data<float>();
  for (int64_t r = 0; r < 2 * T - 1; ++r) {
    const double pos = static_cast<double>(T - 1 - r);
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = pos * std::exp(-std::log(10000.0) * (2.0 * i) / d);
      p[r * d + 2 * i] = static_cast<float>(std::sin(angle));
      p[r * d + 2 * i + 1] = static_cast<float>(std::cos(angle));
    }
  }
  return pe;
}

// GLU over channels of h [T, 2d] (first half * sigmoid(second half)), then the depthwise conv1d
// over time (zero padding K/2, batch norm folded into w [K, d] (tap-major, so the loop over
// channels is contiguous and vectorizes) and b [d]), then SiLU -> [T, d]. Threaded over time.
// With ln_w / ln_b (conv_norm "layer_norm", GigaAM v3) each frame is layer-normalised over
// channels before the SiLU.
Tensor glu_depthwise_silu(const Tensor& h_in, const Tensor& w, const Tensor& b, const Tensor& ln_w = {},
                          const Tensor& ln_b = {}, float ln_eps = 0.0f) {
  const Tensor h = host::to_f32(h_in);
  const int64_t T = h.dim(0), d = h.dim(1) / 2, K = w.dim(0), pad = K / 2;
  Tensor glu = Tensor::empty({T, d}), y = Tensor::empty({T, d});
  const float* hp = h.data<float>();
  float* gp = glu.data<float>();
  parallel_for(T, 16, [hp, gp, d](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* a = hp + t * 2 * d;
      const float* gate = a + d;
      float* out = gp + t * d;
      for (int64_t c = 0; c < d; ++c) out[c] = a[c] / (1.0f + std::exp(-gate[c]));
    }
  });
  const float* wp = w.data<float>();
  const float* bp = b.data<float>();
  float* yp = y.data<float>();
  parallel_for(T, 8, [=](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = yp + t * d;
      for (int64_t c = 0; c < d; ++c) out[c] = bp[c];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t src = t + k - pad;
        if (src < 0 || src >= T) continue;
        const float* in = gp + src * d;
        const float* wk = wp + k * d;
        for (int64_t c = 0; c < d; ++c) out[c] += wk[c] * in[c];
      }
    }
  });
  if (ln_w.defined()) y = host::layer_norm(y, ln_w, &ln_b, ln_eps);
  return host::silu(y);
}

struct Builder : GraphBuilder {
  ValueId linear(ValueId x, const Linear& l, const std::string& name) { return matmul(x, l.w, l.b, name); }
  ValueId layer_norm(ValueId x, const Norm& n, float eps, const std::string& name) {
    OpAttrs a;
    a.eps = eps;
    return g.add(OpKind::LayerNorm, {x, constant(name + ".w", n.w), constant(name + ".b", n.b)}, a, name);
  }
  ValueId scale(ValueId x, float s, const std::string& name) {
    OpAttrs a;
    a.scale = s;
    return g.add(OpKind::Scale, {x}, a, name);
  }
  ValueId transpose(ValueId x, int64_t d0, int64_t d1, const std::string& name) {
    OpAttrs a;
    a.dim0 = d0;
    a.dim1 = d1;
    return g.add(OpKind::Transpose, {x}, a, name);
  }
};

}  // namespace

struct ConformerModel::Weights {
  std::vector<SubsamplingConv> subsampling;
  int64_t subsampled_mels = 0;  // frequency bins left after the subsampling convolutions
  Linear subsampling_out;       // [d, channels * subsampled_mels]
  std::vector<ConformerLayer> layers;
  Linear ctc;  // [vocab + 1, d] (head == "ctc")
  // GEMM panels of every matmul weight, packed once (on the first encode(), so that loading for
  // `npu plan` does not pay for them) and held for the model's life: a 0.6B model's f32 packs
  // (2.4 GB) exceed the shared pack cache's bound, past which the GEMM re-packed per call.
  mutable std::vector<std::shared_ptr<void>> packs;
  mutable std::once_flag packed;
  void pin_packs() const {
    std::call_once(packed, [this] {
      const auto pin = [this](const Linear& l) {
        if (auto p = host::pin_packed_weights(l.w)) packs.push_back(std::move(p));
      };
      if (subsampling_out.w.defined()) pin(subsampling_out);  // none with conv1d subsampling
      for (const ConformerLayer& l : layers) {
        for (const Linear* x : {&l.ff1_in, &l.ff1_out, &l.q, &l.k, &l.v, &l.out, &l.pw1, &l.pw2, &l.ff2_in, &l.ff2_out})
          pin(*x);
        for (const Tensor& p : l.pos_heads) pin(Linear{p, Tensor()});
      }
      if (ctc.w.defined()) pin(ctc);
    });
  }
};

int64_t ConformerConfig::encoded_frames(int64_t mel_frames) const {
  const int64_t steps = log2_exact(subsampling_factor);
  if (steps < 1) throw std::invalid_argument("encoded_frames: subsampling_factor " + num(subsampling_factor) + " is not a power of two");
  int64_t len = mel_frames;
  for (int64_t i = 0; i < steps; ++i) len = conv_out(len, subsampling_kernel);
  return len < 0 ? 0 : len;
}

ConformerModel::ConformerModel(ConformerConfig config, std::shared_ptr<const WeightSource> weights,
                               std::vector<std::string> vocabulary)
    : config_(std::move(config)), source_(std::move(weights)), vocabulary_(std::move(vocabulary)) {
  if (!source_) throw std::invalid_argument("ConformerModel: no weights");
  const ConformerConfig& c = config_;
  check_config(c);
  if (static_cast<int64_t>(vocabulary_.size()) != c.vocab_size)
    throw std::runtime_error("ConformerModel: vocabulary has " + num(static_cast<int64_t>(vocabulary_.size())) +
                             " tokens, config.vocab_size is " + num(c.vocab_size));
  const Loader L(*source_);
  const int64_t d = c.d_model, C = c.subsampling_channels, k = c.subsampling_kernel, H = c.n_heads,
                D = c.head_dim(), K = c.conv_kernel;
  auto w = std::make_shared<Weights>();

  // Subsampling: NeMo's Sequential indices, ReLUs included (dw_striding: conv, relu, then
  // depthwise, pointwise, relu per further step; striding: conv, relu per step).
  const int64_t steps = log2_exact(c.subsampling_factor);
  const std::string S = "encoder.pre_encode.conv.";
  const auto conv = [&](int64_t index, int64_t cin, int64_t kernel, int64_t groups, int64_t stride, bool relu) {
    SubsamplingConv s;
    s.conv.w = L.get(S + num(index) + ".weight", {C, cin / groups, kernel, kernel});
    s.conv.b = L.f32(S + num(index) + ".bias", {C});
    s.groups = groups;
    s.stride = stride;
    s.padding = (kernel - 1) / 2;
    s.relu = relu;
    w->subsampling.push_back(std::move(s));
  };
  if (c.subsampling == "conv1d") {
    // GigaAM v3: Conv1d(k, stride 2) + ReLU steps over time, features as input channels, as
    // Conv2d on the [1, frames, n_mels] image: kernels [C, n_mels, k] -> [C, 1, k, n_mels], then
    // [C, C, k] -> [C, C, k, 1]. No output linear (subsampling_channels == d_model).
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t cin = i == 0 ? c.n_mels : C;
      SubsamplingConv s;
      const Tensor w1 = L.f32(S + num(2 * i) + ".weight", {C, cin, k});
      s.conv.w = i == 0 ? w1.transpose(1, 2).contiguous().reshape({C, 1, k, cin}) : w1.reshape({C, C, k, 1});
      s.conv.b = L.f32(S + num(2 * i) + ".bias", {C});
      s.stride = 2;
      s.padding = (k - 1) / 2;
      s.relu = s.time_only = true;
      w->subsampling.push_back(std::move(s));
    }
  } else if (c.subsampling == "dw_striding") {
    conv(0, 1, k, 1, 2, true);
    for (int64_t i = 0; i + 1 < steps; ++i) {
      conv(2 + 3 * i, C, k, C, 2, false);  // depthwise
      conv(3 + 3 * i, C, 1, 1, 1, true);   // pointwise
    }
  } else {
    for (int64_t i = 0; i < steps; ++i) conv(2 * i, i == 0 ? 1 : C, k, 1, 2, true);
  }
  w->subsampled_mels = c.n_mels;
  for (int64_t i = 0; i < steps; ++i) w->subsampled_mels = conv_out(w->subsampled_mels, k);
  if (c.subsampling == "conv1d") {
    if (C != d) throw std::runtime_error("conformer config: conv1d subsampling needs subsampling_channels == d_model");
    w->subsampled_mels = 1;
  } else {
    w->subsampling_out = L.linear("encoder.pre_encode.out", d, C * w->subsampled_mels, true);
  }

  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string P = "encoder.layers." + num(i) + ".";
    ConformerLayer l;
    l.ff1_norm = L.norm(P + "norm_feed_forward1", d);
    l.ff1_in = L.linear(P + "feed_forward1.linear1", c.ff_dim, d, c.ff_bias);
    l.ff1_out = L.linear(P + "feed_forward1.linear2", d, c.ff_dim, c.ff_bias);
    l.attn_norm = L.norm(P + "norm_self_att", d);
    l.q = L.linear(P + "self_attn.linear_q", d, d, c.attention_bias);
    l.k = L.linear(P + "self_attn.linear_k", d, d, c.attention_bias);
    l.v = L.linear(P + "self_attn.linear_v", d, d, c.attention_bias);
    l.out = L.linear(P + "self_attn.linear_out", d, d, c.attention_bias);
    if (c.self_attention == "rel_pos") {
      const Tensor pos = L.get(P + "self_attn.linear_pos.weight", {d, d}).contiguous();
      for (int64_t h = 0; h < H; ++h) l.pos_heads.push_back(pos.slice(0, h * D, (h + 1) * D));
      l.bias_u = L.f32(P + "self_attn.pos_bias_u", {H, D}).reshape({d});
      l.bias_v = L.f32(P + "self_attn.pos_bias_v", {H, D}).reshape({d});
    }
    l.conv_norm = L.norm(P + "norm_conv", d);
    l.pw1 = L.pointwise(P + "conv.pointwise_conv1", 2 * d, d, c.conv_bias);
    l.pw2 = L.pointwise(P + "conv.pointwise_conv2", d, d, c.conv_bias);
    const Tensor dw = L.f32(P + "conv.depthwise_conv.weight", {d, 1, K});
    if (c.conv_norm == "layer_norm") {  // GigaAM v3 keeps the norm under the batch norm's name
      l.dw_w = dw.contiguous().reshape({d, K}).transpose(0, 1).contiguous();  // tap-major [K, d]
      l.dw_b = c.conv_bias ? L.f32(P + "conv.depthwise_conv.bias", {d}) : Tensor::from_vector({d}, std::vector<float>(size_t(d), 0.0f));
      l.dw_norm = L.norm(P + "conv.batch_norm", d);
    } else {
      // Batch norm (inference) folded into the depthwise conv: y = (conv(x) - mean) * g / sqrt(var + eps) + beta.
      const Tensor gamma = L.f32(P + "conv.batch_norm.weight", {d});
      const Tensor beta = L.f32(P + "conv.batch_norm.bias", {d});
      const Tensor mean = L.f32(P + "conv.batch_norm.running_mean", {d});
      const Tensor var = L.f32(P + "conv.batch_norm.running_var", {d});
      Tensor dw_b;
      if (c.conv_bias) dw_b = L.f32(P + "conv.depthwise_conv.bias", {d});
      l.dw_w = Tensor::empty({K, d});
      l.dw_b = Tensor::empty({d});
      for (int64_t ch = 0; ch < d; ++ch) {
        const float v = var.data<float>()[ch];
        if (!(v >= 0.0f)) throw std::runtime_error(source_->path() + ": '" + P + "conv.batch_norm.running_var' has a negative or NaN entry");
        const float s = gamma.data<float>()[ch] / std::sqrt(v + c.batch_norm_eps);
        for (int64_t j = 0; j < K; ++j) l.dw_w.data<float>()[j * d + ch] = dw.data<float>()[ch * K + j] * s;
        const float bias = dw_b.defined() ? dw_b.data<float>()[ch] : 0.0f;
        l.dw_b.data<float>()[ch] = (bias - mean.data<float>()[ch]) * s + beta.data<float>()[ch];
      }
    }
    l.ff2_norm = L.norm(P + "norm_feed_forward2", d);
    l.ff2_in = L.linear(P + "feed_forward2.linear1", c.ff_dim, d, c.ff_bias);
    l.ff2_out = L.linear(P + "feed_forward2.linear2", d, c.ff_dim, c.ff_bias);
    l.out_norm = L.norm(P + "norm_out", d);
    w->layers.push_back(std::move(l));
  }
  if (c.head == "ctc") w->ctc = L.pointwise("decoder.decoder_layers.0", c.vocab_size + 1, d, true);
  w_ = std::move(w);
}

namespace {

// Runs one graph of the chain and appends its records to the report.
struct Chain {
  std::vector<Backend*> backends;
  HostBackend host;
  RunReport report;
  Builder b;

  explicit Chain(std::vector<Backend*> bs) : backends(std::move(bs)) {
    if (backends.empty()) backends.push_back(&host);
  }
  std::vector<Tensor> run(const std::vector<ValueId>& outputs) {
    for (ValueId v : outputs) b.g.mark_output(v);
    Executor exec(backends);
    RunReport r = exec.run(b.g);
    report.ops.insert(report.ops.end(), r.ops.begin(), r.ops.end());
    std::vector<Tensor> out;
    for (ValueId v : outputs) out.push_back(b.g.get(v));
    b = Builder();
    return out;
  }
};

}  // namespace

namespace {

// Ends a graph of the encoder chain at layer i's convolution module: given the residual stream x
// and pointwise_conv1's output [T, 2d], it takes the graph out of the builder (leaving it empty)
// and returns what enters the next graph: the residual stream and the host-direct step's output,
// both [T, d].
using EncoderBoundary = std::function<std::pair<Tensor, Tensor>(int64_t layer, ValueId x, ValueId pw1)>;

void check_features(const ConformerConfig& c, const Tensor& features) {
  if (!features.defined() || features.ndim() != 2 || features.dim(0) != c.n_mels || features.dim(1) < 1)
    throw std::invalid_argument("conformer encode: features have shape " +
                                (features.defined() ? shape_str(features.shape()) : "(none)") + ", expected [" +
                                num(c.n_mels) + ", frames >= 1]");
  if (c.encoded_frames(features.dim(1)) < 1)
    throw std::invalid_argument("conformer encode: " + num(features.dim(1)) + " frames give no encoder frame");
}

}  // namespace

// What encode() and lower_encoder() share (a friend of ConformerModel for its weights).
struct ConformerEncoderBuild {
  // The encoder over features [n_mels, frames] as a chain of graphs built in `b`, split by
  // `boundary` at each layer's convolution module; returns the encoder output, in `b`'s last graph.
  // `subsampled` (optional): the subsampling's output [T, d] computed host-direct
  // (subsample_host), replacing its ops in the graph.
  static ValueId build(const ConformerModel& m, const Tensor& features, Builder& b, const EncoderBoundary& boundary,
                       const Tensor* subsampled = nullptr);
  // The subsampling (convolutions, flatten, output linear; no xscale) on the host over blocks of
  // output frames, with small reused buffers and the ReLUs fused into the convolutions, so the
  // full-length first-convolution output (147 MB per 30 s at GigaAM's 768 channels) never exists.
  // `ms` (optional) gets the time of each convolution, the flatten and the output linear.
  static Tensor subsample(const ConformerModel& m, const Tensor& features, std::vector<double>* ms = nullptr);
  // The subsampling's ops appended to `b`'s graph; returns its output [T, d].
  static ValueId add_subsampling(const ConformerModel& m, const Tensor& features, Builder& b);
};

ValueId ConformerEncoderBuild::add_subsampling(const ConformerModel& m, const Tensor& features, Builder& b) {
  const ConformerConfig& c = m.config_;
  const ConformerModel::Weights& w = *m.w_;
  const int64_t frames = features.dim(1), T = c.encoded_frames(frames);
  // Features as a one-channel image [1, frames (height), n_mels (width)].
  ValueId x = b.reshape(b.transpose(b.g.input("features", host::to_f32(features)), 0, 1, "features.t"),
                        {1, frames, c.n_mels}, "features.image");
  for (size_t i = 0; i < w.subsampling.size(); ++i) {
    const SubsamplingConv& s = w.subsampling[i];
    const std::string name = "pre_encode.conv" + num(static_cast<int64_t>(i));
    OpAttrs a;
    a.kernel[0] = s.conv.w.dim(2);
    a.kernel[1] = s.conv.w.dim(3);
    a.stride[0] = s.stride;
    a.stride[1] = s.time_only ? 1 : s.stride;
    a.padding[0] = s.padding;
    a.padding[1] = s.time_only ? 0 : s.padding;
    a.groups = s.groups;
    x = b.g.add(OpKind::Conv2d, {x, b.constant(name + ".w", s.conv.w), b.constant(name + ".b", s.conv.b)}, a, name);
    if (s.relu) x = b.g.add(OpKind::Relu, {x}, {}, name + ".relu");
  }
  // [C, T, F] -> [T, C * F] (channel-major per frame, as NeMo flattens) -> d_model.
  x = b.reshape(b.transpose(x, 0, 1, "pre_encode.t"), {T, c.subsampling_channels * w.subsampled_mels}, "pre_encode.flat");
  if (w.subsampling_out.w.defined()) x = b.linear(x, w.subsampling_out, "pre_encode.out");
  return x;
}

ValueId ConformerEncoderBuild::build(const ConformerModel& m, const Tensor& features, Builder& b,
                                     const EncoderBoundary& boundary, const Tensor* subsampled) {
  const ConformerConfig& c = m.config_;
  const ConformerModel::Weights& w = *m.w_;
  const int64_t frames = features.dim(1), T = c.encoded_frames(frames), d = c.d_model, H = c.n_heads,
                D = c.head_dim();
  const float eps = c.layer_norm_eps;

  // Subsampling: in the graph, or its result from the host (subsample()).
  ValueId x = subsampled ? b.g.input("pre_encode.out", *subsampled) : add_subsampling(m, features, b);
  if (c.xscaling) x = b.scale(x, std::sqrt(static_cast<float>(d)), "xscale");

  const Tensor positions = c.self_attention == "rel_pos" ? relative_positions(T, d) : Tensor();
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(D));

  for (int64_t i = 0; i < c.n_layers; ++i) {
    const ConformerLayer& l = w.layers[i];
    const std::string P = "layers." + num(i) + ".";
    const auto feed_forward = [&](ValueId in, const Norm& n, const Linear& up, const Linear& down, const std::string& name) {
      ValueId h = b.layer_norm(in, n, eps, P + "norm_" + name);
      h = b.g.add(OpKind::Silu, {b.linear(h, up, P + name + ".linear1")}, {}, P + name + ".silu");
      h = b.scale(b.linear(h, down, P + name + ".linear2"), 0.5f, P + name + ".half");
      return b.g.add(OpKind::Add, {in, h}, {}, P + name + ".residual");
    };
    x = feed_forward(x, l.ff1_norm, l.ff1_in, l.ff1_out, "feed_forward1");

    // Self-attention.
    const ValueId h = b.layer_norm(x, l.attn_norm, eps, P + "norm_self_att");
    ValueId att;
    if (c.self_attention == "rotary") {
      // GigaAM rotates the layer input (not q and k) before the q and k projections.
      OpAttrs ra;
      ra.rope_layout = RopeLayout::HalfSplit;
      ra.rope_theta = c.rotary_base;
      ValueId r = b.g.add(OpKind::Rope, {b.reshape(h, {T, H, D}, P + "rope.heads")}, ra, P + "rope");
      r = b.reshape(r, {T, d}, P + "rope.merge");
      const ValueId q = b.reshape(b.linear(r, l.q, P + "linear_q"), {T, H, D}, P + "q.heads");
      const ValueId k = b.reshape(b.linear(r, l.k, P + "linear_k"), {T, H, D}, P + "k.heads");
      const ValueId v = b.reshape(b.linear(h, l.v, P + "linear_v"), {T, H, D}, P + "v.heads");
      att = b.reshape(b.g.add(OpKind::Attention, {q, k, v}, {}, P + "attention"), {T, d}, P + "attention.merge");
    } else {
      // Transformer-XL: logits = ((q + u) k + shift((q + v) p)) / sqrt(D), per head; the
      // positional term enters the attention op as its additive mask.
      const ValueId q = b.linear(h, l.q, P + "linear_q");
      const ValueId k = b.linear(h, l.k, P + "linear_k");
      const ValueId v = b.linear(h, l.v, P + "linear_v");
      const ValueId qu = b.g.add(OpKind::Add, {q, b.constant(P + "pos_bias_u", l.bias_u)}, {}, P + "q_u");
      const ValueId qv = b.g.add(OpKind::Add, {q, b.constant(P + "pos_bias_v", l.bias_v)}, {}, P + "q_v");
      const ValueId pe = b.constant(P + "pos_emb", positions);
      std::vector<ValueId> heads;
      for (int64_t hd = 0; hd < H; ++hd) {
        const std::string Hn = P + "head" + num(hd) + ".";
        const auto head = [&](ValueId t, const std::string& name) {
          return b.reshape(b.slice(t, 1, hd * D, (hd + 1) * D, Hn + name), {T, 1, D}, Hn + name + ".3d");
        };
        const ValueId p = b.matmul(pe, l.pos_heads[hd], Tensor(), Hn + "linear_pos");  // [2T-1, D]
        // MatMul takes p, a graph value, as its weight: (q + v) p^T.
        const std::vector<ValueId> in{b.slice(qv, 1, hd * D, (hd + 1) * D, Hn + "q_v"), p};
        ValueId bd = b.g.add(OpKind::MatMul, in, {}, Hn + "matrix_bd");  // [T, 2T-1]: row i, column r = position T-1-r
        if (T > 1) {
          // rel_shift: out[i][j] = bd[i][T-1-i+j] = flat[(T-1) + i (2T-2) + j].
          bd = b.reshape(bd, {T * (2 * T - 1)}, Hn + "rel_shift.flat");
          bd = b.slice(bd, 0, T - 1, T - 1 + T * (2 * T - 2), Hn + "rel_shift.skip");
          bd = b.reshape(bd, {T, 2 * T - 2}, Hn + "rel_shift.rows");
          bd = b.slice(bd, 1, 0, T, Hn + "rel_shift.keep");
        }
        const ValueId mask = b.scale(bd, inv_sqrt_d, Hn + "matrix_bd.scale");
        heads.push_back(b.g.add(OpKind::Attention, {head(qu, "q_u"), head(k, "k"), head(v, "v"), mask}, {},
                                Hn + "attention"));
      }
      OpAttrs ca;
      ca.axis = 1;
      att = b.reshape(b.g.add(OpKind::Concat, heads, ca, P + "heads.concat"), {T, d}, P + "attention.merge");
    }
    x = b.g.add(OpKind::Add, {x, b.linear(att, l.out, P + "linear_out")}, {}, P + "attn.residual");

    // Convolution module: pointwise conv in this graph, the host-direct step, then a new graph.
    const ValueId pw1 = b.linear(b.layer_norm(x, l.conv_norm, eps, P + "norm_conv"), l.pw1, P + "conv.pointwise_conv1");
    const auto [residual, conv] = boundary(i, x, pw1);
    x = b.g.input(P + "conv.residual_in", residual);
    const ValueId cv = b.linear(b.g.input(P + "conv.depthwise_out", conv), l.pw2, P + "conv.pointwise_conv2");
    x = b.g.add(OpKind::Add, {x, cv}, {}, P + "conv.residual");

    x = feed_forward(x, l.ff2_norm, l.ff2_in, l.ff2_out, "feed_forward2");
    x = b.layer_norm(x, l.out_norm, eps, P + "norm_out");
  }
  return x;
}

Tensor ConformerEncoderBuild::subsample(const ConformerModel& m, const Tensor& features, std::vector<double>* ms) {
  const ConformerConfig& c = m.config_;
  const ConformerModel::Weights& w = *m.w_;
  const std::vector<SubsamplingConv>& convs = w.subsampling;
  const int64_t frames = features.dim(1), T = c.encoded_frames(frames), n = static_cast<int64_t>(convs.size());
  const Tensor f = host::to_f32(features).contiguous();  // [n_mels, frames]
  const float* fp = f.data<float>();
  std::vector<int64_t> height(size_t(n) + 1, frames);  // time rows into each convolution, and out of the last
  for (int64_t i = 0; i < n; ++i) {
    const SubsamplingConv& s = convs[size_t(i)];
    height[size_t(i) + 1] = (height[size_t(i)] + 2 * s.padding - s.conv.w.dim(2)) / s.stride + 1;
  }
  if (height[size_t(n)] != T) throw std::logic_error("conformer subsample: convolutions give " + num(height[size_t(n)]) + " frames, expected " + num(T));
  const int64_t out_dim = w.subsampling_out.w.defined() ? w.subsampling_out.w.dim(0) : c.subsampling_channels * w.subsampled_mels;
  Tensor out = Tensor::empty({T, out_dim});
  // Per convolution: its input rows [lo, hi) (may reach past the signal: those are the zero
  // padding) and the zero-padded input and output buffers, reused across blocks.
  std::vector<int64_t> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
  std::vector<Tensor> in(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  Tensor flat, lin;
  std::vector<double> spent(static_cast<size_t>(n) + 2, 0.0);  // per convolution, flatten, linear
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  constexpr int64_t kBlock = 32;  // output frames per block: a 768-channel first output of ~6.5 MB
  for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
    const int64_t t1 = std::min(T, t0 + kBlock);
    // Walk back from the output block to the rows each convolution reads.
    int64_t a = t0, b = t1;
    for (int64_t i = n - 1; i >= 0; --i) {
      const SubsamplingConv& s = convs[size_t(i)];
      lo[size_t(i)] = a * s.stride - s.padding;
      hi[size_t(i)] = (b - 1) * s.stride - s.padding + s.conv.w.dim(2);
      a = std::max<int64_t>(lo[size_t(i)], 0);
      b = std::min(hi[size_t(i)], height[size_t(i)]);
    }
    for (int64_t i = 0; i < n; ++i) {
      const SubsamplingConv& s = convs[size_t(i)];
      const size_t u = size_t(i);
      const auto c0 = Clock::now();
      const int64_t rows = hi[u] - lo[u], valid_lo = std::max<int64_t>(lo[u], 0), valid_hi = std::min(hi[u], height[u]);
      // Input block [Cin, rows, width] with zero rows outside the signal.
      if (i == 0) {
        const int64_t mels = c.n_mels;
        if (!in[u].defined() || in[u].numel() != rows * mels) in[u] = Tensor::empty({1, rows, mels});
        in[u] = in[u].reshape({1, rows, mels});
        float* p = in[u].data<float>();
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t t = lo[u] + r;
          for (int64_t j = 0; j < mels; ++j) p[r * mels + j] = (t >= 0 && t < frames) ? fp[j * frames + t] : 0.0f;
        }
      } else {
        const Tensor& prev = y[u - 1];  // [Cin, valid_hi - valid_lo, width]
        const int64_t C = prev.dim(0), width = prev.dim(2), have = prev.dim(1);
        if (have != valid_hi - valid_lo) throw std::logic_error("conformer subsample: block rows do not line up");
        if (!in[u].defined() || in[u].numel() != C * rows * width) in[u] = Tensor::empty({C, rows, width});
        in[u] = in[u].reshape({C, rows, width});
        const float* q = prev.data<float>();
        float* p = in[u].data<float>();
        const int64_t before = valid_lo - lo[u];
        for (int64_t ch = 0; ch < C; ++ch) {
          float* dst = p + ch * rows * width;
          std::fill(dst, dst + before * width, 0.0f);
          std::copy(q + ch * have * width, q + (ch + 1) * have * width, dst + before * width);
          std::fill(dst + (before + have) * width, dst + rows * width, 0.0f);
        }
      }
      host::ConvParams p;
      p.stride[0] = s.stride;
      p.stride[1] = s.time_only ? 1 : s.stride;
      p.padding[0] = 0;  // the time padding is in the block's zero rows
      p.padding[1] = s.time_only ? 0 : s.padding;
      p.groups = s.groups;
      host::ConvEpilogue e;
      if (s.relu) e.lo = 0.0f;
      e.constant_weights = true;
      host::conv2d_into(in[u], s.conv.w, s.conv.b.defined() ? &s.conv.b : nullptr, p, y[u], e);
      spent[u] += since(c0);
    }
    const auto f0 = Clock::now();
    // [C, rows, F] -> [rows, C * F] (channel-major per frame, as NeMo flattens) -> out rows.
    const Tensor& last = y[size_t(n) - 1];
    const int64_t C = last.dim(0), rows = last.dim(1), F = last.dim(2);
    if (rows != t1 - t0) throw std::logic_error("conformer subsample: block gives " + num(rows) + " frames");
    if (!flat.defined() || flat.numel() != rows * C * F) flat = Tensor::empty({rows, C * F});
    flat = flat.reshape({rows, C * F});
    const float* q = last.data<float>();
    float* p = flat.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t ch = 0; ch < C; ++ch) std::copy(q + (ch * rows + r) * F, q + (ch * rows + r + 1) * F, p + r * C * F + ch * F);
    const Tensor* block = &flat;
    spent[size_t(n)] += since(f0);
    const auto l0 = Clock::now();
    if (w.subsampling_out.w.defined()) {
      const Tensor& bias = w.subsampling_out.b;
      lin = host::matmul(flat, w.subsampling_out.w, bias.defined() ? &bias : nullptr);
      block = &lin;
    }
    std::copy(block->data<float>(), block->data<float>() + rows * out_dim, out.data<float>() + t0 * out_dim);
    spent[size_t(n) + 1] += since(l0);
  }
  if (ms) *ms = std::move(spent);
  return out;
}

Tensor ConformerModel::encode(const Tensor& features, std::vector<Backend*> backends, RunReport* report) const {
  check_features(config_, features);
  w_->pin_packs();
  Chain chain(std::move(backends));
  // The subsampling runs on the host in time blocks (subsample()); it reports the graph nodes it
  // stands for, as lower_encoder() lowers them: the ReLUs and reshapes are fused (0 ms).
  std::vector<double> ms;
  const Tensor subsampled = ConformerEncoderBuild::subsample(*this, features, &ms);
  {
    Builder nodes;
    ConformerEncoderBuild::add_subsampling(*this, features, nodes);
    size_t conv = 0;
    for (const Node& node : nodes.g.nodes()) {
      double t = 0.0;
      if (node.op == OpKind::Conv2d) t = ms[conv++];
      else if (node.name == "pre_encode.flat") t = ms[ms.size() - 2];
      else if (node.name == "pre_encode.out") t = ms.back();
      chain.report.ops.push_back({node.name, node.op, "host", false, t});
    }
  }
  const ValueId y = ConformerEncoderBuild::build(*this, features, chain.b, [&](int64_t i, ValueId x, ValueId pw1) {
    const ConformerLayer& l = w_->layers[size_t(i)];
    const std::vector<Tensor> out = chain.run({x, pw1});
    const auto t0 = std::chrono::steady_clock::now();
    Tensor conv = glu_depthwise_silu(out[1], l.dw_w, l.dw_b, l.dw_norm.w, l.dw_norm.b, config_.layer_norm_eps);
    const auto t1 = std::chrono::steady_clock::now();
    chain.report.ops.push_back({"layers." + num(i) + ".conv.glu_depthwise_silu", OpKind::Conv1d, "host-direct", false,
                                std::chrono::duration<double, std::milli>(t1 - t0).count()});
    return std::pair<Tensor, Tensor>(out[0], std::move(conv));
  }, &subsampled);
  const Tensor out = host::to_f32(chain.run({y})[0]);
  if (report) *report = std::move(chain.report);
  return out;
}

ConformerEncoderGraphs ConformerModel::lower_encoder(int64_t frames) const {
  const ConformerConfig& c = config_;
  // Inputs are placeholders: the planner reads their shapes, nothing reads their (unset) values.
  if (frames < 1) throw std::invalid_argument("lower_encoder: frames must be at least 1, got " + num(frames));
  const Tensor features = Tensor::empty({c.n_mels, frames});
  check_features(c, features);
  ConformerEncoderGraphs out;
  out.frames = frames;
  out.encoded_frames = c.encoded_frames(frames);
  Builder b;
  const auto finish = [&](std::vector<ValueId> outputs) {
    for (ValueId v : outputs) b.g.mark_output(v);
    out.graphs.push_back(std::move(b.g));
    b = Builder();
  };
  const ValueId y = ConformerEncoderBuild::build(*this, features, b, [&](int64_t i, ValueId x, ValueId pw1) {
    finish({x, pw1});
    out.host_steps.push_back("layers." + num(i) + ".conv.glu_depthwise_silu");
    const Shape td{out.encoded_frames, c.d_model};
    return std::pair<Tensor, Tensor>(Tensor::empty(td), Tensor::empty(td));
  });
  finish({y});
  return out;
}

Tensor ConformerModel::ctc_log_probs(const Tensor& encoded) const {
  const ConformerConfig& c = config_;
  if (c.head != "ctc") throw std::logic_error("ctc_log_probs: model head is \"" + c.head + "\", not ctc");
  if (!encoded.defined() || encoded.ndim() != 2 || encoded.dim(1) != c.d_model)
    throw std::invalid_argument("ctc_log_probs: encoded has shape " +
                                (encoded.defined() ? shape_str(encoded.shape()) : "(none)") + ", expected [T, " +
                                num(c.d_model) + "]");
  Tensor y = host::matmul(host::to_f32(encoded), w_->ctc.w, &w_->ctc.b);  // [T, V + 1]
  const int64_t T = y.dim(0), V = y.dim(1);
  float* p = y.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    float* row = p + t * V;
    float m = row[0];
    for (int64_t j = 1; j < V; ++j) m = std::max(m, row[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(row[j] - m));
    const float lse = m + static_cast<float>(std::log(sum));
    for (int64_t j = 0; j < V; ++j) row[j] -= lse;
  }
  return y;
}

}  // namespace xdna

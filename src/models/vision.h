// Vision transformers as data: ViT (ViTModel / ViTForImageClassification) and DINOv2
// (Dinov2Model / Dinov2ForImageClassification, and Dinov2WithRegisters*) from a Hugging Face
// config.json + safetensors. The transformer layers are the encoder's (models/encoder.h:
// load_encoder_layer, lower_encoder_layers) with pre-norm and, for DINOv2, LayerScale; only the
// embedding step is new:
//
//   patches  [N * gh * gw, C * P * P]  the image cut into P x P patches (on the host)
//   x = patches · Wpatchᵀ + b          the patch projection: a Conv2d with stride = kernel = P is
//                                      exactly this one big MatMul
//   x += positions                     position table resized to gh x gw when the input is not the
//                                      model's size (bicubic, as transformers does)
//   per image: [CLS + pos0, registers..., patch rows]   (registers get no position)
//   encoder layers, final LayerNorm    -> last_hidden_state [N, 1 + R + gh * gw, hidden]
//
// Heads, on the host after the graph (tiny next to the layers; tanh is not in the op set):
//   ViT pooler (only when the checkpoint has pooler.dense): tanh(dense(CLS))
//   ViT classifier: classifier(CLS); DINOv2 classifier: classifier([CLS, mean of patch tokens]).
// See docs/models-vision.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/graph.h"
#include "core/tensor.h"
#include "models/encoder.h"
#include "models/spec.h"
#include "weights/source.h"

namespace xdna {

struct VisionSpec {
  std::string family;   // "vit", "dinov2", "dinov2_with_registers" (config.json model_type)
  EncoderSpec encoder;  // the transformer layers (names without the checkpoint's prefix)
  int64_t image_size = 0;  // square; the position table covers (image_size / patch_size)^2 patches
  int64_t patch_size = 0;
  int64_t channels = 3;
  int64_t registers = 0;            // register tokens after CLS (no position embedding)
  bool always_interpolate = false;  // DINOv2 resizes positions for any input; ViT only when asked
  bool antialias = false;           // dinov2_with_registers resizes with antialias=True

  int64_t grid() const { return image_size / patch_size; }
};

// Throws std::invalid_argument naming `origin` and the missing, unsupported or inconsistent key
// (e.g. an image_size that is not a multiple of patch_size).
VisionSpec vision_spec_from_config(const nlohmann::json& config,
                                   const std::string& origin = "config.json");

struct VisionOutput {
  Tensor hidden;  // [N, T, hidden] f32 last_hidden_state, T = 1 + registers + patches
  Tensor pooled;  // [N, pooler size] ViT pooler output; undefined when the checkpoint has none
  Tensor logits;  // [N, labels]; undefined without a classifier head
  RunReport report;
};

// The forward pass as a graph, not yet run (the planner prices it without computing).
struct VisionGraph {
  Graph graph;
  ValueId output = -1;  // [N * T, hidden]
  int64_t images = 0, tokens = 0;
};

class VisionModel {
 public:
  // Resolves and shape-checks every weight. The base model's names may carry the prefix the
  // classification export adds ("vit.", "dinov2.", "dinov2_with_registers."); the head
  // (classifier.*) never does. Throws std::runtime_error naming the missing or mis-shaped tensor.
  VisionModel(VisionSpec spec, std::shared_ptr<const WeightSource> weights);
  // config.json + weights from a Hugging Face model directory.
  static std::unique_ptr<VisionModel> load(const std::string& dir);

  const VisionSpec& spec() const { return spec_; }
  const std::string& weight_prefix() const { return prefix_; }
  bool has_pooler() const { return pooler_w_.defined(); }
  int64_t num_labels() const { return classifier_w_.defined() ? classifier_w_.dim(0) : 0; }
  // Tokens per image for an input of height x width pixels.
  int64_t tokens(int64_t height, int64_t width) const;

  // pixels: [N, channels, H, W] (any float dtype; converted to f32), preprocessed (resized,
  // normalised). H and W must be multiples of the patch size. ViT needs the model's image size
  // unless interpolate_pos_encoding (as in transformers); DINOv2 interpolates always.
  // `backends` in order of preference; empty = the host backend only.
  VisionOutput forward(const Tensor& pixels, bool interpolate_pos_encoding = false,
                       std::vector<Backend*> backends = {}) const;
  VisionGraph lower(const Tensor& pixels, bool interpolate_pos_encoding = false) const;

  // Position embeddings of the patches of an H x W input, [(H/P) * (W/P), hidden] f32: the
  // checkpoint's table, or that table resized as transformers' interpolate_pos_encoding does.
  Tensor patch_positions(int64_t height, int64_t width, bool interpolate_pos_encoding) const;

 private:
  VisionSpec spec_;
  std::shared_ptr<const WeightSource> source_;
  std::string prefix_;
  Tensor patch_w_, patch_b_;  // [hidden, C * P * P] (the conv kernel flattened), [hidden] f32
  Tensor cls_, positions_;    // [1, hidden], [1 + grid^2, hidden] f32
  Tensor registers_;          // [R, hidden] f32 or undefined
  std::vector<EncoderLayerWeights> layers_;
  Tensor final_norm_, final_norm_b_;
  Tensor pooler_w_, pooler_b_;          // f32, or undefined
  Tensor classifier_w_, classifier_b_;  // f32, or undefined
};

// grid [h, w, C] (channels last) resized to [out_h, out_w, C] as
// torch.nn.functional.interpolate(mode="bicubic", align_corners=False) does on each channel:
// antialias=false is Keys' cubic (a = -0.75) with clamped borders; antialias=true is the
// PIL-style filter (a = -0.5, widened when shrinking, weights renormalised at the borders).
Tensor resize_bicubic(const Tensor& grid, int64_t out_h, int64_t out_w, bool antialias);

}  // namespace xdna

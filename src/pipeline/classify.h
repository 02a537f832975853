// Image classification and image embeddings on a vision model: `npu classify`, `npu embed --image`
// and image inputs of POST /v1/embeddings. An ImageModel is a network (ImageNetwork: ViT,
// DINOv2 and EfficientNet-Lite0; another kind plugs in as one more subclass and one more branch of
// open_image_network) plus what turns files into its input and its output into answers: the
// preprocessor config and the label names.
//
// Embeddings, per family (see docs/vision.md "## Classification and image embeddings"):
//   vit     the pooler output tanh(dense(CLS)) when the checkpoint has pooler.dense, else the CLS
//           token of last_hidden_state: what ViTModel returns as pooler_output / what a ViT
//           feature extractor keeps.
//   dinov2  the CLS token of last_hidden_state (after the final LayerNorm): Dinov2Model's
//           pooler_output and the "x_norm_clstoken" the DINOv2 authors use for retrieval.
//   conv    none: the conv classifiers give logits only (embed_images refuses them).
// There is no CLIP-style projection into a text space here, so these vectors compare images with
// images only. They are L2-normalised by default (cosine = dot product, as the text embeddings).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph.h"
#include "core/tensor.h"
#include "pipeline/image.h"

namespace xdna {

// One forward pass of a network on preprocessed pixels.
struct ImageNetOutput {
  Tensor logits;     // [N, labels] f32; undefined without a classifier head
  Tensor embedding;  // [N, D] f32 before any normalisation; undefined when the kind has none
  RunReport report;
};

// What the classifier needs of an image network. Implementations (classify.cpp): ViT / DINOv2
// (models/vision.h) and the conv classifiers (models/convnet.h: EfficientNet-Lite0).
class ImageNetwork {
 public:
  virtual ~ImageNetwork() = default;
  virtual std::string family() const = 0;   // config.json model_type: "vit", "dinov2", ...
  virtual std::string pooling() const = 0;  // how `embedding` is made: "pooler", "cls" ("" = none)
  virtual int64_t num_labels() const = 0;   // 0: no classifier head
  virtual int64_t image_size() const = 0;   // the square input the model was trained at
  // pixels [N, C, H, W] f32 as preprocess_images makes them; `backends` empty = host only.
  virtual ImageNetOutput run(const Tensor& pixels, const std::vector<Backend*>& backends) const = 0;
  // What the network knows itself (a conv checkpoint has no config.json): its label names and its
  // preprocessor_config.json text. Empty: from the model directory's config.json / defaults.
  virtual std::vector<std::string> own_labels() const { return {}; }
  virtual std::string own_preprocessor_config() const { return ""; }
};

// True for the config.json model_type / store manifest families open_image_network loads.
bool is_vision_family(const std::string& family);

// The network of a model directory: by config.json model_type (vit, dinov2 ...), or a conv
// classifier checkpoint (*.pth, as `npu model pull efficientnet-lite0` stores it). Throws
// std::invalid_argument naming the directory when the type is not a vision model.
std::unique_ptr<ImageNetwork> open_image_network(const std::string& dir);

// preprocessor_config.json of `dir` when it has one; else one built from config.json and a note
// saying so: ViT as ViTImageProcessor's defaults (resize to image_size x image_size, bilinear,
// mean = std = 0.5), DINOv2 resized to image_size (bicubic) with ImageNet mean/std.
ImagePreprocessConfig image_preprocess_for(const std::string& dir, std::string* note = nullptr);

struct ImageClass {
  int64_t id = 0;
  std::string label;
  float probability = 0;  // softmax of the logits over every class
};

struct ImageRunOptions {
  std::vector<Backend*> backends;  // empty = the host backend only
  size_t batch = 8;                // images per forward pass (bounds activations)
};

class ImageModel {
 public:
  // `model`: a Hugging Face model directory, or a name in the model store (resolve_model_path).
  // Throws std::runtime_error / std::invalid_argument saying what is missing or unsupported.
  static ImageModel load(const std::string& model, const std::string& store_dir = "");

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  const ImageNetwork& network() const { return *net_; }
  const ImagePreprocessConfig& preprocess() const { return pre_; }
  // Label of each class: config.json id2label (random-init fixtures have "LABEL_n"), else "LABEL_n".
  const std::vector<std::string>& labels() const { return labels_; }
  // What the load filled in itself (a preprocessor config built from config.json ...).
  const std::vector<std::string>& notes() const { return notes_; }

  // Per image, the top_k classes by probability (ties by id), top_k capped at the label count.
  // Throws std::invalid_argument when the model has no classifier head or top_k < 1.
  std::vector<std::vector<ImageClass>> classify(const std::vector<Image>& images, int top_k,
                                                const ImageRunOptions& opts = {}, RunReport* report = nullptr) const;
  // The logits [N, labels] of the images (what classify ranks).
  Tensor logits(const std::vector<Image>& images, const ImageRunOptions& opts = {}, RunReport* report = nullptr) const;
  // One vector per image (see the header comment); `normalize`: scaled to unit L2 length.
  std::vector<std::vector<float>> embed_images(const std::vector<Image>& images, bool normalize = true,
                                               const ImageRunOptions& opts = {}, RunReport* report = nullptr) const;
  int64_t dimensions() const { return dims_; }  // of embed_images' vectors; 0 when none

 private:
  std::vector<ImageNetOutput> run_all(const std::vector<Image>& images, const ImageRunOptions& opts,
                                      RunReport* report) const;
  std::string name_, path_;
  std::shared_ptr<const ImageNetwork> net_;
  ImagePreprocessConfig pre_;
  std::vector<std::string> labels_;
  std::vector<std::string> notes_;
  int64_t dims_ = 0;
};

// Softmax of one row of logits, then the top_k (id, label, probability), largest first.
std::vector<ImageClass> top_classes(const float* logits, int64_t n, const std::vector<std::string>& labels, int top_k);

}  // namespace xdna

#include "pipeline/classify.h"
#include "pipeline/conv_npu_sim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "models/convnet.h"
#include "models/vision.h"
#include "pipeline/llm.h"  // resolve_model_path

namespace fs = std::filesystem;

namespace xdna {

namespace {

nlohmann::json read_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) throw std::runtime_error(dir + ": not a vision model directory (no config.json)");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw std::runtime_error(path + ": not a JSON object");
  return j;
}

std::string model_type(const nlohmann::json& config) {
  return config.contains("model_type") && config["model_type"].is_string() ? config["model_type"].get<std::string>()
                                                                             : "";
}

// ViT and DINOv2 (models/vision.h).
class TransformerNetwork final : public ImageNetwork {
 public:
  explicit TransformerNetwork(std::unique_ptr<VisionModel> m) : m_(std::move(m)) {}
  std::string family() const override { return m_->spec().family; }
  std::string pooling() const override { return m_->spec().family == "vit" && m_->has_pooler() ? "pooler" : "cls"; }
  int64_t num_labels() const override { return m_->num_labels(); }
  int64_t image_size() const override { return m_->spec().image_size; }

  ImageNetOutput run(const Tensor& pixels, const std::vector<Backend*>& backends) const override {
    // Another size than the model's needs resized position embeddings (DINOv2 always does it).
    const bool other_size = pixels.dim(2) != image_size() || pixels.dim(3) != image_size();
    VisionOutput o = m_->forward(pixels, other_size, backends);
    ImageNetOutput out;
    out.logits = o.logits;
    out.report = std::move(o.report);
    if (pooling() == "pooler") {
      out.embedding = o.pooled;
    } else {  // CLS: token 0 of each image's last_hidden_state
      const int64_t n = o.hidden.dim(0), t = o.hidden.dim(1), d = o.hidden.dim(2);
      out.embedding = Tensor::empty({n, d});
      const Tensor h = o.hidden.contiguous();
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(out.embedding.data<float>() + i * d, h.data<float>() + i * t * d, sizeof(float) * d);
    }
    return out;
  }

 private:
  std::unique_ptr<VisionModel> m_;
};

// EfficientNet-Lite0 (models/convnet.h): logits only, on the host (its ops are not graph ops yet).
class ConvNetwork final : public ImageNetwork {
 public:
  explicit ConvNetwork(std::unique_ptr<ConvNet> m) : m_(std::move(m)) {}
  std::string family() const override { return m_->spec().family; }
  std::string pooling() const override { return ""; }
  int64_t num_labels() const override { return m_->num_labels(); }
  int64_t image_size() const override { return m_->spec().image_size; }
  // With npu-sim first in `backends`: every conv a conv design takes on npu-sim (bf16,
  // pipeline/conv_npu_sim.h), the rest on the host; otherwise host-direct in f32.
  ImageNetOutput run(const Tensor& pixels, const std::vector<Backend*>& backends) const override {
    ImageNetOutput out;
    if (!backends.empty() && backends[0]->name() == npu::kModelledLabel) {
      ConvSimRun sim;
      out.logits = convnet_forward_npu_sim(*m_, pixels, &sim);
      out.report = std::move(sim.report);
      return out;
    }
    out.logits = m_->forward(pixels);
    return out;
  }
  std::vector<std::string> own_labels() const override {
    std::vector<std::string> labels;
    for (int64_t i = 0; i < m_->num_labels(); ++i) labels.push_back(m_->label(i));
    return labels;
  }
  std::string own_preprocessor_config() const override {
    return m_->preprocessor_config().is_object() ? m_->preprocessor_config().dump() : "";
  }

 private:
  std::unique_ptr<ConvNet> m_;
};

// A conv checkpoint directory: a *.pth / *.pt state dict and no config.json.
bool is_conv_checkpoint_dir(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "config.json")) return false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".pth" || e.path().extension() == ".pt") return true;
  return false;
}

std::vector<std::string> read_labels(const nlohmann::json& config, int64_t n) {
  std::vector<std::string> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = "LABEL_" + std::to_string(i);
  if (config.contains("id2label") && config["id2label"].is_object())
    for (const auto& [key, value] : config["id2label"].items()) {
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (end == key.c_str() || *end || id < 0 || id >= n || !value.is_string()) continue;  // not one of ours
      labels[id] = value.get<std::string>();
    }
  return labels;
}

// [N, C, H, W] from pixel tensors [1, C, H, W] of one size.
Tensor stack(const std::vector<Tensor>& parts) {
  Shape shape = parts[0].shape();
  shape[0] = static_cast<int64_t>(parts.size());
  Tensor out = Tensor::empty(shape);
  const int64_t each = parts[0].numel();
  for (size_t i = 0; i < parts.size(); ++i)
    std::memcpy(out.data<float>() + i * each, parts[i].contiguous().data<float>(), sizeof(float) * each);
  return out;
}

}  // namespace

bool is_vision_family(const std::string& family) {
  return family == "vit" || family == "dinov2" || family == "dinov2_with_registers" ||
         family == "efficientnet-lite0";
}

std::unique_ptr<ImageNetwork> open_image_network(const std::string& dir) {
  if (is_conv_checkpoint_dir(dir)) return std::make_unique<ConvNetwork>(ConvNet::load(dir));
  const std::string type = model_type(read_config(dir));
  if (type == "vit" || type == "dinov2" || type == "dinov2_with_registers")
    return std::make_unique<TransformerNetwork>(VisionModel::load(dir));
  throw std::invalid_argument(dir + ": model_type '" + type +
                              "' is not a vision model this engine runs (vit, dinov2, dinov2_with_registers)");
}

ImagePreprocessConfig image_preprocess_for(const std::string& dir, std::string* note) {
  const fs::path pre = fs::path(dir) / "preprocessor_config.json";
  if (fs::exists(pre)) return load_preprocessor_config(pre.string());
  const nlohmann::json config = read_config(dir);
  const std::string type = model_type(config);
  const int64_t size = config.value("image_size", int64_t{224});
  if (size < 1) throw std::invalid_argument(dir + "/config.json: image_size must be positive");
  nlohmann::json p = {{"do_resize", true}, {"size", {{"height", size}, {"width", size}}}};
  std::string why;
  if (type == "vit") {
    p["image_processor_type"] = "ViTImageProcessor";  // its defaults: bilinear, mean = std = 0.5
    why = "ViTImageProcessor defaults (bilinear, mean = std = 0.5)";
  } else if (is_vision_family(type)) {
    // DINOv2's own processor (Bit) resizes the short side to 256 and crops 224; without a config we
    // cannot know the crop, so the whole image goes to the model's size with ImageNet statistics.
    p["image_processor_type"] = "BitImageProcessor";
    p["resample"] = static_cast<int>(Resample::Bicubic);
    p["do_center_crop"] = false;
    p["image_mean"] = {0.485, 0.456, 0.406};
    p["image_std"] = {0.229, 0.224, 0.225};
    why = "bicubic, ImageNet mean/std";
  } else {
    throw std::invalid_argument(dir + ": no preprocessor_config.json, and model_type '" + type +
                                "' has no default to build one from");
  }
  if (note)
    *note = "no preprocessor_config.json in " + dir + ": built from config.json (resize to " + std::to_string(size) +
            "x" + std::to_string(size) + ", " + why + ")";
  return parse_preprocessor_config(p.dump());
}

ImageModel ImageModel::load(const std::string& model, const std::string& store_dir) {
  ImageModel m;
  m.name_ = model;
  m.path_ = resolve_model_path(model, store_dir);
  if (!fs::is_directory(m.path_))
    throw std::invalid_argument(m.path_ + ": a vision model is a Hugging Face model directory (config.json, "
                                "safetensors), not a single file");
  std::unique_ptr<ImageNetwork> net = open_image_network(m.path_);
  const nlohmann::json config = is_conv_checkpoint_dir(m.path_) ? nlohmann::json::object() : read_config(m.path_);
  std::string note;
  if (const std::string own = net->own_preprocessor_config(); !own.empty()) m.pre_ = parse_preprocessor_config(own);
  else m.pre_ = image_preprocess_for(m.path_, &note);
  if (!note.empty()) m.notes_.push_back(note);
  m.labels_ = net->own_labels();
  if (m.labels_.empty()) m.labels_ = read_labels(config, net->num_labels());
  if (net->pooling() == "pooler") m.dims_ = config.value("pooler_output_size", config.value("hidden_size", int64_t{0}));
  else if (!net->pooling().empty()) m.dims_ = config.value("hidden_size", int64_t{0});
  m.net_ = std::move(net);
  return m;
}

std::vector<ImageNetOutput> ImageModel::run_all(const std::vector<Image>& images, const ImageRunOptions& opts,
                                                RunReport* report) const {
  if (images.empty()) throw std::invalid_argument("no images to run");
  std::vector<Tensor> pixels;
  for (const Image& img : images) pixels.push_back(preprocess_image(img, pre_));
  // Consecutive images of one size (a fixed-size resize makes them all one) share a forward pass.
  std::vector<ImageNetOutput> outs;
  const size_t batch = std::max<size_t>(1, opts.batch);
  for (size_t b0 = 0; b0 < pixels.size();) {
    size_t b1 = b0 + 1;
    while (b1 < pixels.size() && b1 - b0 < batch && pixels[b1].shape() == pixels[b0].shape()) ++b1;
    ImageNetOutput o = net_->run(stack({pixels.begin() + b0, pixels.begin() + b1}), opts.backends);
    if (report) report->ops.insert(report->ops.end(), o.report.ops.begin(), o.report.ops.end());
    outs.push_back(std::move(o));
    b0 = b1;
  }
  return outs;
}

Tensor ImageModel::logits(const std::vector<Image>& images, const ImageRunOptions& opts, RunReport* report) const {
  const int64_t n = net_->num_labels();
  if (n == 0)
    throw std::invalid_argument("model '" + name_ + "' has no classifier head (a " + net_->family() +
                                " base model): it can embed images, not classify them");
  Tensor out = Tensor::empty({static_cast<int64_t>(images.size()), n});
  int64_t row = 0;
  for (const ImageNetOutput& o : run_all(images, opts, report)) {
    const Tensor l = o.logits.contiguous();
    std::memcpy(out.data<float>() + row * n, l.data<float>(), sizeof(float) * l.numel());
    row += l.dim(0);
  }
  return out;
}

std::vector<std::vector<ImageClass>> ImageModel::classify(const std::vector<Image>& images, int top_k,
                                                          const ImageRunOptions& opts, RunReport* report) const {
  if (top_k < 1) throw std::invalid_argument("top_k must be at least 1, not " + std::to_string(top_k));
  const Tensor l = logits(images, opts, report);
  std::vector<std::vector<ImageClass>> out;
  for (int64_t i = 0; i < l.dim(0); ++i)
    out.push_back(top_classes(l.data<float>() + i * l.dim(1), l.dim(1), labels_, top_k));
  return out;
}

std::vector<std::vector<float>> ImageModel::embed_images(const std::vector<Image>& images, bool normalize,
                                                         const ImageRunOptions& opts, RunReport* report) const {
  if (net_->pooling().empty())
    throw std::invalid_argument("model '" + name_ + "' (" + net_->family() + ") gives no image embeddings");
  std::vector<std::vector<float>> out;
  for (const ImageNetOutput& o : run_all(images, opts, report)) {
    const Tensor e = o.embedding.contiguous();
    const int64_t d = e.dim(1);
    for (int64_t i = 0; i < e.dim(0); ++i) {
      std::vector<float> v(e.data<float>() + i * d, e.data<float>() + (i + 1) * d);
      if (normalize) {
        double ss = 0;
        for (float x : v) ss += double(x) * x;
        if (ss > 0) {
          const float inv = static_cast<float>(1.0 / std::sqrt(ss));
          for (float& x : v) x *= inv;
        }
      }
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::vector<ImageClass> top_classes(const float* logits, int64_t n, const std::vector<std::string>& labels,
                                    int top_k) {
  // Softmax in double, shifted by the maximum so exp never overflows.
  const float mx = *std::max_element(logits, logits + n);
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t c = 0; c < n; ++c) sum += p[c] = std::exp(double(logits[c]) - mx);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) ids[c] = c;
  const int64_t k = std::min<int64_t>(top_k, n);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int64_t a, int64_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  std::vector<ImageClass> out;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t c = ids[i];
    out.push_back({c, c < static_cast<int64_t>(labels.size()) ? labels[c] : "LABEL_" + std::to_string(c),
                   static_cast<float>(p[c] / sum)});
  }
  return out;
}

}  // namespace xdna

// TensorFlow.js "layers-model" format: model.json holds the Keras topology (layer configs and the
// inbound_nodes graph) and a weightsManifest naming binary shard files that are concatenated and
// sliced in manifest order. Weights may be stored quantized (uint8 / uint16 with scale and min,
// or float16); they are dequantized to f32 here, as tfjs does when it loads them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace xdna {

// One Keras layer. `inputs` are the producing layers' names from the first inbound node (the
// models read here are plain functional graphs: each layer is called once, tensor index 0).
struct TfjsLayer {
  std::string class_name;  // Conv2D, Add, Concatenate, Activation, UpSampling2D, ...
  std::string name;
  nlohmann::json config;
  std::vector<std::string> inputs;
};

struct TfjsModel {
  std::string origin;  // path of model.json, for error messages
  std::string format;  // "layers-model"
  std::vector<TfjsLayer> layers;  // in file order (Keras writes them topologically sorted)
  std::vector<std::string> input_layers, output_layers;
  std::map<std::string, Tensor> weights;  // "conv/kernel" -> f32 tensor in the manifest's shape

  const TfjsLayer* find_layer(const std::string& name) const;
  // Throws std::invalid_argument naming the model and the weight when it is missing.
  const Tensor& weight(const std::string& name) const;
};

// Reads model.json and its shards from the same directory. Every problem (bad JSON, a missing
// field, a shard shorter than the manifest says, an unknown dtype) throws std::invalid_argument
// "<file>: <field>: <problem>".
TfjsModel load_tfjs_model(const std::string& model_json_path);
// The same from text; shard paths are resolved against `dir`.
TfjsModel parse_tfjs_model(const std::string& json_text, const std::string& dir,
                           const std::string& origin);

}  // namespace xdna

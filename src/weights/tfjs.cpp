// TF.js layers-model reader. The manifest lays weights out back to back in the concatenation of a
// group's shard files; each weight takes numel * (stored dtype size) bytes.
#include "weights/tfjs.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/numeric.h"

namespace xdna {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& origin, const std::string& field, const std::string& what) {
  throw std::invalid_argument(origin + ": " + field + ": " + what);
}

const json& member(const json& j, const char* key, const std::string& origin, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) fail(origin, where + "." + key, "missing");
  return j.at(key);
}

std::string read_whole(const std::string& path, const std::string& origin, const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(origin, field, "cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The layer's input names from its first inbound node: [[["name", node, tensor, {kwargs}], ...]].
std::vector<std::string> inbound_names(const json& layer, const std::string& origin, const std::string& where) {
  std::vector<std::string> names;
  if (!layer.contains("inbound_nodes")) return names;
  const json& nodes = layer["inbound_nodes"];
  if (!nodes.is_array()) fail(origin, where + ".inbound_nodes", "not an array");
  if (nodes.empty()) return names;
  if (nodes.size() > 1) fail(origin, where + ".inbound_nodes", "shared layers (called more than once) are not supported");
  if (!nodes[0].is_array()) fail(origin, where + ".inbound_nodes[0]", "not a list of [layer, node, tensor, kwargs] (Keras 3 format is not supported)");
  for (const json& e : nodes[0]) {
    if (!e.is_array() || e.size() < 3 || !e[0].is_string() || !e[2].is_number_integer())
      fail(origin, where + ".inbound_nodes[0]", "entry is not [layer, node, tensor, ...]");
    if (e[2].get<int64_t>() != 0) fail(origin, where + ".inbound_nodes[0]", "multi-output layers are not supported");
    names.push_back(e[0].get<std::string>());
  }
  return names;
}

void read_topology(const json& topo, TfjsModel& m) {
  const std::string& o = m.origin;
  const json& mc = topo.contains("model_config") ? topo["model_config"] : topo;
  const std::string cls = member(mc, "class_name", o, "modelTopology.model_config").is_string()
                              ? mc["class_name"].get<std::string>() : "";
  const json& cfg = member(mc, "config", o, "modelTopology.model_config");
  const bool sequential = cls == "Sequential";
  if (!sequential && cls != "Model" && cls != "Functional")
    fail(o, "modelTopology.model_config.class_name", "unsupported model class '" + cls + "'");
  const json& layers = sequential && cfg.is_array() ? cfg : member(cfg, "layers", o, "model_config.config");
  if (!layers.is_array()) fail(o, "model_config.config.layers", "not an array");
  std::string previous;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string where = "model_config.config.layers[" + std::to_string(i) + "]";
    const json& l = layers[i];
    TfjsLayer layer;
    const json& c = member(l, "class_name", o, where);
    if (!c.is_string()) fail(o, where + ".class_name", "not a string");
    layer.class_name = c.get<std::string>();
    layer.config = member(l, "config", o, where);
    if (l.contains("name") && l["name"].is_string()) layer.name = l["name"].get<std::string>();
    else if (layer.config.contains("name") && layer.config["name"].is_string()) layer.name = layer.config["name"].get<std::string>();
    else fail(o, where + ".name", "missing");
    if (sequential) {
      // A Sequential model chains its layers; the first one reads the model input "input".
      if (previous.empty() && layer.class_name != "InputLayer") {
        m.layers.push_back({"InputLayer", "input", json::object(), {}});
        previous = "input";
      }
      if (!previous.empty()) layer.inputs = {previous};
      previous = layer.name;
    } else {
      layer.inputs = inbound_names(l, o, where);
    }
    m.layers.push_back(std::move(layer));
  }
  if (sequential) {
    if (m.layers.empty()) fail(o, "model_config.config.layers", "empty");
    m.input_layers = {m.layers.front().name};
    m.output_layers = {m.layers.back().name};
    return;
  }
  for (const char* key : {"input_layers", "output_layers"}) {
    const json& list = member(cfg, key, o, "model_config.config");
    if (!list.is_array() || list.empty()) fail(o, std::string("model_config.config.") + key, "not a non-empty array");
    for (const json& e : list) {
      if (!e.is_array() || e.empty() || !e[0].is_string())
        fail(o, std::string("model_config.config.") + key, "entry is not [layer, node, tensor]");
      (std::string(key) == "input_layers" ? m.input_layers : m.output_layers).push_back(e[0].get<std::string>());
    }
  }
  for (const TfjsLayer& l : m.layers)
    for (const std::string& in : l.inputs)
      if (!m.find_layer(in)) fail(o, "layer " + l.name + ".inbound_nodes", "unknown layer '" + in + "'");
}

size_t stored_size(const std::string& dtype, const std::string& origin, const std::string& field) {
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float16" || dtype == "uint16") return 2;
  if (dtype == "uint8" || dtype == "bool") return 1;
  fail(origin, field, "unsupported dtype '" + dtype + "'");
}

// Decodes `n` stored values at `p` into f32: q * scale + min for uint8/uint16 quantization.
void dequantize(const uint8_t* p, int64_t n, const std::string& stored, double scale, double min, bool affine,
                float* out) {
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    if (stored == "float32") { float f; std::memcpy(&f, p + 4 * i, 4); out[i] = f; continue; }
    if (stored == "int32") { int32_t q; std::memcpy(&q, p + 4 * i, 4); v = q; }
    else if (stored == "float16") { uint16_t h; std::memcpy(&h, p + 2 * i, 2); out[i] = f16_to_f32(h); continue; }
    else if (stored == "uint16") { uint16_t q; std::memcpy(&q, p + 2 * i, 2); v = q; }
    else v = p[i];  // uint8, bool
    out[i] = static_cast<float>(affine ? v * scale + min : v);
  }
}

void read_weights(const json& manifest, const std::string& dir, TfjsModel& m) {
  const std::string& o = m.origin;
  if (!manifest.is_array()) fail(o, "weightsManifest", "not an array");
  for (size_t g = 0; g < manifest.size(); ++g) {
    const std::string gw = "weightsManifest[" + std::to_string(g) + "]";
    const json& paths = member(manifest[g], "paths", o, gw);
    const json& weights = member(manifest[g], "weights", o, gw);
    if (!paths.is_array() || !weights.is_array()) fail(o, gw, "paths/weights are not arrays");
    std::string blob;  // the group's shards, concatenated
    for (const json& p : paths) {
      if (!p.is_string()) fail(o, gw + ".paths", "not a string");
      const std::string rel = p.get<std::string>();
      if (rel.empty() || rel[0] == '/' || rel.find("..") != std::string::npos)
        fail(o, gw + ".paths", "'" + rel + "' is not a file next to model.json");
      blob += read_whole((fs::path(dir) / rel).string(), o, gw + ".paths");
    }
    size_t offset = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const std::string ww = gw + ".weights[" + std::to_string(i) + "]";
      const json& w = weights[i];
      const json& jn = member(w, "name", o, ww);
      const json& js = member(w, "shape", o, ww);
      const json& jd = member(w, "dtype", o, ww);
      if (!jn.is_string() || !jd.is_string() || !js.is_array()) fail(o, ww, "name/dtype/shape have the wrong type");
      const std::string name = jn.get<std::string>(), dtype = jd.get<std::string>();
      Shape shape;
      for (const json& d : js) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 31))
          fail(o, ww + ".shape", "bad dimension in weight '" + name + "'");
        shape.push_back(d.get<int64_t>());
      }
      const int64_t n = shape_numel(shape);
      if (n > (int64_t{1} << 32)) fail(o, ww + ".shape", "weight '" + name + "' is too large");
      std::string stored = dtype;
      double scale = 1, min = 0;
      bool affine = false;
      if (w.contains("quantization") && !w["quantization"].is_null()) {
        const json& q = w["quantization"];
        const json& qd = member(q, "dtype", o, ww + ".quantization");
        if (!qd.is_string()) fail(o, ww + ".quantization.dtype", "not a string");
        stored = qd.get<std::string>();
        if (stored == "uint8" || stored == "uint16") {
          const json& s = member(q, "scale", o, ww + ".quantization");
          const json& mn = member(q, "min", o, ww + ".quantization");
          if (!s.is_number() || !mn.is_number()) fail(o, ww + ".quantization", "scale/min are not numbers");
          scale = s.get<double>();
          min = mn.get<double>();
          affine = true;
        } else if (stored != "float16") {
          fail(o, ww + ".quantization.dtype", "unsupported quantization '" + stored + "'");
        }
      }
      if (dtype != "float32" && dtype != "int32" && dtype != "bool")
        fail(o, ww + ".dtype", "unsupported dtype '" + dtype + "' for weight '" + name + "'");
      const size_t bytes = static_cast<size_t>(n) * stored_size(stored, o, ww + ".dtype");
      if (offset + bytes > blob.size())
        fail(o, ww, "weight '" + name + "' needs bytes " + std::to_string(offset) + ".." +
                        std::to_string(offset + bytes) + " but the shards hold " + std::to_string(blob.size()));
      Tensor t = Tensor::empty(shape);
      dequantize(reinterpret_cast<const uint8_t*>(blob.data()) + offset, n, stored, scale, min, affine, t.data<float>());
      offset += bytes;
      if (!m.weights.emplace(name, std::move(t)).second) fail(o, ww + ".name", "duplicate weight '" + name + "'");
    }
    if (offset != blob.size())
      fail(o, gw + ".paths", "the shards hold " + std::to_string(blob.size()) + " bytes but the weights use " +
                                 std::to_string(offset));
  }
}

}  // namespace

const TfjsLayer* TfjsModel::find_layer(const std::string& name) const {
  for (const TfjsLayer& l : layers)
    if (l.name == name) return &l;
  return nullptr;
}

const Tensor& TfjsModel::weight(const std::string& name) const {
  auto it = weights.find(name);
  if (it == weights.end()) throw std::invalid_argument(origin + ": weightsManifest: no weight named '" + name + "'");
  return it->second;
}

TfjsModel parse_tfjs_model(const std::string& json_text, const std::string& dir, const std::string& origin) {
  TfjsModel m;
  m.origin = origin;
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail(origin, "(document)", "not a JSON object");
  if (j.contains("format")) {
    if (!j["format"].is_string()) fail(origin, "format", "not a string");
    m.format = j["format"].get<std::string>();
    if (m.format != "layers-model")
      fail(origin, "format", "'" + m.format + "' is not a layers model (graph models are not supported)");
  }
  read_topology(member(j, "modelTopology", origin, "(document)"), m);
  read_weights(member(j, "weightsManifest", origin, "(document)"), dir, m);
  return m;
}

TfjsModel load_tfjs_model(const std::string& model_json_path) {
  const std::string text = read_whole(model_json_path, model_json_path, "(file)");
  return parse_tfjs_model(text, fs::path(model_json_path).parent_path().string(), model_json_path);
}

}  // namespace xdna

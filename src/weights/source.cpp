#include "weights/source.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "weights/baked.h"
#include "weights/gguf.h"
#include "weights/safetensors.h"

namespace xdna {

namespace fs = std::filesystem;

std::vector<std::string> WeightSource::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors()) out.push_back(t.name);
  return out;
}

const TensorInfo* WeightSource::find(const std::string& name) const {
  for (const auto& t : tensors())
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& WeightSource::info(const std::string& name) const {
  if (const TensorInfo* t = find(name)) return *t;
  throw std::runtime_error(path() + ": no tensor named '" + name + "'");
}

WeightFormat detect_weight_format(const std::string& path) {
  if (fs::is_directory(path)) return WeightFormat::HfDirectory;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  char head[9] = {};
  in.read(head, sizeof head);
  const auto got = in.gcount();
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return WeightFormat::Gguf;
  if (got >= 8 && std::memcmp(head, kBakedMagic, 8) == 0) return WeightFormat::Baked;
  // safetensors: u64 header length, then a JSON object.
  if (got == 9 && head[8] == '{') return WeightFormat::Safetensors;
  if (path.ends_with(".safetensors")) return WeightFormat::Safetensors;  // let it report why
  if (path.ends_with(".gguf")) return WeightFormat::Gguf;
  throw std::runtime_error(path + ": not a safetensors, GGUF or baked file");
}

std::unique_ptr<WeightSource> open_weights(const std::string& path) {
  if (path.ends_with(".index.json")) return open_safetensors_index(path);
  switch (detect_weight_format(path)) {
    case WeightFormat::HfDirectory: return open_safetensors_dir(path);
    case WeightFormat::Safetensors:
      return std::make_unique<SafetensorsFile>(std::vector<std::string>{path});
    case WeightFormat::Gguf: return std::make_unique<GgufFile>(path);
    case WeightFormat::Baked: return std::make_unique<BakedModel>(path);
  }
  throw std::logic_error("open_weights: unhandled format");
}

}  // namespace xdna

// WeightSource: the one interface the model and pipeline layers use to read weights, whatever
// the file format (safetensors file or Hugging Face directory, GGUF, the engine's baked file).
// Tensors are zero-copy views into memory-mapped files.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace xdna {

// What the file says about one tensor, whether or not the engine can compute with its dtype.
struct TensorInfo {
  std::string name;
  std::string file_dtype;      // as the file spells it: "BF16", "q4_k", "int8" ...
  std::optional<DType> dtype;  // the engine dtype, or none if the engine has no such type
  Shape shape;                 // outermost first: a matrix is [rows, cols]
  std::string file;            // the file holding the bytes
  uint64_t offset = 0;         // absolute byte offset in that file
  uint64_t bytes = 0;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string format() const = 0;  // "safetensors", "gguf" or "baked"
  virtual std::string path() const = 0;
  // Every tensor, in file order.
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  // A view of one tensor. Throws std::runtime_error naming the tensor if it does not exist or
  // has a dtype the engine cannot represent.
  virtual Tensor get(const std::string& name) const = 0;
  // Format-specific key/values: safetensors __metadata__, GGUF key/values, the baked manifest.
  virtual nlohmann::json metadata() const = 0;

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  const TensorInfo& info(const std::string& name) const;  // throws if absent
};

enum class WeightFormat { Safetensors, Gguf, Baked, HfDirectory };

// Detects the format from the file's first bytes (or a directory's contents).
WeightFormat detect_weight_format(const std::string& path);
// Opens a .safetensors file, a Hugging Face checkpoint directory (sharded or not), a .gguf file
// or a baked file.
std::unique_ptr<WeightSource> open_weights(const std::string& path);

}  // namespace xdna

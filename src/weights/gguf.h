// GGUF reader (versions 2 and 3, little-endian): the header, every metadata value type
// (arrays and nested arrays included), tensor infos and the aligned data region. Every count
// and length is checked against the file size before it is used, so a corrupt file throws
// instead of allocating or reading past the end. Tensors are zero-copy views of the mapping.
//
// GGUF lists dimensions innermost first (ne[0] is the row length); TensorInfo::shape and the
// views are outermost first, like the checkpoint's logical [rows, cols].
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "weights/source.h"

namespace xdna {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);

// A metadata value: its GGUF type (and the element type of an array) and the value as JSON.
// A flat array (elements not arrays) stays in the file: `value` is null, and `count` elements
// start at the array's header, byte `array_at` of the file (GgufFile::json_of and the array
// getters read them). Tokenizer tables are flat arrays of 100k-260k entries: held as JSON they
// cost ~20 MB of heap for as long as the model is loaded.
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem_type = GgufType::U8;  // arrays only
  nlohmann::json value;               // null for a flat array
  uint64_t count = 0;                 // arrays only
  uint64_t array_at = 0;              // flat arrays only
  bool in_file() const { return type == GgufType::Array && elem_type != GgufType::Array; }
};

// ggml tensor types: name, block size, bytes per block and the engine dtype (if any).
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
  std::optional<DType> engine;
};
const GgmlTypeInfo* ggml_type_info(uint32_t id);  // nullptr for an unknown id

class GgufFile final : public WeightSource {
 public:
  explicit GgufFile(const std::string& path);
  GgufFile(std::shared_ptr<Buffer> bytes, const std::string& name);  // `name` for messages

  std::string format() const override { return "gguf"; }
  std::string path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Tensor get(const std::string& name) const override;
  nlohmann::json metadata() const override;  // {key: value}, arrays as JSON arrays

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<std::pair<std::string, GgufValue>>& kv() const { return kv_; }
  uint32_t ggml_type(const std::string& tensor) const;

  // Typed metadata access. Each throws naming the key if it is absent or of another type;
  // the integer getters accept any integer type whose value fits.
  bool has(const std::string& key) const { return find_kv(key) != nullptr; }
  const GgufValue& value(const std::string& key) const;
  nlohmann::json json_of(const GgufValue& v) const;  // any value, flat arrays read from the file
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  double get_float(const std::string& key) const;  // f32, f64 (and integers)
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  uint64_t get_array_size(const std::string& key) const;
  // The index of the first element equal to `s` in a string array, without copying the array.
  std::optional<uint64_t> find_in_string_array(const std::string& key, std::string_view s) const;
  // With a fallback for an absent key (a present key of the wrong type still throws).
  std::string get_string(const std::string& key, const std::string& fallback) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;

 private:
  void parse();
  const GgufValue* find_kv(const std::string& key) const;

  std::string path_;
  std::shared_ptr<Buffer> buf_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<TensorInfo> infos_;
  std::vector<uint32_t> types_;  // ggml type id of infos_[i]
};

}  // namespace xdna

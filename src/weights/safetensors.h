// safetensors reader: one file, or a Hugging Face checkpoint split into shards by
// model.safetensors.index.json. The file is memory-mapped and every header field is checked
// before any tensor is handed out; tensors are zero-copy views of the mapping.
//
// Layout: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data region; offsets are relative to its start.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "weights/source.h"

namespace xdna {

class SafetensorsFile final : public WeightSource {
 public:
  // Several files make one checkpoint (shards); names must be unique across them.
  explicit SafetensorsFile(const std::vector<std::string>& paths);
  // For tests and in-memory data: `name` is used in error messages.
  SafetensorsFile(std::shared_ptr<Buffer> bytes, const std::string& name);

  std::string format() const override { return "safetensors"; }
  std::string path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Tensor get(const std::string& name) const override;
  // The files' __metadata__ maps merged (plus the shard index's "metadata", if any).
  nlohmann::json metadata() const override { return metadata_; }

  void merge_metadata(const nlohmann::json& extra);
  void set_path(const std::string& p) { path_ = p; }

 private:
  void parse(std::shared_ptr<Buffer> bytes, const std::string& name);

  std::string path_;
  std::vector<std::shared_ptr<Buffer>> buffers_;
  std::vector<TensorInfo> infos_;
  std::vector<size_t> buffer_of_;  // infos_[i] lives in buffers_[buffer_of_[i]]
  nlohmann::json metadata_ = nlohmann::json::object();
};

// A Hugging Face checkpoint directory: model.safetensors.index.json (or any single
// *.safetensors.index.json) if present, else every *.safetensors file in it.
std::unique_ptr<SafetensorsFile> open_safetensors_dir(const std::string& dir);
// A shard index file: checks that every tensor it lists is in the shard it names.
std::unique_ptr<SafetensorsFile> open_safetensors_index(const std::string& index_path);

// Bytes per element of a safetensors dtype name, or 0 if the name is not in the format.
int safetensors_dtype_size(const std::string& dtype);

}  // namespace xdna

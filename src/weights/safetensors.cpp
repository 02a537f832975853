#include "weights/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

namespace xdna {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct StDType {
  const char* name;
  int size;
  std::optional<DType> engine;
};

// Every dtype the safetensors format defines; only some have an engine equivalent.
const StDType kStDTypes[] = {
    {"F32", 4, DType::F32},  {"F16", 2, DType::F16},     {"BF16", 2, DType::BF16},
    {"I32", 4, DType::I32},  {"I8", 1, DType::I8},       {"F64", 8, std::nullopt},
    {"I64", 8, std::nullopt}, {"U64", 8, std::nullopt},  {"U32", 4, std::nullopt},
    {"I16", 2, std::nullopt}, {"U16", 2, std::nullopt},  {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const StDType* find_st_dtype(const std::string& name) {
  for (const auto& d : kStDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::runtime_error(file + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& file, const std::string& tensor,
                              const std::string& what) {
  throw std::runtime_error(file + ": tensor '" + tensor + "': " + what);
}

uint64_t json_uint(const json& v, const std::string& file, const std::string& tensor,
                   const char* field) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    fail_tensor(file, tensor, std::string(field) + " must hold non-negative integers, got " +
                                  v.dump());
  return v.get<uint64_t>();
}

}  // namespace

int safetensors_dtype_size(const std::string& dtype) {
  const StDType* d = find_st_dtype(dtype);
  return d ? d->size : 0;
}

SafetensorsFile::SafetensorsFile(const std::vector<std::string>& paths) {
  if (paths.empty()) throw std::invalid_argument("safetensors: no files given");
  path_ = paths.size() == 1 ? paths[0] : fs::path(paths[0]).parent_path().string();
  for (const auto& p : paths) parse(std::make_shared<MappedFile>(p), p);
}

SafetensorsFile::SafetensorsFile(std::shared_ptr<Buffer> bytes, const std::string& name)
    : path_(name) {
  parse(std::move(bytes), name);
}

void SafetensorsFile::parse(std::shared_ptr<Buffer> buf, const std::string& file) {
  const uint64_t size = buf->size();
  if (size < 8)
    fail(file, "file is " + std::to_string(size) +
                   " bytes, too small for a safetensors header (truncated?)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, buf->data(), 8);  // little-endian host (x86-64)
  if (header_len > size - 8)
    fail(file, "header length " + std::to_string(header_len) + " exceeds the file (" +
                   std::to_string(size) + " bytes; truncated or not a safetensors file)");
  const char* hdr = reinterpret_cast<const char*>(buf->data()) + 8;
  json header;
  try {
    header = json::parse(hdr, hdr + header_len);
  } catch (const json::parse_error& e) {
    fail(file, std::string("header JSON does not parse: ") + e.what());
  }
  if (!header.is_object()) fail(file, "header JSON is not an object");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  const size_t buffer_index = buffers_.size();
  const size_t first_info = infos_.size();
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  std::set<std::string> seen;
  for (const auto& info : infos_) seen.insert(info.name);

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(file, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) metadata_[m.key()] = m.value();
      continue;
    }
    if (!v.is_object()) fail_tensor(file, name, "entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string())
      fail_tensor(file, name, "missing string field 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array())
      fail_tensor(file, name, "missing array field 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      fail_tensor(file, name, "missing field 'data_offsets' = [begin, end]");
    const std::string dt = v["dtype"].get<std::string>();
    const StDType* d = find_st_dtype(dt);
    if (!d) fail_tensor(file, name, "unknown dtype '" + dt + "'");

    Shape shape;
    uint64_t numel = 1;
    // The product with zero dimensions taken as 1: a tensor with no elements must not hide
    // dimensions whose strides overflow (Tensor::view computes them in int64).
    uint64_t span = 1;
    for (const json& dim : v["shape"]) {
      const uint64_t n = json_uint(dim, file, name, "shape");
      if (n > (1ull << 48) || span > std::numeric_limits<uint64_t>::max() / 8 / std::max<uint64_t>(n, 1))
        fail_tensor(file, name, "shape " + v["shape"].dump() + " is absurdly large");
      numel *= n;
      span *= std::max<uint64_t>(n, 1);
      shape.push_back(static_cast<int64_t>(n));
    }
    const uint64_t begin = json_uint(v["data_offsets"][0], file, name, "data_offsets");
    const uint64_t end = json_uint(v["data_offsets"][1], file, name, "data_offsets");
    if (end < begin)
      fail_tensor(file, name, "data_offsets [" + std::to_string(begin) + ", " +
                                  std::to_string(end) + ") end before they begin");
    const uint64_t want = numel * static_cast<uint64_t>(d->size);
    if (end - begin != want)
      fail_tensor(file, name, "shape " + shape_str(shape) + " of " + dt + " needs " +
                                  std::to_string(want) + " bytes but data_offsets span " +
                                  std::to_string(end - begin));
    if (end > data_size)
      fail_tensor(file, name, "data_offsets [" + std::to_string(begin) + ", " +
                                  std::to_string(end) + ") exceed the data region (" +
                                  std::to_string(data_size) + " bytes; file truncated?)");
    if (!seen.insert(name).second) fail_tensor(file, name, "appears in more than one shard");
    if (begin != end) spans.push_back({begin, end, name});

    TensorInfo info;
    info.name = name;
    info.file_dtype = dt;
    info.dtype = d->engine;
    info.shape = std::move(shape);
    info.file = file;
    info.offset = data_start + begin;
    info.bytes = end - begin;
    infos_.push_back(std::move(info));
    buffer_of_.push_back(buffer_index);
  }

  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      fail(file, "tensors '" + spans[i - 1].name + "' and '" + spans[i].name +
                     "' overlap in the data region");
  // Tensors in file order (nlohmann sorts keys by name; offsets give the order on disk).
  std::stable_sort(infos_.begin() + static_cast<long>(first_info), infos_.end(),
                   [](const TensorInfo& a, const TensorInfo& b) {
                     return a.offset < b.offset;
                   });
  buffers_.push_back(std::move(buf));
}

Tensor SafetensorsFile::get(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i) {
    const TensorInfo& t = infos_[i];
    if (t.name != name) continue;
    if (!t.dtype)
      fail_tensor(t.file, name, "dtype " + t.file_dtype +
                                    " is not supported by the engine (supported: F32, F16, "
                                    "BF16, I32, I8)");
    return Tensor::view(buffers_[buffer_of_[i]], t.offset, t.shape, *t.dtype);
  }
  fail(path_, "no tensor named '" + name + "'");
}

void SafetensorsFile::merge_metadata(const json& extra) {
  if (!extra.is_object()) return;
  for (auto m = extra.begin(); m != extra.end(); ++m) metadata_[m.key()] = m.value();
}

std::unique_ptr<SafetensorsFile> open_safetensors_index(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) throw std::runtime_error(index_path + ": cannot open");
  json index;
  try {
    index = json::parse(in);
  } catch (const json::parse_error& e) {
    fail(index_path, std::string("does not parse as JSON: ") + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(index_path, "has no 'weight_map' object");
  const fs::path dir = fs::path(index_path).parent_path();
  std::vector<std::string> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) fail(index_path, "weight_map['" + it.key() + "'] is not a string");
    const std::string shard = it.value().get<std::string>();
    const fs::path rel(shard);
    if (rel.is_absolute() || shard.find("..") != std::string::npos)
      fail(index_path, "shard name '" + shard + "' leaves the checkpoint directory");
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  }
  if (shards.empty()) fail(index_path, "weight_map is empty");
  std::sort(shards.begin(), shards.end());
  std::vector<std::string> paths;
  for (const auto& s : shards) paths.push_back((dir / s).string());
  auto st = std::make_unique<SafetensorsFile>(paths);
  st->set_path(dir.string());
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    const TensorInfo* t = st->find(it.key());
    const std::string shard = (dir / it.value().get<std::string>()).string();
    if (!t || t->file != shard)
      fail(index_path, "lists tensor '" + it.key() + "' in " + it.value().get<std::string>() +
                           " but that shard has no such tensor");
  }
  if (index.contains("metadata")) st->merge_metadata(index["metadata"]);
  return st;
}

std::unique_ptr<SafetensorsFile> open_safetensors_dir(const std::string& dir) {
  std::vector<std::string> indexes, files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (name.ends_with(".safetensors.index.json")) indexes.push_back(e.path().string());
    if (name.ends_with(".safetensors")) files.push_back(e.path().string());
  }
  const fs::path preferred = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(preferred)) return open_safetensors_index(preferred.string());
  if (indexes.size() == 1) return open_safetensors_index(indexes[0]);
  if (indexes.size() > 1)
    throw std::runtime_error(dir + ": several *.safetensors.index.json files; open one of them");
  if (files.empty())
    throw std::runtime_error(dir + ": no *.safetensors files (PyTorch .bin checkpoints are not "
                                   "supported; convert them to safetensors)");
  std::sort(files.begin(), files.end());
  auto st = std::make_unique<SafetensorsFile>(files);
  st->set_path(dir);
  return st;
}

}  // namespace xdna

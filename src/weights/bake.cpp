#include "weights/bake.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/numeric.h"
#include "weights/baked.h"
#include "core/sha256.h"
#include "weights/source.h"
#include "weights/text_file.h"

namespace xdna {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kPrecisionNames[] = {"f32", "f16", "bf16", "bfp16", "int8", "int4", "keep", "auto"};
constexpr uint64_t kMaxEmbeddedFile = 64ull << 20;
constexpr int64_t kChunkValues = 1 << 20;  // values converted per step (bounds memory)

bool is_embedding(const std::string& name) {
  return name.find("embed") != std::string::npos || name.find("wte.") != std::string::npos ||
         name.find("wpe.") != std::string::npos;
}

// Integer dtypes as files spell them (safetensors "I64", "U8", "BOOL"; ggml "i16" ...).
bool is_integer_file_dtype(const std::string& d) {
  return !d.empty() && (d[0] == 'I' || d[0] == 'U' || d[0] == 'i' || d == "BOOL");
}

// Files of a checkpoint directory worth carrying along: tokenizer, generation and
// preprocessor configs, licences, and sentence-transformers' module configs in subdirectories
// (modules.json, 1_Pooling/config.json ...), which decide the pooling. Weights in any format and
// hidden files and directories are left out.
bool embeddable(const fs::path& rel, const fs::directory_entry& e) {
  if (!e.is_regular_file()) return false;
  for (const auto& part : rel)
    if (part.string().empty() || part.string()[0] == '.') return false;
  const std::string n = rel.filename().string();
  if (rel == "config.json") return false;  // carried parsed, as "config"
  for (const char* ext : {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack",
                          ".onnx", ".ckpt", ".index.json", ".tmp", ".xdna"})
    if (n.ends_with(ext)) return false;
  return e.file_size() <= kMaxEmbeddedFile;
}

// Every embeddable file under `base`, as '/'-separated relative names, sorted.
std::vector<std::string> embeddable_files(const fs::path& base) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(base); it != fs::recursive_directory_iterator(); ++it) {
    const std::string leaf = it->path().filename().string();
    if (it->is_directory() && !leaf.empty() && leaf[0] == '.') {  // .git, .cache: not model files
      it.disable_recursion_pending();
      continue;
    }
    const fs::path rel = fs::relative(it->path(), base);
    if (embeddable(rel, *it)) out.push_back(rel.generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::optional<Precision> precision_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kPrecisionNames); ++i)
    if (name == kPrecisionNames[i]) return static_cast<Precision>(i);
  return std::nullopt;
}

const char* precision_name(Precision p) { return kPrecisionNames[static_cast<size_t>(p)]; }

TensorPlan plan_tensor(const std::string& name, const Shape& shape, DType source, Precision p,
                       int64_t group) {
  if (p == Precision::Keep) return {source, 0, "keep", ""};
  if (p == Precision::Auto) p = Precision::F32;  // tensors the auto plan does not list
  if (source == DType::I32 || source == DType::I8) return {source, 0, "integer", ""};
  const bool matrix = shape.size() == 2 && name.ends_with("weight");
  if (!matrix) return {DType::F32, 0, "f32", ""};
  const int64_t cols = shape[1];
  if (is_embedding(name)) {
    if (p == Precision::F32) return {DType::F32, 0, "f32", ""};
    if (p == Precision::F16) return {DType::F16, 0, "f16", ""};
    return {DType::BF16, 0, "embedding", ""};
  }
  switch (p) {
    case Precision::F32: return {DType::F32, 0, "f32", ""};
    case Precision::F16: return {DType::F16, 0, "f16", ""};
    case Precision::BF16: return {DType::BF16, 0, "bf16", ""};
    case Precision::BFP16:
      if (cols % kBfp16BlockValues == 0) return {DType::BFP16, 0, "bfp16", ""};
      return {DType::F32, 0, "f32", "row length " + std::to_string(cols) +
                                        " is not a multiple of 8; stored as f32"};
    case Precision::Int8: {
      const int64_t g = group > 0 ? group : cols;
      if (cols > 0 && cols % g == 0) return {DType::I8, g, "int8", ""};
      return {DType::F32, 0, "f32", "row length " + std::to_string(cols) +
                                        " is not a multiple of group " + std::to_string(g) +
                                        "; stored as f32"};
    }
    case Precision::Int4: {
      const int64_t g = group > 0 ? group : kDefaultInt4Group;
      if (cols > 0 && cols % g == 0 && g % 2 == 0) return {DType::I4, g, "int4", ""};
      return {DType::F32, 0, "f32", "row length " + std::to_string(cols) +
                                        " is not a multiple of group " + std::to_string(g) +
                                        "; stored as f32"};
    }
    case Precision::Keep:
    case Precision::Auto: break;
  }
  return {source, 0, "keep", ""};
}

std::vector<float> write_converted(const Tensor& src, const TensorPlan& plan, BakedWriter& w) {
  const int64_t numel = src.numel();
  if (numel == 0) return {};
  const int64_t cols = src.ndim() ? src.shape().back() : 1;
  const int64_t rows = numel / cols;
  if (plan.dtype == src.dtype()) {  // same storage: copy the bytes as they are
    w.write(src.raw(), static_cast<size_t>(src.nbytes()));
    return {};
  }
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkValues / cols);
  const int64_t src_row_bytes = dtype_bytes(src.dtype(), cols);
  const int64_t dst_row_bytes = dtype_bytes(plan.dtype, cols);
  std::vector<float> f(static_cast<size_t>(std::min(rows, chunk_rows) * cols));
  std::vector<uint8_t> out(static_cast<size_t>(std::min(rows, chunk_rows) * dst_row_bytes));
  std::vector<float> scales(plan.group ? static_cast<size_t>(numel / plan.group) : 0);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    for (int64_t r = 0; r < n; ++r)
      dequantize_row(src.dtype(), src.raw() + (r0 + r) * src_row_bytes, f.data() + r * cols, cols);
    float* sc = plan.group ? scales.data() + r0 * (cols / plan.group) : nullptr;
    if (plan.dtype == DType::I8)
      quantize_int8(f.data(), n, cols, plan.group, reinterpret_cast<int8_t*>(out.data()), sc);
    else if (plan.dtype == DType::I4)
      quantize_int4(f.data(), n, cols, plan.group, out.data(), sc);
    else
      for (int64_t r = 0; r < n; ++r)
        quantize_row(plan.dtype, f.data() + r * cols, out.data() + r * dst_row_bytes, cols);
    w.write(out.data(), static_cast<size_t>(n * dst_row_bytes));
  }
  return scales;
}

BakeSummary bake_checkpoint(const BakeOptions& opts) {
  auto log = [&](const std::string& s) {
    if (opts.log) opts.log(s);
  };
  if (opts.group < 0) throw std::invalid_argument("--group must be positive");
  if (opts.group > 0 && opts.precision != Precision::Int8 && opts.precision != Precision::Int4)
    throw std::invalid_argument("--group applies only to int8 and int4");
  if (opts.precision == Precision::Int4 && opts.group % 2 != 0)
    throw std::invalid_argument("int4 group must be even");
  if (opts.precision == Precision::Auto && opts.plans.empty())
    throw std::invalid_argument("precision auto needs a plan per tensor (choose_precisions in "
                                "src/pipeline/precision_auto.h)");

  std::unique_ptr<WeightSource> src = open_weights(opts.source);
  if (src->format() == "baked")
    throw std::invalid_argument(opts.source +
                                ": already a baked model; bake the original checkpoint");

  // Source description: every file read, with its hash.
  BakedWriter w(opts.output);
  const bool is_dir = fs::is_directory(opts.source);
  const fs::path base = is_dir ? fs::path(opts.source) : fs::path(opts.source).parent_path();
  std::vector<std::string> source_files;
  for (const auto& t : src->tensors())
    if (std::find(source_files.begin(), source_files.end(), t.file) == source_files.end())
      source_files.push_back(t.file);
  if (is_dir)
    for (const char* extra : {"config.json", "model.safetensors.index.json"})
      if (fs::exists(base / extra)) source_files.push_back((base / extra).string());
  if (opts.source.ends_with(".index.json")) source_files.push_back(opts.source);
  json files = json::array();
  for (const auto& f : source_files) {
    log("hashing " + f);
    files.push_back({{"name", fs::relative(f, base).string()},
                     {"bytes", fs::file_size(f)},
                     {"sha256", sha256_file(f)}});
  }
  w.set("source", {{"path", fs::absolute(opts.source).lexically_normal().string()},
                   {"format", src->format()},
                   {"files", files},
                   {"metadata", src->metadata()}});
  w.set("precision", precision_name(opts.precision));
  w.set("group", opts.group);
  if (opts.precision == Precision::Auto) {
    w.set("auto", opts.auto_record);
    for (const auto& [name, plan] : opts.plans)
      if (!src->contains(name))
        throw std::invalid_argument("precision auto: the plan names '" + name +
                                    "', which the source does not have");
  }
  w.set("config", nullptr);
  if (is_dir) {
    if (fs::exists(base / "config.json")) {
      try {
        w.set("config", json::parse(read_required_text_file(base / "config.json")));
      } catch (const json::parse_error& e) {
        throw std::runtime_error((base / "config.json").string() + ": " + e.what());
      }
    }
    for (const std::string& name : embeddable_files(base)) {
      log("embedding " + name);
      w.add_file(name, read_required_text_file(base / name));
    }
  }

  // Plan every tensor.
  struct Item {
    const TensorInfo* info;
    TensorPlan plan;
  };
  std::vector<Item> items;
  json skipped = json::array();
  BakeSummary sum;
  for (const auto& t : src->tensors()) {
    if (!t.dtype) {
      if (is_integer_file_dtype(t.file_dtype)) {
        log("skipping '" + t.name + "': integer dtype " + t.file_dtype +
            " is not used by the engine");
        skipped.push_back({{"name", t.name}, {"dtype", t.file_dtype}});
        ++sum.skipped;
        continue;
      }
      src->get(t.name);  // throws: names the tensor and its unsupported type
    }
    const bool planned = opts.precision == Precision::Auto && opts.plans.count(t.name);
    TensorPlan plan = planned ? opts.plans.at(t.name)
                              : plan_tensor(t.name, t.shape, *t.dtype, opts.precision, opts.group);
    if (!plan.warning.empty()) log("warning: '" + t.name + "': " + plan.warning);
    json entry = {{"name", t.name},
                  {"dtype", dtype_name(plan.dtype)},
                  {"shape", t.shape},
                  {"precision", plan.precision},
                  {"layout", "row-major"},
                  {"source_dtype", t.file_dtype}};
    if (plan.group) {
      entry["scales"] = t.name + ".scales";
      entry["group"] = plan.group;
    }
    if (opts.precision == Precision::Auto && opts.tensor_fields.count(t.name))
      for (const auto& [k, v] : opts.tensor_fields.at(t.name).items()) entry[k] = v;
    w.add_tensor(entry);
    if (plan.group) {
      Shape sshape = t.shape;
      sshape.back() /= plan.group;
      w.add_tensor({{"name", t.name + ".scales"},
                    {"dtype", "f32"},
                    {"shape", sshape},
                    {"precision", "f32"},
                    {"layout", "row-major"},
                    {"scales_of", t.name}});
    }
    items.push_back({&t, plan});
  }
  w.set("skipped", skipped);

  w.begin();
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& [t, plan] = items[i];
    std::string line = "[";
    line += std::to_string(i + 1) + "/" + std::to_string(items.size()) + "] " + t->name + " " +
            t->file_dtype + " " + shape_str(t->shape) + " -> " + dtype_name(plan.dtype).data();
    if (plan.group) line += " (group " + std::to_string(plan.group) + ")";
    log(line);
    Tensor v = src->get(t->name);
    const std::vector<float> scales = write_converted(v, plan, w);
    if (plan.group) w.write(scales.data(), scales.size() * sizeof(float));
    sum.bytes_in += t->bytes;
    ++sum.tensors;
  }
  w.finish();
  sum.bytes_out = fs::file_size(opts.output);
  return sum;
}

}  // namespace xdna

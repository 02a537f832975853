#include "weights/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

namespace xdna {

using nlohmann::json;

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected

// Every ggml type id GGUF files use; sizes as in ggml's type traits.
const GgmlTypeInfo kGgmlTypes[] = {
    {0, "f32", 1, 4, DType::F32},        {1, "f16", 1, 2, DType::F16},
    {2, "q4_0", 32, 18, DType::Q4_0},    {3, "q4_1", 32, 20, std::nullopt},
    {6, "q5_0", 32, 22, DType::Q5_0},   {7, "q5_1", 32, 24, std::nullopt},
    {8, "q8_0", 32, 34, DType::Q8_0},    {9, "q8_1", 32, 40, std::nullopt},
    {10, "q2_K", 256, 84, std::nullopt}, {11, "q3_K", 256, 110, std::nullopt},
    {12, "q4_K", 256, 144, DType::Q4_K}, {13, "q5_K", 256, 176, DType::Q5_K},
    {14, "q6_K", 256, 210, DType::Q6_K}, {15, "q8_K", 256, 292, std::nullopt},
    {16, "iq2_xxs", 256, 66, std::nullopt}, {17, "iq2_xs", 256, 74, std::nullopt},
    {18, "iq3_xxs", 256, 98, std::nullopt}, {19, "iq1_s", 256, 50, std::nullopt},
    {20, "iq4_nl", 32, 18, std::nullopt},   {21, "iq3_s", 256, 110, std::nullopt},
    {22, "iq2_s", 256, 82, std::nullopt},   {23, "iq4_xs", 256, 136, std::nullopt},
    {24, "i8", 1, 1, DType::I8},         {25, "i16", 1, 2, std::nullopt},
    {26, "i32", 1, 4, DType::I32},       {27, "i64", 1, 8, std::nullopt},
    {28, "f64", 1, 8, std::nullopt},     {29, "iq1_m", 256, 56, std::nullopt},
    {30, "bf16", 1, 2, DType::BF16},     {31, "q4_0_4_4", 32, 18, std::nullopt},
    {32, "q4_0_4_8", 32, 18, std::nullopt}, {33, "q4_0_8_8", 32, 18, std::nullopt},
    {34, "tq1_0", 256, 54, std::nullopt},   {35, "tq2_0", 256, 66, std::nullopt},
    {39, "mxfp4", 32, 17, std::nullopt},
};

// Bytes the smallest encoding of one value of type t takes (bounds array counts).
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::String: return 8;   // length
    case GgufType::Array: return 12;   // element type + count
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

// Reads little-endian values from the buffer, checking every length against what is left.
// `where` says what is being read, for the error message.
struct Cursor {
  const std::byte* data;
  uint64_t size;
  uint64_t pos = 0;
  const std::string& file;
  std::string where;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(file + ": " + what + (where.empty() ? "" : " (in " + where + ")"));
  }
  uint64_t left() const { return size - pos; }
  void need(uint64_t n, const char* what) const {
    if (n > left())
      fail("truncated: " + std::string(what) + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos) + ", " + std::to_string(left()) + " left");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data + pos), n);
    pos += n;
    return s;
  }

  // An array's element type and count, checked: the count must fit in the bytes left.
  uint64_t read_array_header(int depth, GgufType* elem) {
    if (depth >= kMaxArrayDepth) fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    const uint32_t et = read<uint32_t>("array element type");
    if (!valid_type(et)) fail("array element type " + std::to_string(et) + " is unknown");
    const uint64_t count = read<uint64_t>("array count");
    *elem = static_cast<GgufType>(et);
    if (count > left() / min_value_bytes(*elem))
      fail("array count " + std::to_string(count) + " of " + gguf_type_name(*elem) +
           " cannot fit in the " + std::to_string(left()) + " bytes left");
    return count;
  }

  // Moves past a flat array's `count` elements of `elem`, checking them as read_value would
  // (bools 0 or 1, every string within the file) without building them.
  void skip_flat_array(GgufType elem, uint64_t count) {
    if (elem == GgufType::String) {
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t n = read<uint64_t>("string length");
        need(n, "string value");
        pos += n;
      }
      return;
    }
    const uint64_t bytes = count * min_value_bytes(elem);  // fixed size; the count fits (header)
    need(bytes, "array values");
    if (elem == GgufType::Bool)
      for (uint64_t i = 0; i < count; ++i)
        if (static_cast<uint8_t>(data[pos + i]) > 1)
          fail("bool value " + std::to_string(static_cast<uint8_t>(data[pos + i])) + " is neither 0 nor 1");
    pos += bytes;
  }

  // One number of integer or float type `t` as T (the caller has checked the type family).
  template <typename T>
  T read_number(GgufType t) {
    switch (t) {
      case GgufType::U8: return static_cast<T>(read<uint8_t>("u8 value"));
      case GgufType::I8: return static_cast<T>(read<int8_t>("i8 value"));
      case GgufType::U16: return static_cast<T>(read<uint16_t>("u16 value"));
      case GgufType::I16: return static_cast<T>(read<int16_t>("i16 value"));
      case GgufType::U32: return static_cast<T>(read<uint32_t>("u32 value"));
      case GgufType::I32: return static_cast<T>(read<int32_t>("i32 value"));
      case GgufType::U64: return static_cast<T>(read<uint64_t>("u64 value"));
      case GgufType::I64: return static_cast<T>(read<int64_t>("i64 value"));
      case GgufType::F32: return static_cast<T>(read<float>("f32 value"));
      case GgufType::F64: return static_cast<T>(read<double>("f64 value"));
      default: fail(std::string(gguf_type_name(t)) + " is not a number");
    }
  }

  json read_value(GgufType t, GgufType* elem_type, int depth) {
    switch (t) {
      case GgufType::U8: return read<uint8_t>("u8 value");
      case GgufType::I8: return read<int8_t>("i8 value");
      case GgufType::U16: return read<uint16_t>("u16 value");
      case GgufType::I16: return read<int16_t>("i16 value");
      case GgufType::U32: return read<uint32_t>("u32 value");
      case GgufType::I32: return read<int32_t>("i32 value");
      case GgufType::F32: return static_cast<double>(read<float>("f32 value"));
      case GgufType::U64: return read<uint64_t>("u64 value");
      case GgufType::I64: return read<int64_t>("i64 value");
      case GgufType::F64: return read<double>("f64 value");
      case GgufType::Bool: {
        const uint8_t b = read<uint8_t>("bool value");
        if (b > 1) fail("bool value " + std::to_string(b) + " is neither 0 nor 1");
        return b == 1;
      }
      case GgufType::String: return read_string("string value");
      case GgufType::Array: {
        GgufType elem;
        const uint64_t count = read_array_header(depth, &elem);
        if (elem_type) *elem_type = elem;
        json arr = json::array();
        arr.get_ref<json::array_t&>().reserve(count);
        for (uint64_t i = 0; i < count; ++i) arr.push_back(read_value(elem, nullptr, depth + 1));
        return arr;
      }
    }
    fail("value type " + std::to_string(static_cast<uint32_t>(t)) + " is unknown");
  }
};

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(names) ? names[i] : "unknown";
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

GgufFile::GgufFile(const std::string& path)
    : path_(path), buf_(std::make_shared<MappedFile>(path)) {
  parse();
}

GgufFile::GgufFile(std::shared_ptr<Buffer> bytes, const std::string& name)
    : path_(name), buf_(std::move(bytes)) {
  parse();
}

void GgufFile::parse() {
  Cursor c{buf_->data(), buf_->size(), 0, path_, "header"};
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) c.fail("not a GGUF file (bad magic)");
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) c.fail("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version_ >= 0x01000000) c.fail("big-endian GGUF files are not supported");
  if (version_ != 2 && version_ != 3)
    c.fail("GGUF version " + std::to_string(version_) + " is not supported (only 2 and 3)");
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Smallest possible records: a key/value is 8 + 4 + 1 bytes, a tensor info 8 + 4 + 4 + 8.
  if (n_kv > c.left() / 13)
    c.fail("metadata count " + std::to_string(n_kv) + " cannot fit in a file of " +
           std::to_string(c.size) + " bytes");
  if (n_tensors > c.left() / 24)
    c.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " +
           std::to_string(c.size) + " bytes");

  std::set<std::string> keys;
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.where = "metadata entry " + std::to_string(i);
    std::string key = c.read_string("metadata key");
    c.where = "metadata '" + key + "'";
    if (!keys.insert(key).second) c.fail("duplicate metadata key");
    const uint32_t t = c.read<uint32_t>("value type");
    if (!valid_type(t)) c.fail("value type " + std::to_string(t) + " is unknown");
    GgufValue v;
    v.type = static_cast<GgufType>(t);
    if (v.type == GgufType::Array) {
      v.array_at = c.pos;
      v.count = c.read_array_header(0, &v.elem_type);
      if (v.in_file()) {
        c.skip_flat_array(v.elem_type, v.count);
        kv_.emplace_back(std::move(key), std::move(v));
        continue;
      }
      c.pos = v.array_at;  // nested: held as JSON
    }
    v.value = c.read_value(v.type, &v.elem_type, 0);
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find_kv("general.alignment")) {
    c.where = "metadata 'general.alignment'";
    if (a->type != GgufType::U32)
      c.fail(std::string("alignment must be u32, not ") + gguf_type_name(a->type));
    alignment_ = a->value.get<uint64_t>();
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)))
      c.fail("alignment " + std::to_string(alignment_) + " is not a power of two");
  }

  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.where = "tensor info " + std::to_string(i);
    TensorInfo info;
    info.name = c.read_string("tensor name");
    c.where = "tensor '" + info.name + "'";
    if (!names.insert(info.name).second) c.fail("duplicate tensor name");
    const uint32_t n_dims = c.read<uint32_t>("dimension count");
    if (n_dims > kMaxDims)
      c.fail(std::to_string(n_dims) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
    Shape ne(n_dims);
    int64_t numel = 1;
    // The product with zero dimensions taken as 1, in bytes (<= 9 per value) too: a tensor with
    // no elements must not hide a dimension whose strides or row bytes overflow int64
    // (Tensor::view computes both).
    uint64_t span = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = c.read<uint64_t>("dimension");
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          span > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 9 / std::max<uint64_t>(n, 1))
        c.fail("dimensions overflow a 64-bit element count");
      ne[d] = static_cast<int64_t>(n);
      numel *= ne[d];
      span *= std::max<uint64_t>(n, 1);
    }
    const uint32_t type = c.read<uint32_t>("ggml type");
    const GgmlTypeInfo* gt = ggml_type_info(type);
    if (!gt) c.fail("unknown ggml type " + std::to_string(type));
    if (n_dims > 0 && ne[0] % gt->block_elems != 0)
      c.fail("row length " + std::to_string(ne[0]) + " is not a multiple of the " +
             gt->name + " block size " + std::to_string(gt->block_elems));
    if (n_dims == 0 && gt->block_elems != 1) c.fail("a scalar cannot have a block type");
    const uint64_t offset = c.read<uint64_t>("data offset");
    if (offset % alignment_ != 0)
      c.fail("data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
             std::to_string(alignment_));
    // numel <= 2^63 and bytes per value <= 9: the division first keeps this from overflowing.
    const uint64_t bytes =
        static_cast<uint64_t>(numel / gt->block_elems) * static_cast<uint64_t>(gt->block_bytes);
    if (numel && bytes / static_cast<uint64_t>(gt->block_bytes) !=
                     static_cast<uint64_t>(numel / gt->block_elems))
      c.fail("tensor size overflows");
    info.file_dtype = gt->name;
    info.dtype = gt->engine;
    info.shape.assign(ne.rbegin(), ne.rend());
    info.file = path_;
    info.offset = offset;  // relative for now; made absolute once the data start is known
    info.bytes = bytes;
    infos_.push_back(std::move(info));
    types_.push_back(type);
  }

  c.where.clear();
  data_offset_ = (c.pos + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = c.size >= data_offset_ ? c.size - data_offset_ : 0;
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto& t : infos_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      throw std::runtime_error(path_ + ": tensor '" + t.name + "': data [" +
                               std::to_string(t.offset) + ", +" + std::to_string(t.bytes) +
                               ") exceeds the data region (" + std::to_string(data_size) +
                               " bytes; file truncated?)");
    if (t.bytes) spans.push_back({t.offset, t.offset + t.bytes, &t.name});
    t.offset += data_offset_;
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      throw std::runtime_error(path_ + ": tensors '" + *spans[i - 1].name + "' and '" +
                               *spans[i].name + "' overlap in the data region");
}

Tensor GgufFile::get(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i) {
    const TensorInfo& t = infos_[i];
    if (t.name != name) continue;
    if (!t.dtype)
      throw std::runtime_error(path_ + ": tensor '" + name + "' has ggml type " + t.file_dtype +
                               ", which the engine does not support (supported: f32, f16, "
                               "bf16, q8_0, q4_0, q5_0, q4_K, q5_K, q6_K, i8, i32)");
    return Tensor::view(buf_, t.offset, t.shape, *t.dtype);
  }
  throw std::runtime_error(path_ + ": no tensor named '" + name + "'");
}

uint32_t GgufFile::ggml_type(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i)
    if (infos_[i].name == name) return types_[i];
  throw std::runtime_error(path_ + ": no tensor named '" + name + "'");
}

json GgufFile::metadata() const {
  json out = json::object();
  for (const auto& [k, v] : kv_) out[k] = json_of(v);
  return out;
}

json GgufFile::json_of(const GgufValue& v) const {
  if (!v.in_file()) return v.value;
  Cursor c{buf_->data(), buf_->size(), v.array_at, path_, "metadata array"};
  return c.read_value(GgufType::Array, nullptr, 0);
}

const GgufValue* GgufFile::find_kv(const std::string& key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

const GgufValue& GgufFile::value(const std::string& key) const {
  const GgufValue* v = find_kv(key);
  if (!v) throw std::runtime_error(path_ + ": no metadata key '" + key + "'");
  return *v;
}

namespace {
bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}
bool is_float_type(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

[[noreturn]] void type_error(const std::string& file, const std::string& key, const GgufValue& v,
                             const char* wanted) {
  std::string have = gguf_type_name(v.type);
  if (v.type == GgufType::Array) have += std::string(" of ") + gguf_type_name(v.elem_type);
  throw std::runtime_error(file + ": metadata '" + key + "' is " + have + ", not " + wanted);
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::String) type_error(path_, key, v, "a string");
  return v.value.get<std::string>();
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = value(key);
  if (!is_int_type(v.type)) type_error(path_, key, v, "an integer");
  if (v.value.is_number_unsigned() &&
      v.value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw std::runtime_error(path_ + ": metadata '" + key + "' does not fit in an int64");
  return v.value.get<int64_t>();
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue& v = value(key);
  if (!is_int_type(v.type)) type_error(path_, key, v, "an integer");
  if (!v.value.is_number_unsigned() && v.value.get<int64_t>() < 0)
    throw std::runtime_error(path_ + ": metadata '" + key + "' is negative");
  return v.value.get<uint64_t>();
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = value(key);
  if (!is_float_type(v.type) && !is_int_type(v.type)) type_error(path_, key, v, "a number");
  return v.value.get<double>();
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Bool) type_error(path_, key, v, "a bool");
  return v.value.get<bool>();
}

// A flat array's elements are read where they lie: past the 12-byte header (type, count) that
// array_at points to. An empty array of another element type passes any type check.
std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || (v.elem_type != GgufType::String && v.count != 0))
    type_error(path_, key, v, "an array of string");
  if (!v.in_file()) return {};  // an empty nested array
  Cursor c{buf_->data(), buf_->size(), v.array_at + 12, path_, "metadata '" + key + "'"};
  std::vector<std::string> out;
  out.reserve(v.count);
  for (uint64_t i = 0; i < v.count; ++i) out.push_back(c.read_string("string value"));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || (!is_int_type(v.elem_type) && v.count != 0))
    type_error(path_, key, v, "an array of integers");
  if (!v.in_file()) return {};
  Cursor c{buf_->data(), buf_->size(), v.array_at + 12, path_, "metadata '" + key + "'"};
  std::vector<int64_t> out(v.count);
  for (auto& x : out) {
    if (v.elem_type == GgufType::U64) {
      const uint64_t u = c.read<uint64_t>("u64 value");
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw std::runtime_error(path_ + ": metadata '" + key + "' has a value beyond int64");
      x = static_cast<int64_t>(u);
    } else {
      x = c.read_number<int64_t>(v.elem_type);
    }
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array ||
      (!is_float_type(v.elem_type) && !is_int_type(v.elem_type) && v.count != 0))
    type_error(path_, key, v, "an array of numbers");
  if (!v.in_file()) return {};
  Cursor c{buf_->data(), buf_->size(), v.array_at + 12, path_, "metadata '" + key + "'"};
  std::vector<double> out(v.count);
  for (auto& x : out) x = c.read_number<double>(v.elem_type);
  return out;
}

std::optional<uint64_t> GgufFile::find_in_string_array(const std::string& key, std::string_view s) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || (v.elem_type != GgufType::String && v.count != 0))
    type_error(path_, key, v, "an array of string");
  if (!v.in_file()) return std::nullopt;
  Cursor c{buf_->data(), buf_->size(), v.array_at + 12, path_, "metadata '" + key + "'"};
  for (uint64_t i = 0; i < v.count; ++i) {
    const uint64_t n = c.read<uint64_t>("string length");
    c.need(n, "string value");
    if (std::string_view(reinterpret_cast<const char*>(c.data + c.pos), n) == s) return i;
    c.pos += n;
  }
  return std::nullopt;
}

uint64_t GgufFile::get_array_size(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array) type_error(path_, key, v, "an array");
  return v.count;
}

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}
int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

}  // namespace xdna

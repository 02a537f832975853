#include "weights/baked.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include "core/sha256.h"

namespace xdna {

using nlohmann::json;

namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t load_u64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Header field offsets.
constexpr size_t kOffVersion = 8, kOffHeaderBytes = 12, kOffManifestOffset = 16,
                 kOffManifestBytes = 24, kOffDataOffset = 32, kOffDataBytes = 40;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reading

BakedModel::BakedModel(const std::string& path)
    : path_(path), buf_(std::make_shared<MappedFile>(path)) {
  parse();
}

BakedModel::BakedModel(std::shared_ptr<Buffer> bytes, const std::string& name)
    : path_(name), buf_(std::move(bytes)) {
  parse();
}

void BakedModel::parse() {
  auto fail = [&](const std::string& what) -> void {
    throw std::runtime_error(path_ + ": " + what);
  };
  const uint64_t size = buf_->size();
  const std::byte* p = buf_->data();
  if (size < kBakedHeaderBytes)
    fail("file is " + std::to_string(size) + " bytes, too small for the 64-byte baked header");
  if (std::memcmp(p, kBakedMagic, 8) != 0) fail("not a baked model (bad magic)");
  uint32_t version, header_bytes;
  std::memcpy(&version, p + kOffVersion, 4);
  std::memcpy(&header_bytes, p + kOffHeaderBytes, 4);
  if (version != kBakedVersion)
    fail("baked format version " + std::to_string(version) + " is not supported (this build "
         "reads version " + std::to_string(kBakedVersion) + "; re-bake the checkpoint)");
  if (header_bytes != kBakedHeaderBytes)
    fail("header size " + std::to_string(header_bytes) + " is not 64");
  const uint64_t man_off = load_u64(p + kOffManifestOffset);
  const uint64_t man_bytes = load_u64(p + kOffManifestBytes);
  data_offset_ = load_u64(p + kOffDataOffset);
  const uint64_t data_bytes = load_u64(p + kOffDataBytes);
  if (man_off < kBakedHeaderBytes || man_off > size || man_bytes > size - man_off)
    fail("manifest [" + std::to_string(man_off) + ", +" + std::to_string(man_bytes) +
         ") exceeds the file (" + std::to_string(size) + " bytes; truncated?)");
  if (data_offset_ % kBakedTensorAlign != 0 || data_offset_ < man_off + man_bytes)
    fail("data offset " + std::to_string(data_offset_) +
         " is not a multiple of 4096 after the manifest");
  if (data_offset_ > size || data_bytes > size - data_offset_)
    fail("data region [" + std::to_string(data_offset_) + ", +" + std::to_string(data_bytes) +
         ") exceeds the file (" + std::to_string(size) + " bytes; truncated?)");

  const char* m = reinterpret_cast<const char*>(p + man_off);
  try {
    manifest_ = json::parse(m, m + man_bytes);
  } catch (const json::parse_error& e) {
    fail(std::string("manifest does not parse: ") + e.what());
  }
  if (!manifest_.is_object() || !manifest_.contains("tensors") || !manifest_["tensors"].is_array())
    fail("manifest has no 'tensors' list");
  if (manifest_.contains("files") && !manifest_["files"].is_array())
    fail("manifest 'files' is not a list");

  // Checks a [offset, offset + bytes) entry against the data region; returns its bounds.
  auto span_of = [&](const json& e, const std::string& what) {
    if (!e.contains("offset") || !e["offset"].is_number_unsigned() || !e.contains("bytes") ||
        !e["bytes"].is_number_unsigned())
      fail(what + ": missing unsigned 'offset' / 'bytes'");
    const uint64_t off = e["offset"].get<uint64_t>(), n = e["bytes"].get<uint64_t>();
    if (off > data_bytes || n > data_bytes - off)
      fail(what + ": bytes [" + std::to_string(off) + ", +" + std::to_string(n) +
           ") exceed the data region (" + std::to_string(data_bytes) + " bytes)");
    return std::pair<uint64_t, uint64_t>{off, off + n};
  };

  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  std::set<std::string> names;
  for (const json& e : manifest_["tensors"]) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string())
      fail("manifest tensor entry without a name");
    TensorInfo info;
    info.name = e["name"].get<std::string>();
    const std::string what = "tensor '" + info.name + "'";
    if (!names.insert(info.name).second) fail(what + " is listed twice");
    if (!e.contains("dtype") || !e["dtype"].is_string()) fail(what + ": missing 'dtype'");
    info.file_dtype = e["dtype"].get<std::string>();
    info.dtype = dtype_from_name(info.file_dtype);
    if (!info.dtype) fail(what + ": unknown dtype '" + info.file_dtype + "'");
    if (!e.contains("shape") || !e["shape"].is_array()) fail(what + ": missing 'shape'");
    int64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 48))
        fail(what + ": bad shape " + e["shape"].dump());
      const int64_t n = d.get<int64_t>();
      if (n && numel > std::numeric_limits<int64_t>::max() / 16 / n)
        fail(what + ": shape " + e["shape"].dump() + " is absurdly large");
      numel *= n;
      info.shape.push_back(n);
    }
    if (!info.shape.empty() && info.shape.back() % traits(*info.dtype).block_elems != 0)
      fail(what + ": rows of " + std::to_string(info.shape.back()) + " are not whole " +
           info.file_dtype + " blocks");
    const auto [begin, end] = span_of(e, what);
    const uint64_t want = static_cast<uint64_t>(dtype_bytes(*info.dtype, numel));
    if (end - begin != want)
      fail(what + ": shape " + shape_str(info.shape) + " of " + info.file_dtype + " needs " +
           std::to_string(want) + " bytes, manifest says " + std::to_string(end - begin));
    if (begin % kBakedFileAlign != 0) fail(what + ": offset is not 64-byte aligned");
    if (begin != end) spans.push_back({begin, end, info.name});
    info.file = path_;
    info.offset = data_offset_ + begin;
    info.bytes = end - begin;
    scales_of_.push_back(e.contains("scales") && e["scales"].is_string()
                             ? e["scales"].get<std::string>() : "");
    group_of_.push_back(e.contains("group") && e["group"].is_number_unsigned()
                            ? e["group"].get<int64_t>() : 0);
    infos_.push_back(std::move(info));
  }
  // Scales: an f32 tensor with one value per group.
  for (size_t i = 0; i < infos_.size(); ++i) {
    if (scales_of_[i].empty()) continue;
    const TensorInfo& t = infos_[i];
    const TensorInfo* s = find(scales_of_[i]);
    const std::string what = "tensor '" + t.name + "'";
    if (!s) fail(what + ": scales tensor '" + scales_of_[i] + "' is missing");
    const int64_t g = group_of_[i];
    if (t.shape.empty() || g <= 0 || t.shape.back() % g != 0)
      fail(what + ": group " + std::to_string(g) + " does not divide rows of " +
           shape_str(t.shape));
    if (s->dtype != DType::F32 || shape_numel(s->shape) != shape_numel(t.shape) / g)
      fail(what + ": scales '" + s->name + "' must be f32 with one value per group of " +
           std::to_string(g));
  }
  if (manifest_.contains("files"))
    for (const json& f : manifest_["files"]) {
      if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
        fail("manifest file entry without a name");
      const auto [begin, end] = span_of(f, "file '" + f["name"].get<std::string>() + "'");
      if (begin != end) spans.push_back({begin, end, f["name"].get<std::string>()});
    }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      fail("'" + spans[i - 1].name + "' and '" + spans[i].name + "' overlap in the data region");
}

Tensor BakedModel::get(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i) {
    const TensorInfo& t = infos_[i];
    if (t.name != name) continue;
    Tensor v = Tensor::view(buf_, t.offset, t.shape, *t.dtype);
    if (!scales_of_[i].empty()) v.set_scales(get(scales_of_[i]), group_of_[i]);
    return v;
  }
  throw std::runtime_error(path_ + ": no tensor named '" + name + "'");
}

json BakedModel::metadata() const {
  json out = manifest_;
  out.erase("tensors");
  out.erase("files");
  return out;
}

const json& BakedModel::config() const {
  static const json null_json;
  auto it = manifest_.find("config");
  return it == manifest_.end() ? null_json : *it;
}

std::vector<std::string> BakedModel::file_names() const {
  std::vector<std::string> out;
  if (manifest_.contains("files"))
    for (const json& f : manifest_["files"]) out.push_back(f["name"].get<std::string>());
  return out;
}

bool BakedModel::has_file(const std::string& name) const {
  const auto names = file_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string_view BakedModel::file(const std::string& name) const {
  if (manifest_.contains("files"))
    for (const json& f : manifest_["files"])
      if (f["name"] == name)
        return {reinterpret_cast<const char*>(buf_->data() + data_offset_ +
                                              f["offset"].get<uint64_t>()),
                f["bytes"].get<size_t>()};
  throw std::runtime_error(path_ + ": no embedded file named '" + name + "'");
}

// ---------------------------------------------------------------------------------------------
// Writing

BakedWriter::BakedWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  manifest_ = {{"format", "xdna-baked"}, {"tensors", json::array()}, {"files", json::array()}};
}

BakedWriter::~BakedWriter() {
  if (f_) std::fclose(f_);
  if (!finished_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void BakedWriter::add_tensor(json entry) {
  if (f_) throw std::logic_error("BakedWriter: add_tensor after begin");
  const auto dt = dtype_from_name(entry.at("dtype").get<std::string>());
  if (!dt) throw std::invalid_argument("BakedWriter: unknown dtype " + entry["dtype"].dump());
  entry["bytes"] = dtype_bytes(*dt, shape_numel(entry.at("shape").get<Shape>()));
  manifest_["tensors"].push_back(std::move(entry));
}

void BakedWriter::add_file(const std::string& name, std::string bytes) {
  if (f_) throw std::logic_error("BakedWriter: add_file after begin");
  files_.emplace_back(name, std::move(bytes));
}

void BakedWriter::set(const std::string& key, json value) { manifest_[key] = std::move(value); }

void BakedWriter::put(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, f_) != n)
    throw std::runtime_error(tmp_ + ": write failed (disk full?)");
}

void BakedWriter::pad_to(uint64_t pos) {
  static const char zeros[4096] = {};
  while (data_pos_ < pos) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(pos - data_pos_, sizeof zeros));
    put(zeros, n);
    data_pos_ += n;
  }
}

void BakedWriter::begin() {
  // Plan the data region: embedded files first (small), then tensors, each page-aligned.
  uint64_t pos = 0;
  for (const auto& [name, bytes] : files_) {
    pos = align_up(pos, kBakedFileAlign);
    manifest_["files"].push_back({{"name", name},
                                  {"offset", pos},
                                  {"bytes", bytes.size()},
                                  {"sha256", sha256_hex(bytes.data(), bytes.size())}});
    pos += bytes.size();
  }
  for (json& t : manifest_["tensors"]) {
    pos = align_up(pos, kBakedTensorAlign);
    t["offset"] = pos;
    pos += t["bytes"].get<uint64_t>();
  }
  data_end_ = pos;
  const std::string man = manifest_.dump(-1, ' ', false, json::error_handler_t::replace);
  const uint64_t data_offset = align_up(kBakedHeaderBytes + man.size(), kBakedTensorAlign);

  std::byte header[kBakedHeaderBytes] = {};
  std::memcpy(header, kBakedMagic, 8);
  const uint32_t version = kBakedVersion, header_bytes = kBakedHeaderBytes;
  const uint64_t fields[4] = {kBakedHeaderBytes, man.size(), data_offset, data_end_};
  std::memcpy(header + kOffVersion, &version, 4);
  std::memcpy(header + kOffHeaderBytes, &header_bytes, 4);
  std::memcpy(header + kOffManifestOffset, fields, sizeof fields);

  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw std::runtime_error(tmp_ + ": cannot create: " + std::strerror(errno));
  put(header, sizeof header);
  put(man.data(), man.size());
  static const char zeros[kBakedTensorAlign] = {};
  put(zeros, data_offset - kBakedHeaderBytes - man.size());
  for (size_t i = 0; i < files_.size(); ++i) {
    pad_to(manifest_["files"][i]["offset"].get<uint64_t>());
    put(files_[i].second.data(), files_[i].second.size());
    data_pos_ += files_[i].second.size();
  }
  current_ = 0;
  current_done_ = 0;
}

void BakedWriter::write(const void* data, size_t n) {
  const auto& tensors = manifest_["tensors"];
  const auto* bytes = static_cast<const char*>(data);
  while (n > 0) {
    if (current_ >= tensors.size()) throw std::logic_error("BakedWriter: more bytes than tensors");
    const json& t = tensors[current_];
    if (current_done_ == 0) pad_to(t["offset"].get<uint64_t>());
    const uint64_t room = t["bytes"].get<uint64_t>() - current_done_;
    const size_t k = static_cast<size_t>(std::min<uint64_t>(room, n));
    put(bytes, k);
    data_pos_ += k;
    current_done_ += k;
    bytes += k;
    n -= k;
    if (current_done_ == t["bytes"].get<uint64_t>()) {
      ++current_;
      current_done_ = 0;
    }
  }
  // Skip past empty tensors so finish() sees them as written.
  while (current_ < tensors.size() && current_done_ == 0 && tensors[current_]["bytes"] == 0)
    ++current_;
}

void BakedWriter::finish() {
  const auto& tensors = manifest_["tensors"];
  while (current_ < tensors.size() && tensors[current_]["bytes"] == 0) ++current_;
  if (current_ != tensors.size())
    throw std::logic_error("BakedWriter: tensor '" + tensors[current_]["name"].get<std::string>() +
                           "' was not fully written");
  pad_to(data_end_);
  if (std::fclose(f_) != 0) {
    f_ = nullptr;
    throw std::runtime_error(tmp_ + ": write failed (disk full?)");
  }
  f_ = nullptr;
  std::filesystem::rename(tmp_, path_);
  finished_ = true;
}

}  // namespace xdna

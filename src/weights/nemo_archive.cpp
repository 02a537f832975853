#include "weights/nemo_archive.h"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

namespace xdna {

namespace {

constexpr uint64_t kBlock = 512;
// A gzip archive is inflated into memory: bound what a hostile stream can make us allocate.
constexpr uint64_t kMaxInflated = uint64_t{1} << 40;

bool is_gzip(const std::byte* d, uint64_t n) {
  return n >= 2 && std::to_integer<uint8_t>(d[0]) == 0x1f && std::to_integer<uint8_t>(d[1]) == 0x8b;
}

std::shared_ptr<Buffer> inflate_gzip(const std::byte* d, uint64_t n, const std::string& where) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error(where + ": zlib inflateInit2 failed");
  std::vector<std::byte> out(std::max<uint64_t>(n * 4, 1 << 16));
  uint64_t in_at = 0, out_at = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (out_at == out.size()) {
      if (out.size() >= kMaxInflated) {
        inflateEnd(&zs);
        throw std::invalid_argument(where + ": gzip stream inflates past 1 TiB");
      }
      out.resize(out.size() * 2);
    }
    const uint64_t in_chunk = std::min<uint64_t>(n - in_at, 1u << 30);
    const uint64_t out_chunk = std::min<uint64_t>(out.size() - out_at, 1u << 30);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(d + in_at));
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + out_at);
    zs.avail_out = static_cast<uInt>(out_chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    in_at += in_chunk - zs.avail_in;
    out_at += out_chunk - zs.avail_out;
    if (rc == Z_BUF_ERROR && in_at == n) rc = Z_DATA_ERROR;  // needs input that is not there
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      const std::string msg = zs.msg ? zs.msg : "corrupt or truncated";
      inflateEnd(&zs);
      throw std::invalid_argument(where + ": gzip: " + msg + (in_at == n ? " (truncated?)" : ""));
    }
  }
  inflateEnd(&zs);
  auto buf = std::make_shared<HeapBuffer>(out_at ? out_at : 1);
  std::memcpy(buf->data(), out.data(), out_at);
  return std::make_shared<BufferSlice>(buf, 0, out_at);
}

// Numeric header fields: octal text (NUL/space padded) or GNU base-256 (high bit of first byte).
uint64_t header_number(const std::byte* f, size_t len, const std::string& what) {
  const auto* p = reinterpret_cast<const uint8_t*>(f);
  if (p[0] & 0x80) {
    if (p[0] != 0x80) throw std::invalid_argument(what + " is negative or too large (base-256)");
    uint64_t v = 0;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 55) throw std::invalid_argument(what + " is too large (base-256)");
      v = (v << 8) | p[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < len && p[i] == ' ') ++i;
  uint64_t v = 0;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) throw std::invalid_argument(what + " is too large");
    v = v * 8 + (p[i] - '0');
  }
  for (; i < len; ++i)
    if (p[i] != ' ' && p[i] != 0) throw std::invalid_argument(what + " is not an octal number");
  return v;
}

std::string field(const std::byte* f, size_t len) {
  const char* c = reinterpret_cast<const char*>(f);
  return std::string(c, strnlen(c, len));
}

std::string clean_name(std::string s) {
  while (s.starts_with("./")) s.erase(0, 2);
  return s;
}

}  // namespace

BufferSlice::BufferSlice(std::shared_ptr<Buffer> parent, uint64_t offset, uint64_t size)
    : parent_(std::move(parent)), offset_(offset), size_(size) {
  if (offset > parent_->size() || size > parent_->size() - offset)
    throw std::invalid_argument("BufferSlice: [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                ") is outside a buffer of " + std::to_string(parent_->size()) + " bytes");
}

TarArchive::TarArchive(const std::string& path) : name_(path), bytes_(std::make_shared<MappedFile>(path)) {
  parse();
}

TarArchive::TarArchive(std::shared_ptr<Buffer> bytes, const std::string& name)
    : name_(name), bytes_(std::move(bytes)) {
  parse();
}

void TarArchive::parse() {
  if (is_gzip(bytes_->data(), bytes_->size())) {
    bytes_ = inflate_gzip(bytes_->data(), bytes_->size(), name_);
    gzipped_ = true;
  }
  const std::byte* d = bytes_->data();
  const uint64_t n = bytes_->size();
  std::string long_name;        // from a GNU 'L' record or a pax "path", for the next member
  int64_t pax_size = -1;        // from a pax "size", for the next member
  uint64_t at = 0;
  bool ended = false;
  while (n - at >= kBlock) {
    const std::byte* h = d + at;
    bool zero = true;
    for (uint64_t i = 0; i < kBlock && zero; ++i) zero = h[i] == std::byte{0};
    if (zero) {
      ended = true;
      break;
    }
    const std::string where = name_ + ": tar header at offset " + std::to_string(at);
    // Checksum: the header's bytes summed with the checksum field read as spaces.
    uint64_t sum = 0;
    for (uint64_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : std::to_integer<uint8_t>(h[i]);
    bool checksum_ok = false;
    try {
      checksum_ok = header_number(h + 148, 8, "checksum") == sum;
    } catch (const std::invalid_argument&) {  // not even a number
    }
    if (!checksum_ok) throw std::invalid_argument(where + ": bad checksum (not a tar archive, or corrupt)");
    const char type = static_cast<char>(h[156]);
    std::string name = field(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != std::byte{0})  // ustar prefix
      name = field(h + 345, 155) + "/" + name;
    if (!long_name.empty()) name = long_name;
    name = clean_name(name);
    uint64_t size = header_number(h + 124, 12, where + ": size of " + name);
    if (pax_size >= 0) size = static_cast<uint64_t>(pax_size);
    const uint64_t data = at + kBlock;
    if (size > n - data)
      throw std::invalid_argument(name_ + ": member " + name + " (" + std::to_string(size) +
                                  " bytes at offset " + std::to_string(data) +
                                  ") runs past the end of the archive (" + std::to_string(n) + " bytes; truncated?)");
    const uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;
    if (type == 'L' || type == 'x') {  // applies to the next header only
      const std::string text(reinterpret_cast<const char*>(d + data), size);
      if (type == 'L') {
        long_name = std::string(text.c_str());
      } else {  // pax records: "<len> <key>=<value>\n", len counting the whole record
        for (size_t r = 0; r < text.size();) {
          const size_t space = text.find(' ', r);
          if (space == std::string::npos) throw std::invalid_argument(where + ": malformed pax record");
          size_t len = 0;
          for (size_t i = r; i < space; ++i) {
            if (text[i] < '0' || text[i] > '9' || len > text.size())
              throw std::invalid_argument(where + ": malformed pax record length");
            len = len * 10 + (text[i] - '0');
          }
          if (len <= space - r + 1 || len > text.size() - r || text[r + len - 1] != '\n')
            throw std::invalid_argument(where + ": pax record runs past its header");
          const std::string kv = text.substr(space + 1, r + len - 1 - (space + 1));
          const size_t eq = kv.find('=');
          if (eq == std::string::npos) throw std::invalid_argument(where + ": pax record without '='");
          const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
          if (key == "path") long_name = value;
          if (key == "size") {
            if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos)
              throw std::invalid_argument(where + ": pax size '" + value + "' is not a number");
            pax_size = std::stoll(value);
          }
          r += len;
        }
      }
    } else {
      if (type == '0' || type == '\0' || type == '7') {  // regular file (7: contiguous)
        TarMember m{name, data, size};
        if (m.name.empty()) throw std::invalid_argument(where + ": regular file without a name");
        if (find(m.name)) throw std::invalid_argument(name_ + ": member " + m.name + " appears twice");
        members_.push_back(std::move(m));
      }
      long_name.clear();
      pax_size = -1;
    }
    if (padded > n - data) {  // the last member's padding may be cut off only if nothing follows
      at = n;
      break;
    }
    at = data + padded;
  }
  if (!ended)
    throw std::invalid_argument(name_ + ": tar archive ends at offset " + std::to_string(at) +
                                " without its end-of-archive block (truncated?)");
}

const TarMember* TarArchive::find(const std::string& member) const {
  const std::string want = clean_name(member);
  for (const TarMember& m : members_)
    if (m.name == want) return &m;
  return nullptr;
}

const TarMember* TarArchive::find_suffix(const std::string& suffix) const {
  const TarMember* hit = nullptr;
  for (const TarMember& m : members_) {
    const std::string base = m.name.substr(m.name.rfind('/') + 1);
    if (!base.ends_with(suffix)) continue;
    if (hit) throw std::invalid_argument(name_ + ": several members end with " + suffix + " (" + hit->name + ", " + m.name + ")");
    hit = &m;
  }
  return hit;
}

std::string TarArchive::read(const TarMember& m) const {
  return std::string(reinterpret_cast<const char*>(bytes_->data() + m.offset), m.size);
}

std::shared_ptr<Buffer> TarArchive::slice(const TarMember& m) const {
  return std::make_shared<BufferSlice>(bytes_, m.offset, m.size);
}

bool looks_like_tar(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char h[512] = {};
  in.read(h, sizeof h);
  if (in.gcount() >= 2 && static_cast<uint8_t>(h[0]) == 0x1f && static_cast<uint8_t>(h[1]) == 0x8b) return true;
  return in.gcount() == 512 && std::memcmp(h + 257, "ustar", 5) == 0;
}

}  // namespace xdna

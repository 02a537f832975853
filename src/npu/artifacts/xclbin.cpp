// xclbin (AXLF) parser. Every read goes through a bounds check against the file or the section
// it belongs to, in 64-bit arithmetic that cannot overflow (offsets and sizes are compared by
// subtraction), so any byte string either parses or throws std::invalid_argument naming the
// section and field. Layout: xclbin_layout.h.
#include "npu/artifacts/xclbin.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <stdexcept>

#include "npu/artifacts/xclbin_layout.h"

namespace xdna::npu::xclbin {
namespace {

static_assert(std::endian::native == std::endian::little, "AXLF is little-endian; reads are memcpy");

using std::to_string;

// Longest string the partition's string offsets may name: real names are short, and a cap keeps
// many entries pointing at one long run of bytes from multiplying memory.
constexpr size_t kMaxString = 1024;

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("xclbin: " + what); }

std::string kind_name(uint32_t kind) {
  switch (kind) {
    case 2: return "EMBEDDED_METADATA";
    case 6: return "MEM_TOPOLOGY";
    case 7: return "CONNECTIVITY";
    case 8: return "IP_LAYOUT";
    case 9: return "DEBUG_IP_LAYOUT";
    case 11: return "CLOCK_FREQ_TOPOLOGY";
    case 14: return "BUILD_METADATA";
    case 18: return "PDI";
    case 25: return "AIE_METADATA";
    case 26: return "ASK_GROUP_TOPOLOGY";
    case 27: return "ASK_GROUP_CONNECTIVITY";
    case 32: return "AIE_PARTITION";
    default: return "section kind " + to_string(kind);
  }
}

std::string fixed_string(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

// Whether [offset, offset + size) lies inside [0, limit), without overflow.
bool fits(uint64_t offset, uint64_t size, uint64_t limit) { return offset <= limit && size <= limit - offset; }

template <class T>
T load_at(std::span<const uint8_t> bytes, uint64_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

// The bytes of one section, read with checks whose errors name the section and field. `budget`
// is what the section's arrays may still materialise: in a well-formed file they are disjoint
// parts of the section, so together they never exceed its size; aliased arrays would.
struct SectionReader {
  std::span<const uint8_t> bytes;
  std::string name;
  uint64_t budget = 0;

  std::string past(const std::string& field, uint64_t offset, uint64_t size) const {
    return name + ": " + field + " offset " + to_string(offset) + "+" + to_string(size) +
           " runs past the section (" + to_string(bytes.size()) + " bytes)";
  }

  template <class T>
  T read(uint64_t offset, const std::string& field) const {
    if (!fits(offset, sizeof(T), bytes.size())) fail(past(field, offset, sizeof(T)));
    return load_at<T>(bytes, offset);
  }

  // `a.size` elements of `elem` bytes at `a.offset`: the span they occupy.
  std::span<const uint8_t> array(layout::ArrayOffset a, uint64_t elem, const std::string& field) {
    const uint64_t total = uint64_t(a.size) * elem;  // < 2^32 * 2^7: no overflow
    if (!fits(a.offset, total, bytes.size())) fail(past(field, a.offset, total));
    if (total > budget)
      fail(name + ": " + field + " (" + to_string(total) +
           " bytes) overlaps other arrays: together they exceed the section (" + to_string(bytes.size()) +
           " bytes)");
    budget -= total;
    return bytes.subspan(a.offset, total);
  }

  template <class T>
  std::vector<T> values(layout::ArrayOffset a, const std::string& field) {
    const std::span<const uint8_t> s = array(a, sizeof(T), field);
    std::vector<T> out(a.size);
    if (!out.empty()) std::memcpy(out.data(), s.data(), s.size());
    return out;
  }

  // A NUL-terminated string at `offset`.
  std::string string(uint32_t offset, const std::string& field) const {
    if (offset >= bytes.size())
      fail(name + ": " + field + " offset " + to_string(offset) + " is past the section (" +
           to_string(bytes.size()) + " bytes)");
    const auto begin = reinterpret_cast<const char*>(bytes.data()) + offset;
    const size_t room = std::min<size_t>(bytes.size() - offset, kMaxString + 1);
    const size_t n = strnlen(begin, room);
    if (n == room) {
      if (n > kMaxString) fail(name + ": " + field + " at " + to_string(offset) + " is longer than " +
                               to_string(kMaxString) + " bytes");
      fail(name + ": " + field + " at " + to_string(offset) + " is not NUL-terminated inside the section");
    }
    return std::string(begin, n);
  }
};

std::vector<Ip> parse_ip_layout(SectionReader r) {
  const int32_t count = r.read<int32_t>(0, "m_count");
  if (count < 0) fail("IP_LAYOUT: m_count " + to_string(count) + " is negative");
  const uint64_t need = layout::kIpLayoutData + uint64_t(count) * sizeof(layout::IpData);
  if (count > 0 && need > r.bytes.size())
    fail("IP_LAYOUT: m_count " + to_string(count) + " entries need " + to_string(need) +
         " bytes, the section has " + to_string(r.bytes.size()));
  std::vector<Ip> ips;
  ips.reserve(size_t(count));
  for (int32_t i = 0; i < count; ++i) {
    const auto d = load_at<layout::IpData>(r.bytes, layout::kIpLayoutData + uint64_t(i) * sizeof(layout::IpData));
    const std::string what = "IP_LAYOUT: ip " + to_string(i);
    if (strnlen(d.name, sizeof d.name) == sizeof d.name) fail(what + " m_name is not NUL-terminated in 64 bytes");
    Ip ip{fixed_string(d.name, sizeof d.name), d.type, d.base_address, d.properties};
    if (ip.name.empty()) fail(what + " has an empty m_name");
    ips.push_back(std::move(ip));
  }
  return ips;
}

CdoGroup parse_cdo_group(SectionReader& r, const layout::CdoGroup& g, const std::string& what) {
  CdoGroup out;
  out.name = r.string(g.name, what + " name");
  out.type = g.type;
  out.pdi_id = g.pdi_id;
  out.kernel_ids = r.values<uint64_t>(g.kernel_ids, what + " dpu_kernel_ids");
  out.pre_cdo_groups = r.values<uint32_t>(g.pre_cdo_groups, what + " pre_cdo_groups");
  return out;
}

AiePartition parse_aie_partition(SectionReader r) {
  const auto p = r.read<layout::AiePartition>(0, "aie_partition header");
  AiePartition out;
  out.name = r.string(p.name, "name");
  out.column_width = p.info.column_width;
  out.operations_per_cycle = p.operations_per_cycle;
  out.inference_fingerprint = p.inference_fingerprint;
  out.pre_post_fingerprint = p.pre_post_fingerprint;
  out.start_columns = r.values<uint16_t>(p.info.start_columns, "start_columns");
  const std::span<const uint8_t> pdis = r.array(p.pdis, sizeof(layout::AiePdi), "pdi array");
  for (uint32_t i = 0; i < p.pdis.size; ++i) {
    const auto d = load_at<layout::AiePdi>(pdis, uint64_t(i) * sizeof(layout::AiePdi));
    const std::string what = "pdi " + to_string(i);
    if (d.image.size > layout::kMaxPdiImage)
      fail("AIE_PARTITION: " + what + " image size " + to_string(d.image.size) + " exceeds the limit " +
           to_string(layout::kMaxPdiImage));
    Pdi pdi;
    std::copy(std::begin(d.uuid), std::end(d.uuid), pdi.uuid.begin());
    pdi.image = r.values<uint8_t>(d.image, what + " image");
    const std::span<const uint8_t> groups = r.array(d.cdo_groups, sizeof(layout::CdoGroup), what + " cdo_groups");
    for (uint32_t j = 0; j < d.cdo_groups.size; ++j)
      pdi.cdo_groups.push_back(parse_cdo_group(r, load_at<layout::CdoGroup>(groups, uint64_t(j) * sizeof(layout::CdoGroup)),
                                               what + " cdo_group " + to_string(j)));
    out.pdis.push_back(std::move(pdi));
  }
  return out;
}

}  // namespace

const Section* Xclbin::find(SectionKind kind) const {
  for (const Section& s : sections)
    if (s.kind == uint32_t(kind)) return &s;
  return nullptr;
}

const Pdi* Xclbin::pdi_for_kernel(uint64_t kernel_id) const {
  if (!partition) return nullptr;
  for (const Pdi& pdi : partition->pdis)
    for (const CdoGroup& g : pdi.cdo_groups)
      if (std::find(g.kernel_ids.begin(), g.kernel_ids.end(), kernel_id) != g.kernel_ids.end()) return &pdi;
  return nullptr;
}

Xclbin parse(std::span<const uint8_t> bytes) {
  using layout::Axlf;
  if (bytes.size() < sizeof(Axlf))
    fail("truncated header: the file is " + to_string(bytes.size()) + " bytes, the AXLF header needs " +
         to_string(sizeof(Axlf)));
  const auto top = load_at<Axlf>(bytes, 0);
  if (std::memcmp(top.magic, layout::kMagic, sizeof top.magic) != 0) {
    std::string shown;
    for (char c : top.magic) shown += (c >= 0x20 && c < 0x7f) ? c : '.';
    fail("bad magic \"" + shown + "\" (expected \"xclbin2\\0\")");
  }
  const layout::Header& h = top.header;
  if (h.num_sections > layout::kMaxSections)
    fail("num_sections " + to_string(h.num_sections) + " exceeds the limit " + to_string(layout::kMaxSections));
  const uint64_t table_end = layout::kSectionTable + uint64_t(h.num_sections) * sizeof(layout::SectionHeader);
  if (h.length > bytes.size())
    fail("truncated file: header m_length is " + to_string(h.length) + " bytes, the file has " +
         to_string(bytes.size()));
  if (table_end > h.length)
    fail("num_sections " + to_string(h.num_sections) + ": the section table ends at " + to_string(table_end) +
         ", past m_length " + to_string(h.length));

  Xclbin x;
  std::copy(std::begin(h.uuid), std::end(h.uuid), x.uuid.begin());
  x.timestamp = h.timestamp;
  for (uint32_t i = 0; i < h.num_sections; ++i) {
    const auto s = load_at<layout::SectionHeader>(bytes, layout::kSectionTable + uint64_t(i) * sizeof(layout::SectionHeader));
    Section sec{s.kind, fixed_string(s.name, sizeof s.name), s.offset, s.size};
    const std::string what = "section " + to_string(i) + " (" + kind_name(s.kind) + ")";
    if (!fits(s.offset, s.size, h.length))
      fail(what + " offset " + to_string(s.offset) + "+" + to_string(s.size) + " runs past the end of the file (" +
           to_string(h.length) + " bytes)");
    if (s.size > 0 && s.offset < table_end)
      fail(what + " offset " + to_string(s.offset) + " overlaps the header and section table (" +
           to_string(table_end) + " bytes)");
    x.sections.push_back(std::move(sec));
  }
  // Sections must not share bytes: sorted by offset, each ends before the next begins.
  std::vector<size_t> order(x.sections.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x.sections[a].offset < x.sections[b].offset; });
  const Section* prev = nullptr;
  size_t prev_index = 0;
  for (size_t i : order) {
    const Section& s = x.sections[i];
    if (s.size == 0) continue;
    if (prev && prev->offset + prev->size > s.offset)
      fail("sections " + to_string(prev_index) + " (" + kind_name(prev->kind) + ") and " + to_string(i) + " (" +
           kind_name(s.kind) + ") overlap");
    prev = &s;
    prev_index = i;
  }

  auto reader = [&](const Section& s) {
    return SectionReader{bytes.subspan(s.offset, s.size), kind_name(s.kind), s.size};
  };
  if (const Section* s = x.find(SectionKind::EmbeddedMetadata)) {
    const auto b = bytes.subspan(s->offset, s->size);
    x.metadata_xml.assign(b.begin(), b.end());
  }
  if (const Section* s = x.find(SectionKind::IpLayout)) x.ips = parse_ip_layout(reader(*s));
  if (const Section* s = x.find(SectionKind::AiePartition)) x.partition = parse_aie_partition(reader(*s));
  return x;
}

Xclbin load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("xclbin: cannot open " + path + ": " + std::strerror(errno));
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::invalid_argument("xclbin: error reading " + path);
  try {
    return parse(bytes);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    const std::string prefix = "xclbin: ";
    throw std::invalid_argument(prefix + path + ": " + (msg.rfind(prefix, 0) == 0 ? msg.substr(prefix.size()) : msg));
  }
}

}  // namespace xdna::npu::xclbin

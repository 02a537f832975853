// xclbin (AXLF) writer: the header, the section table and the sections the runtime reads, each
// section 8-byte aligned as XRT's xclbin.h asks. Layout: xclbin_layout.h.
#include <cstring>
#include <limits>
#include <stdexcept>

#include "npu/artifacts/xclbin.h"
#include "npu/artifacts/xclbin_layout.h"

namespace xdna::npu::xclbin {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("xclbin write: " + what); }

// A growing byte buffer; offsets are returned so structures can be patched in once the arrays
// they point at have been placed.
struct Out {
  std::vector<uint8_t> b;
  void align() { b.insert(b.end(), (8 - b.size() % 8) % 8, uint8_t(0)); }
  uint64_t put(const void* p, size_t n) {
    const uint64_t at = b.size();
    const auto* bytes = static_cast<const uint8_t*>(p);
    b.insert(b.end(), bytes, bytes + n);
    return at;
  }
  uint64_t reserve(size_t n) {
    const uint64_t at = b.size();
    b.insert(b.end(), n, uint8_t(0));
    return at;
  }
  template <class T>
  void patch(uint64_t at, const T& v) {
    std::memcpy(b.data() + at, &v, sizeof v);
  }
};

// Strings are stored NUL-terminated and read back to the first NUL, so a NUL inside one (or a
// length past the parser's cap) would not survive the round trip.
void check_string(const std::string& s, const std::string& what) {
  if (s.find('\0') != std::string::npos) fail(what + " contains a NUL byte");
  if (s.size() > 1024) fail(what + " is longer than 1024 bytes");
}

// Places `n` elements of `elem` bytes (8-byte aligned) and returns their array_offset; an empty
// array is {0, 0}.
layout::ArrayOffset put_array(Out& o, const void* p, size_t n, size_t elem) {
  if (n == 0) return {0, 0};
  if (n > std::numeric_limits<uint32_t>::max()) fail("an array has more than 2^32 elements");
  o.align();
  return {uint32_t(n), uint32_t(o.put(p, n * elem))};  // offsets are checked to fit at the end
}

std::vector<uint8_t> ip_layout_section(const std::vector<Ip>& ips) {
  Out o;
  const int32_t count = int32_t(ips.size());
  o.put(&count, sizeof count);
  o.align();
  for (size_t i = 0; i < ips.size(); ++i) {
    const Ip& ip = ips[i];
    if (ip.name.empty()) fail("ip " + std::to_string(i) + " has an empty name");
    if (ip.name.size() > 63 || ip.name.find('\0') != std::string::npos)
      fail("ip " + std::to_string(i) + " name \"" + ip.name + "\" does not fit m_name (63 bytes, no NUL)");
    layout::IpData d{};
    d.type = ip.type;
    d.properties = ip.properties;
    d.base_address = ip.base_address;
    std::memcpy(d.name, ip.name.data(), ip.name.size());
    o.put(&d, sizeof d);
  }
  return std::move(o.b);
}

std::vector<uint8_t> aie_partition_section(const AiePartition& p) {
  check_string(p.name, "partition name");
  if (p.column_width > std::numeric_limits<uint16_t>::max()) fail("column_width does not fit 16 bits");
  Out o;
  const uint64_t head = o.reserve(sizeof(layout::AiePartition));
  layout::AiePartition h{};
  h.operations_per_cycle = p.operations_per_cycle;
  h.inference_fingerprint = p.inference_fingerprint;
  h.pre_post_fingerprint = p.pre_post_fingerprint;
  h.info.column_width = uint16_t(p.column_width);
  h.name = uint32_t(o.put(p.name.c_str(), p.name.size() + 1));
  h.info.start_columns = put_array(o, p.start_columns.data(), p.start_columns.size(), sizeof(uint16_t));

  // The PDI table first, then each PDI's CDO groups, their arrays and strings, then the image.
  std::vector<layout::AiePdi> pdis(p.pdis.size());
  o.align();
  const uint64_t pdi_table = o.reserve(pdis.size() * sizeof(layout::AiePdi));
  h.pdis = {uint32_t(pdis.size()), pdis.empty() ? 0 : uint32_t(pdi_table)};
  for (size_t i = 0; i < p.pdis.size(); ++i) {
    const Pdi& pdi = p.pdis[i];
    if (pdi.image.size() > layout::kMaxPdiImage) fail("pdi " + std::to_string(i) + " image exceeds 128 MiB");
    layout::AiePdi& d = pdis[i];
    std::memcpy(d.uuid, pdi.uuid.data(), sizeof d.uuid);
    std::vector<layout::CdoGroup> groups(pdi.cdo_groups.size());
    o.align();
    const uint64_t group_table = o.reserve(groups.size() * sizeof(layout::CdoGroup));
    d.cdo_groups = {uint32_t(groups.size()), groups.empty() ? 0 : uint32_t(group_table)};
    for (size_t j = 0; j < groups.size(); ++j) {
      const CdoGroup& g = pdi.cdo_groups[j];
      check_string(g.name, "pdi " + std::to_string(i) + " cdo_group " + std::to_string(j) + " name");
      groups[j].name = uint32_t(o.put(g.name.c_str(), g.name.size() + 1));
      groups[j].type = g.type;
      groups[j].pdi_id = g.pdi_id;
      groups[j].kernel_ids = put_array(o, g.kernel_ids.data(), g.kernel_ids.size(), sizeof(uint64_t));
      groups[j].pre_cdo_groups = put_array(o, g.pre_cdo_groups.data(), g.pre_cdo_groups.size(), sizeof(uint32_t));
    }
    d.image = put_array(o, pdi.image.data(), pdi.image.size(), 1);
    for (size_t j = 0; j < groups.size(); ++j) o.patch(group_table + j * sizeof(layout::CdoGroup), groups[j]);
  }
  for (size_t i = 0; i < pdis.size(); ++i) o.patch(pdi_table + i * sizeof(layout::AiePdi), pdis[i]);
  o.patch(head, h);
  if (o.b.size() > std::numeric_limits<uint32_t>::max())
    fail("AIE_PARTITION would be " + std::to_string(o.b.size()) + " bytes; its offsets are 32-bit");
  return std::move(o.b);
}

}  // namespace

std::vector<uint8_t> write(const Xclbin& x) {
  struct Part {
    SectionKind kind;
    std::vector<uint8_t> data;
  };
  std::vector<Part> parts;
  if (!x.metadata_xml.empty())
    parts.push_back({SectionKind::EmbeddedMetadata, {x.metadata_xml.begin(), x.metadata_xml.end()}});
  if (!x.ips.empty()) parts.push_back({SectionKind::IpLayout, ip_layout_section(x.ips)});
  if (x.partition) parts.push_back({SectionKind::AiePartition, aie_partition_section(*x.partition)});

  Out o;
  layout::Axlf top{};
  std::memcpy(top.magic, layout::kMagic, sizeof top.magic);
  top.signature_length = -1;  // unsigned
  std::memset(top.reserved, 0xFF, sizeof top.reserved);
  std::memset(top.key_block, 0xFF, sizeof top.key_block);
  top.header.timestamp = x.timestamp;
  top.header.version_major = 2;  // the 2.1.0 the XRT header gives as its example
  top.header.version_minor = 1;
  std::memcpy(top.header.uuid, x.uuid.data(), sizeof top.header.uuid);
  top.header.num_sections = uint32_t(parts.size());
  o.reserve(sizeof top);

  std::vector<layout::SectionHeader> table(parts.size());
  o.reserve(table.size() * sizeof(layout::SectionHeader));
  for (size_t i = 0; i < parts.size(); ++i) {
    o.align();
    table[i].kind = uint32_t(parts[i].kind);
    table[i].offset = o.put(parts[i].data.data(), parts[i].data.size());
    table[i].size = parts[i].data.size();
  }
  o.align();
  top.header.length = o.b.size();
  o.patch(0, top);
  for (size_t i = 0; i < table.size(); ++i) o.patch(layout::kSectionTable + i * sizeof(layout::SectionHeader), table[i]);
  return std::move(o.b);
}

}  // namespace xdna::npu::xclbin

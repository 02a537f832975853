// xclbin (AXLF) container: the file the open toolchain (aiecc) writes for an NPU design. The
// parser bounds-checks every offset and size against the file and throws
// std::invalid_argument naming the section and field that is wrong; it never reads past the
// buffer (fuzzed: tests/fuzz/fuzz_xclbin.cpp). The writer builds the same layout, for tests and
// for packaging artifacts. Layout facts: XRT's xclbin.h (Apache-2.0), summarised in
// docs/npu-runtime.md.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace xdna::npu::xclbin {

// The section kinds the runtime reads (axlf_section_kind values).
enum class SectionKind : uint32_t {
  IpLayout = 8,
  EmbeddedMetadata = 2,
  AiePartition = 32,
};

// ip_data.m_type of an NPU compute unit (XRT IP_TYPE::IP_PS_KERNEL) and its ps_kernel subtype
// (PS_SUBTYPE::ST_DPU): the entries the XDNA shim turns into CUs.
inline constexpr uint32_t kIpPsKernel = 7;
inline constexpr uint32_t kSubtypeDpu = 1;

struct Section {
  uint32_t kind = 0;
  std::string name;
  uint64_t offset = 0, size = 0;
};

// A CDO group of a PDI: names the DPU kernel ids (Ip::kernel_id) whose CU loads this PDI.
struct CdoGroup {
  std::string name;
  uint8_t type = 0;                      // CDO_Type: 1 primary, 2 lite, 3 pre/post
  uint64_t pdi_id = 0;
  std::vector<uint64_t> kernel_ids;      // dpu_kernel_ids
  std::vector<uint32_t> pre_cdo_groups;  // ids of groups to load first
  bool operator==(const CdoGroup&) const = default;
};

// One PDI of the AIE partition: the array configuration the driver loads for a CU.
struct Pdi {
  std::array<uint8_t, 16> uuid{};
  std::vector<uint8_t> image;
  std::vector<CdoGroup> cdo_groups;
  bool operator==(const Pdi&) const = default;
};

struct AiePartition {
  std::string name;
  uint32_t column_width = 0;               // columns the partition occupies
  std::vector<uint16_t> start_columns;     // where it may be placed
  std::vector<Pdi> pdis;
  uint32_t operations_per_cycle = 0;       // CREATE_HWCTX max_opc
  uint64_t inference_fingerprint = 0, pre_post_fingerprint = 0;
  bool operator==(const AiePartition&) const = default;
};

// One compute unit (IP_LAYOUT entry): the kernel instance the runtime names in CONFIG_CU.
struct Ip {
  std::string name;  // "MLIR_AIE:MLIRAIE" style kernel:instance
  uint32_t type = 0;
  uint64_t base_address = 0;
  uint32_t properties = 0;  // for a PS kernel: subtype bits 0-1, functional 4-5, kernel id 16-27
  uint32_t subtype() const { return properties & 0x3; }
  uint8_t functional() const { return uint8_t((properties >> 4) & 0x3); }  // CONFIG_CU cu_func
  uint32_t kernel_id() const { return (properties >> 16) & 0xFFF; }
  bool is_dpu_kernel() const { return type == kIpPsKernel && subtype() == kSubtypeDpu; }
  bool operator==(const Ip&) const = default;
};

struct Xclbin {
  std::array<uint8_t, 16> uuid{};
  uint64_t timestamp = 0;
  std::vector<Section> sections;
  std::optional<AiePartition> partition;
  std::vector<Ip> ips;
  std::string metadata_xml;  // EMBEDDED_METADATA, verbatim (kernel argument layout)
  const Section* find(SectionKind kind) const;
  // The PDI whose CDO groups list `kernel_id` (how the XDNA shim pairs a CU with its PDI), or
  // nullptr.
  const Pdi* pdi_for_kernel(uint64_t kernel_id) const;
};

Xclbin parse(std::span<const uint8_t> bytes);
Xclbin load(const std::string& path);  // parse() of the file; errors name the path
// parse(write(x)) == x's content. `sections` and the file layout are derived, not taken from x;
// the sections written are EMBEDDED_METADATA (when metadata_xml is set), IP_LAYOUT (when ips is
// not empty) and AIE_PARTITION (when partition is set). Throws std::invalid_argument on what
// the format cannot hold (an IP name over 63 bytes, a section over 4 GiB).
std::vector<uint8_t> write(const Xclbin& x);

}  // namespace xdna::npu::xclbin

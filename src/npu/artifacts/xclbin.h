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

struct Section {
  uint32_t kind = 0;
  std::string name;
  uint64_t offset = 0, size = 0;
};

// One PDI of the AIE partition: the array configuration the driver loads for a CU.
struct Pdi {
  std::array<uint8_t, 16> uuid{};
  std::vector<uint8_t> image;
};

struct AiePartition {
  std::string name;
  uint32_t column_width = 0;               // columns the partition occupies
  std::vector<uint16_t> start_columns;     // where it may be placed
  std::vector<Pdi> pdis;
};

// One compute unit (IP_LAYOUT entry): the kernel instance the runtime names in CONFIG_CU.
struct Ip {
  std::string name;  // "MLIR_AIE:MLIRAIE" style kernel:instance
  uint32_t type = 0;
  uint64_t base_address = 0;
};

struct Xclbin {
  std::array<uint8_t, 16> uuid{};
  uint64_t timestamp = 0;
  std::vector<Section> sections;
  std::optional<AiePartition> partition;
  std::vector<Ip> ips;
  std::string metadata_xml;  // EMBEDDED_METADATA, verbatim (kernel argument layout)
  const Section* find(SectionKind kind) const;
};

Xclbin parse(std::span<const uint8_t> bytes);
Xclbin load(const std::string& path);  // parse() of the file; errors name the path
std::vector<uint8_t> write(const Xclbin& x);  // parse(write(x)) == x's content

}  // namespace xdna::npu::xclbin

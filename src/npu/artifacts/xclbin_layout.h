// The on-disk AXLF structures, written from the layout in XRT's
// src/runtime_src/core/include/xrt/detail/xclbin.h (Apache-2.0): struct axlf, axlf_header,
// axlf_section_header, ip_layout/ip_data, aie_partition, aie_partition_info, aie_pdi,
// cdo_group, array_offset. Little-endian, natural alignment; every size and field offset is
// asserted below so a compiler or edit that moves one fails to build. Shared by xclbin.cpp
// (parse) and xclbin_write.cpp (write); nothing else should need it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace xdna::npu::xclbin::layout {

inline constexpr char kMagic[8] = {'x', 'c', 'l', 'b', 'i', 'n', '2', '\0'};
inline constexpr uint32_t kMaxSections = 0x10000;              // XCLBIN_MAX_NUM_SECTION
inline constexpr uint64_t kMaxPdiImage = 32ull * 1024 * 64 * 64;  // PDI_IMAGE_MAX_SIZE

struct SectionHeader {  // axlf_section_header
  uint32_t kind;
  char name[16];
  uint64_t offset;  // from the start of the file
  uint64_t size;
};
static_assert(sizeof(SectionHeader) == 40);
static_assert(offsetof(SectionHeader, name) == 4 && offsetof(SectionHeader, offset) == 24 &&
              offsetof(SectionHeader, size) == 32);

struct Header {  // axlf_header
  uint64_t length;  // the whole file
  uint64_t timestamp;
  uint64_t feature_rom_timestamp;
  uint16_t version_patch;
  uint8_t version_major, version_minor;
  uint16_t mode;  // XCLBIN_MODE; 0 = flat
  uint16_t action_mask;
  uint8_t interface_uuid[16];
  uint8_t platform_vbnv[64];
  uint8_t uuid[16];  // a union with m_next_axlf in XRT; the xclbin's uuid
  char debug_bin[16];
  uint32_t num_sections;
};
static_assert(sizeof(Header) == 152);
static_assert(offsetof(Header, timestamp) == 8 && offsetof(Header, version_patch) == 24 &&
              offsetof(Header, version_major) == 26 && offsetof(Header, mode) == 28 &&
              offsetof(Header, interface_uuid) == 32 && offsetof(Header, platform_vbnv) == 48 &&
              offsetof(Header, uuid) == 112 && offsetof(Header, debug_bin) == 128 &&
              offsetof(Header, num_sections) == 144);

struct Axlf {  // struct axlf without its trailing m_sections[1]
  char magic[8];
  int32_t signature_length;  // -1: unsigned
  uint8_t reserved[28];      // 0xFF
  uint8_t key_block[256];    // 0xFF when unsigned
  uint64_t unique_id;
  Header header;
};
static_assert(sizeof(Axlf) == 456);
static_assert(offsetof(Axlf, signature_length) == 8 && offsetof(Axlf, key_block) == 40 &&
              offsetof(Axlf, unique_id) == 296 && offsetof(Axlf, header) == 304);
// The section table starts right after: file offset 456 (XRT's m_sections member).
inline constexpr uint64_t kSectionTable = sizeof(Axlf);
inline constexpr uint64_t kUuidOffset = offsetof(Axlf, header) + offsetof(Header, uuid);
inline constexpr uint64_t kNumSectionsOffset = offsetof(Axlf, header) + offsetof(Header, num_sections);
static_assert(kUuidOffset == 416 && kNumSectionsOffset == 448);

struct IpData {  // ip_data
  uint32_t type;        // IP_TYPE
  uint32_t properties;  // a union of bit fields in XRT (see Ip::properties)
  uint64_t base_address;
  char name[64];  // NUL-terminated
};
static_assert(sizeof(IpData) == 80);
static_assert(offsetof(IpData, base_address) == 8 && offsetof(IpData, name) == 16);
// ip_layout: int32 m_count, then ip_data[] at the next 8-byte boundary.
inline constexpr uint64_t kIpLayoutData = 8;

struct ArrayOffset {  // array_offset: `size` elements at `offset` from the section start
  uint32_t size;
  uint32_t offset;
};
static_assert(sizeof(ArrayOffset) == 8);

struct CdoGroup {  // cdo_group
  uint32_t name;  // string offset in the section
  uint8_t type;
  uint8_t padding[3];
  uint64_t pdi_id;
  ArrayOffset kernel_ids;      // uint64_t elements
  ArrayOffset pre_cdo_groups;  // uint32_t elements
  uint8_t reserved[64];
};
static_assert(sizeof(CdoGroup) == 96);
static_assert(offsetof(CdoGroup, type) == 4 && offsetof(CdoGroup, pdi_id) == 8 &&
              offsetof(CdoGroup, kernel_ids) == 16 && offsetof(CdoGroup, pre_cdo_groups) == 24);

struct AiePdi {  // aie_pdi
  uint8_t uuid[16];
  ArrayOffset image;       // uint8_t elements
  ArrayOffset cdo_groups;  // CdoGroup elements
  uint8_t reserved[64];
};
static_assert(sizeof(AiePdi) == 96);
static_assert(offsetof(AiePdi, image) == 16 && offsetof(AiePdi, cdo_groups) == 24);

struct PartitionInfo {  // aie_partition_info
  uint16_t column_width;
  uint8_t padding[6];
  ArrayOffset start_columns;  // uint16_t elements
  uint8_t reserved[72];
};
static_assert(sizeof(PartitionInfo) == 88);
static_assert(offsetof(PartitionInfo, start_columns) == 8);

struct AiePartition {  // aie_partition
  uint8_t schema_version;
  uint8_t padding0[3];
  uint32_t name;  // string offset in the section
  uint32_t operations_per_cycle;
  uint8_t padding[4];
  uint64_t inference_fingerprint;
  uint64_t pre_post_fingerprint;
  PartitionInfo info;
  ArrayOffset pdis;           // AiePdi elements
  uint32_t kernel_commit_id;  // string offset in the section (0: none)
  uint8_t reserved[52];
};
static_assert(sizeof(AiePartition) == 184);
static_assert(offsetof(AiePartition, name) == 4 && offsetof(AiePartition, operations_per_cycle) == 8 &&
              offsetof(AiePartition, inference_fingerprint) == 16 &&
              offsetof(AiePartition, pre_post_fingerprint) == 24 && offsetof(AiePartition, info) == 32 &&
              offsetof(AiePartition, pdis) == 120 && offsetof(AiePartition, kernel_commit_id) == 128);

}  // namespace xdna::npu::xclbin::layout

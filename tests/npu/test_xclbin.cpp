// xclbin (AXLF): a file laid out byte by byte here from XRT's xclbin.h (independently of the
// writer) parses to the expected fields; every malformed variant throws naming what is wrong;
// write() round-trips through parse().
#include "npu/artifacts/xclbin.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <string>

namespace xc = xdna::npu::xclbin;

namespace {

// Little-endian stores at absolute offsets, so the layout below reads as a field list.
struct Bytes {
  std::vector<uint8_t> b;
  explicit Bytes(size_t n) : b(n, 0) {}
  void u8(size_t at, uint8_t v) { b.at(at) = v; }
  void u16(size_t at, uint16_t v) { for (int i = 0; i < 2; ++i) b.at(at + i) = uint8_t(v >> (8 * i)); }
  void u32(size_t at, uint32_t v) { for (int i = 0; i < 4; ++i) b.at(at + i) = uint8_t(v >> (8 * i)); }
  void u64(size_t at, uint64_t v) { for (int i = 0; i < 8; ++i) b.at(at + i) = uint8_t(v >> (8 * i)); }
  void str(size_t at, const std::string& s) { for (size_t i = 0; i < s.size(); ++i) b.at(at + i) = uint8_t(s[i]); }
};

const std::string kXml = "<project name=\"t\"></project>";  // 28 bytes

// File offsets of the hand-laid file (see hand_laid()).
constexpr size_t kTable = 456, kMeta = 616, kIps = 704, kPart = 872, kCustom = 1296, kLength = 1300;
constexpr uint32_t kKernelId = 0x901;

// struct axlf at 0: magic, signature length, reserved, key block, unique id; axlf_header at
// 304; 4 section headers at 456 (40 bytes: kind, name[16], pad, offset, size); then
// EMBEDDED_METADATA, IP_LAYOUT (2 entries), AIE_PARTITION (1 PDI, 1 CDO group) and a section of
// a kind the parser does not know.
Bytes hand_laid() {
  Bytes f(kLength);
  f.str(0, "xclbin2");
  f.u32(8, 0xFFFFFFFF);  // m_signature_length -1
  for (size_t i = 12; i < 296; ++i) f.u8(i, 0xFF);  // reserved, m_keyBlock
  f.u64(296, 0x1122334455667788);                   // m_uniqueId
  f.u64(304, kLength);                              // m_header.m_length
  f.u64(312, 1700000000);                           // m_timeStamp
  f.u8(330, 2);                                     // m_versionMajor
  f.u8(331, 1);                                     // m_versionMinor
  for (int i = 0; i < 16; ++i) f.u8(416 + i, uint8_t(0x10 + i));  // uuid
  f.u32(448, 4);                                    // m_numSections

  auto section = [&](int i, uint32_t kind, const std::string& name, uint64_t offset, uint64_t size) {
    const size_t at = kTable + 40 * size_t(i);
    f.u32(at, kind);
    f.str(at + 4, name);
    f.u64(at + 24, offset);
    f.u64(at + 32, size);
  };
  section(0, 2, "meta", kMeta, kXml.size());
  section(1, 8, "ips", kIps, 8 + 2 * 80);
  section(2, 32, "partition", kPart, 424);
  section(3, 99, "custom", kCustom, 4);

  f.str(kMeta, kXml);

  f.u32(kIps, 2);  // m_count; ip_data[] at +8, 80 bytes each
  f.u32(kIps + 8, 7);                                  // m_type IP_PS_KERNEL
  f.u32(kIps + 12, (kKernelId << 16) | (1 << 4) | 1);  // kernel id, functional 1, subtype DPU
  f.u64(kIps + 16, 0);                                 // m_base_address
  f.str(kIps + 24, "MLIR_AIE:MLIRAIE");                // m_name
  f.u32(kIps + 88, 1);                                 // IP_KERNEL
  f.u64(kIps + 96, 0x1000);
  f.str(kIps + 104, "other:inst");

  const size_t p = kPart;  // aie_partition; offsets below are relative to it
  f.u32(p + 4, 184);                   // mpo_name
  f.u32(p + 8, 2048);                  // operations_per_cycle
  f.u64(p + 16, 0xAABB);               // inference_fingerprint
  f.u64(p + 24, 0xCCDD);               // pre_post_fingerprint
  f.u16(p + 32, 4);                    // info.column_width
  f.u32(p + 40, 2);                    // info.start_columns.size
  f.u32(p + 44, 192);                  // info.start_columns.offset
  f.u32(p + 120, 1);                   // aie_pdi.size
  f.u32(p + 124, 200);                 // aie_pdi.offset
  f.str(p + 184, "part");
  f.u16(p + 192, 1);
  f.u16(p + 194, 5);
  for (int i = 0; i < 16; ++i) f.u8(p + 200 + i, uint8_t(0xA0 + i));  // aie_pdi[0].uuid
  f.u32(p + 216, 8);                   // pdi_image.size
  f.u32(p + 220, 416);                 // pdi_image.offset
  f.u32(p + 224, 1);                   // cdo_groups.size
  f.u32(p + 228, 296);                 // cdo_groups.offset
  f.u32(p + 296, 400);                 // cdo_group.mpo_name
  f.u8(p + 300, 1);                    // cdo_type primary
  f.u64(p + 304, 7);                   // pdi_id
  f.u32(p + 312, 1);                   // dpu_kernel_ids.size
  f.u32(p + 316, 408);                 // dpu_kernel_ids.offset
  f.str(p + 400, "DPU");
  f.u64(p + 408, kKernelId);
  for (int i = 0; i < 8; ++i) f.u8(p + 416 + i, uint8_t(0xD0 + i));  // the PDI image

  f.str(kCustom, "abcd");
  return f;
}

void expect_hand_laid_fields(const xc::Xclbin& x) {
  EXPECT_EQ(x.timestamp, 1700000000u);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(x.uuid[i], 0x10 + i);
  ASSERT_EQ(x.sections.size(), 4u);
  EXPECT_EQ(x.sections[0].kind, 2u);
  EXPECT_EQ(x.sections[0].name, "meta");
  EXPECT_EQ(x.sections[2].name, "partition");
  EXPECT_EQ(x.sections[2].offset, kPart);
  EXPECT_EQ(x.sections[2].size, 424u);
  EXPECT_EQ(x.sections[3].kind, 99u);  // unknown kinds are kept
  EXPECT_EQ(x.sections[3].offset, kCustom);
  ASSERT_NE(x.find(xc::SectionKind::IpLayout), nullptr);
  EXPECT_EQ(x.find(xc::SectionKind::IpLayout)->offset, kIps);
  EXPECT_EQ(x.metadata_xml, kXml);

  ASSERT_EQ(x.ips.size(), 2u);
  EXPECT_EQ(x.ips[0].name, "MLIR_AIE:MLIRAIE");
  EXPECT_EQ(x.ips[0].type, 7u);
  EXPECT_TRUE(x.ips[0].is_dpu_kernel());
  EXPECT_EQ(x.ips[0].kernel_id(), kKernelId);
  EXPECT_EQ(x.ips[0].functional(), 1);
  EXPECT_EQ(x.ips[1].name, "other:inst");
  EXPECT_EQ(x.ips[1].base_address, 0x1000u);
  EXPECT_FALSE(x.ips[1].is_dpu_kernel());

  ASSERT_TRUE(x.partition);
  const xc::AiePartition& p = *x.partition;
  EXPECT_EQ(p.name, "part");
  EXPECT_EQ(p.column_width, 4u);
  EXPECT_EQ(p.start_columns, (std::vector<uint16_t>{1, 5}));
  EXPECT_EQ(p.operations_per_cycle, 2048u);
  EXPECT_EQ(p.inference_fingerprint, 0xAABBu);
  EXPECT_EQ(p.pre_post_fingerprint, 0xCCDDu);
  ASSERT_EQ(p.pdis.size(), 1u);
  EXPECT_EQ(p.pdis[0].uuid[0], 0xA0);
  EXPECT_EQ(p.pdis[0].uuid[15], 0xAF);
  EXPECT_EQ(p.pdis[0].image, (std::vector<uint8_t>{0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7}));
  ASSERT_EQ(p.pdis[0].cdo_groups.size(), 1u);
  const xc::CdoGroup& g = p.pdis[0].cdo_groups[0];
  EXPECT_EQ(g.name, "DPU");
  EXPECT_EQ(g.type, 1);
  EXPECT_EQ(g.pdi_id, 7u);
  EXPECT_EQ(g.kernel_ids, (std::vector<uint64_t>{kKernelId}));
  EXPECT_TRUE(g.pre_cdo_groups.empty());
  EXPECT_EQ(x.pdi_for_kernel(x.ips[0].kernel_id()), &p.pdis[0]);
  EXPECT_EQ(x.pdi_for_kernel(0x902), nullptr);
}

// parse() of `bytes` throws std::invalid_argument whose message contains `expected`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& expected) {
  try {
    (void)xc::parse(bytes);
    ADD_FAILURE() << "parsed; expected an error containing: " << expected;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << "message: " << e.what();
  }
}

void expect_error(const std::function<void(Bytes&)>& spoil, const std::string& expected) {
  Bytes f = hand_laid();
  spoil(f);
  expect_error(f.b, expected);
}

void expect_same_content(const xc::Xclbin& a, const xc::Xclbin& b) {
  EXPECT_EQ(a.uuid, b.uuid);
  EXPECT_EQ(a.timestamp, b.timestamp);
  EXPECT_EQ(a.metadata_xml, b.metadata_xml);
  EXPECT_EQ(a.ips, b.ips);
  EXPECT_EQ(a.partition, b.partition);
}

}  // namespace

TEST(Xclbin, HandLaidFileParsesToItsFields) { expect_hand_laid_fields(xc::parse(hand_laid().b)); }

// The committed fixture is written by scripts/make_xclbin_fixtures.py, a second hand layout
// (Python struct.pack at the same offsets): both must agree byte for byte.
TEST(Xclbin, FixtureFileMatchesTheHandLayout) {
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/xclbin/hand_laid.xclbin";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path;
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(file, hand_laid().b);
  expect_hand_laid_fields(xc::load(path));
}

TEST(Xclbin, HeaderErrors) {
  std::vector<uint8_t> shortfile = hand_laid().b;
  shortfile.resize(100);
  expect_error(shortfile, "truncated header: the file is 100 bytes, the AXLF header needs 456");
  expect_error(std::vector<uint8_t>{}, "truncated header");
  expect_error([](Bytes& f) { f.u8(6, '1'); }, "bad magic \"xclbin1.\"");
  expect_error([](Bytes& f) { f.u32(448, 0x10001); }, "num_sections 65537 exceeds the limit 65536");
  expect_error([](Bytes& f) { f.u32(448, 100); }, "num_sections 100: the section table ends at 4456, past m_length 1300");
  expect_error([](Bytes& f) { f.b.resize(1200); }, "truncated file: header m_length is 1300 bytes, the file has 1200");
}

TEST(Xclbin, SectionTableErrors) {
  const size_t ips_offset = kTable + 40 + 24, ips_size = kTable + 40 + 32;
  expect_error([&](Bytes& f) { f.u64(ips_offset, 5000); },
               "section 1 (IP_LAYOUT) offset 5000+168 runs past the end of the file (1300 bytes)");
  expect_error([&](Bytes& f) { f.u64(ips_offset, 0xFFFFFFFFFFFFFFF0); }, "section 1 (IP_LAYOUT) offset 18446744073709551600+168 runs past");
  expect_error([&](Bytes& f) { f.u64(ips_size, 0xFFFFFFFFFFFFFFFF); }, "section 1 (IP_LAYOUT) offset 704+18446744073709551615 runs past");
  expect_error([&](Bytes& f) { f.u64(ips_offset, 100); }, "section 1 (IP_LAYOUT) offset 100 overlaps the header and section table");
  expect_error([&](Bytes& f) { f.u64(kTable + 3 * 40 + 24, kPart + 8); }, "sections 2 (AIE_PARTITION) and 3 (section kind 99) overlap");
  // An empty section may sit anywhere inside the file.
  Bytes f = hand_laid();
  f.u64(kTable + 3 * 40 + 24, 0);
  f.u64(kTable + 3 * 40 + 32, 0);
  EXPECT_EQ(xc::parse(f.b).sections[3].size, 0u);
}

TEST(Xclbin, IpLayoutErrors) {
  expect_error([](Bytes& f) { f.u32(kIps, 1000); }, "IP_LAYOUT: m_count 1000 entries need 80008 bytes, the section has 168");
  expect_error([](Bytes& f) { f.u32(kIps, 0x80000000); }, "IP_LAYOUT: m_count -2147483648 is negative");
  expect_error([](Bytes& f) { for (int i = 0; i < 64; ++i) f.u8(kIps + 24 + i, 0); }, "IP_LAYOUT: ip 0 has an empty m_name");
  expect_error([](Bytes& f) { for (int i = 0; i < 64; ++i) f.u8(kIps + 104 + i, 'A'); }, "IP_LAYOUT: ip 1 m_name is not NUL-terminated");
  expect_error([](Bytes& f) { f.u64(kTable + 40 + 32, 2); }, "IP_LAYOUT: m_count offset 0+4 runs past the section (2 bytes)");
}

TEST(Xclbin, AiePartitionErrors) {
  const size_t p = kPart;
  expect_error([&](Bytes& f) { f.u32(p + 124, 400); }, "AIE_PARTITION: pdi array offset 400+96 runs past the section (424 bytes)");
  expect_error([&](Bytes& f) { f.u32(p + 120, 0xFFFFFFFF); }, "AIE_PARTITION: pdi array offset 200+412316860320 runs past");
  expect_error([&](Bytes& f) { f.u32(p + 220, 420); }, "AIE_PARTITION: pdi 0 image offset 420+8 runs past the section (424 bytes)");
  expect_error([&](Bytes& f) { f.u32(p + 216, 0xFFFFFFFF); }, "AIE_PARTITION: pdi 0 image size 4294967295 exceeds the limit");
  expect_error([&](Bytes& f) { f.u32(p + 228, 380); }, "AIE_PARTITION: pdi 0 cdo_groups offset 380+96 runs past");
  expect_error([&](Bytes& f) { f.u32(p + 312, 1000); }, "AIE_PARTITION: pdi 0 cdo_group 0 dpu_kernel_ids offset 408+8000 runs past");
  expect_error([&](Bytes& f) { f.u32(p + 44, 0xFFFFFFFF); }, "AIE_PARTITION: start_columns offset 4294967295+4 runs past");
  expect_error([&](Bytes& f) { f.u32(p + 4, 5000); }, "AIE_PARTITION: name offset 5000 is past the section (424 bytes)");
  expect_error([&](Bytes& f) { f.u32(p + 4, 420); }, "AIE_PARTITION: name at 420 is not NUL-terminated inside the section");
  expect_error([&](Bytes& f) { f.u32(p + 296, 5000); }, "AIE_PARTITION: pdi 0 cdo_group 0 name offset 5000 is past the section");
  // Arrays that alias one another add up to more than the section: refused, so a small file
  // cannot make the parser materialise many copies of itself.
  expect_error([&](Bytes& f) { f.u32(p + 40, 212); f.u32(p + 44, 0); }, "overlaps other arrays");
  expect_error([&](Bytes& f) { f.u64(kTable + 2 * 40 + 32, 100); }, "AIE_PARTITION: aie_partition header offset 0+184 runs past the section (100 bytes)");
}

TEST(Xclbin, LoadNamesThePath) {
  try {
    (void)xc::load("/nonexistent/dir/model.xclbin");
    ADD_FAILURE() << "loaded a missing file";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/model.xclbin"), std::string::npos) << e.what();
  }
  const std::string path = ::testing::TempDir() + "xclbin_bad_magic.xclbin";
  Bytes f = hand_laid();
  f.u8(0, 'X');
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(f.b.data()), std::streamsize(f.b.size()));
  try {
    (void)xc::load(path);
    ADD_FAILURE() << "loaded a bad file";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "xclbin: " + path + ": bad magic \"Xclbin2.\" (expected \"xclbin2\\0\")");
  }
}

TEST(Xclbin, WriteRoundTrips) {
  xc::Xclbin x;
  for (int i = 0; i < 16; ++i) x.uuid[i] = uint8_t(0xF0 ^ i);
  x.timestamp = 1234567;
  x.metadata_xml = "<project><platform><device><core><kernel name=\"MLIR_AIE\"/></core></device></platform></project>";
  x.ips.push_back({"MLIR_AIE:MLIRAIE", xc::kIpPsKernel, 0, (0x901u << 16) | 1});
  x.ips.push_back({"second:cu", xc::kIpPsKernel, 0x40, (0x902u << 16) | (2 << 4) | 1});
  xc::AiePartition p;
  p.name = "QoS";
  p.column_width = 4;
  p.start_columns = {0, 4};
  p.operations_per_cycle = 2048;
  p.inference_fingerprint = 0x0123456789ABCDEF;
  p.pre_post_fingerprint = 42;
  xc::Pdi a;
  a.uuid[3] = 9;
  a.image = std::vector<uint8_t>(1001, 0x5A);  // odd size: the next array must still be aligned
  a.cdo_groups.push_back({"DPU", 1, 0, {0x901}, {}});
  a.cdo_groups.push_back({"PREPOST", 3, 0, {0x901, 0x903}, {0, 5}});
  xc::Pdi b;
  b.image = {1, 2, 3};
  b.cdo_groups.push_back({"DPU2", 1, 1, {0x902}, {}});
  p.pdis = {a, b, xc::Pdi{}};
  x.partition = p;

  const std::vector<uint8_t> bytes = xc::write(x);
  const xc::Xclbin y = xc::parse(bytes);
  expect_same_content(x, y);
  ASSERT_EQ(y.sections.size(), 3u);
  for (const xc::Section& s : y.sections) EXPECT_EQ(s.offset % 8, 0u) << s.kind;
  EXPECT_EQ(bytes.size() % 8, 0u);
  ASSERT_NE(y.pdi_for_kernel(0x902), nullptr);
  EXPECT_EQ(y.pdi_for_kernel(0x902)->image, b.image);
  EXPECT_EQ(y.pdi_for_kernel(y.ips[0].kernel_id())->image.size(), 1001u);
  // Deterministic: same input, same bytes.
  EXPECT_EQ(xc::write(y), bytes);
}

TEST(Xclbin, WriteOfTheHandLaidContentRoundTrips) {
  const xc::Xclbin x = xc::parse(hand_laid().b);
  const xc::Xclbin y = xc::parse(xc::write(x));
  expect_same_content(x, y);
  EXPECT_EQ(y.sections.size(), 3u);  // the unknown section has no bytes in Xclbin to write
}

TEST(Xclbin, EmptyXclbinRoundTrips) {
  const xc::Xclbin y = xc::parse(xc::write(xc::Xclbin{}));
  EXPECT_TRUE(y.sections.empty());
  EXPECT_FALSE(y.partition);
  EXPECT_TRUE(y.ips.empty());
}

TEST(Xclbin, WriteRefusesWhatTheFormatCannotHold) {
  xc::Xclbin x;
  x.ips.push_back({"", xc::kIpPsKernel, 0, 0});
  EXPECT_THROW(xc::write(x), std::invalid_argument);
  x.ips[0].name = std::string(64, 'k');
  EXPECT_THROW(xc::write(x), std::invalid_argument);
  x.ips[0].name = std::string(63, 'k');
  EXPECT_EQ(xc::parse(xc::write(x)).ips[0].name, x.ips[0].name);
  x.partition = xc::AiePartition{};
  x.partition->name = std::string("a\0b", 3);
  EXPECT_THROW(xc::write(x), std::invalid_argument);
}

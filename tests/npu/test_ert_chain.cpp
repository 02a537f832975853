// ERT command chains and preemptible START_NPU packets: golden words computed by hand from the
// documented layouts (XRT ert.h ert_cmd_chain_data / ert_npu_preempt_data; kernel amdxdna_ctx.h
// amdxdna_cmd_chain / amdxdna_cmd_preempt_data), state read-back, and the driver's chain limits
// (amd/xdna-driver amdxdna_ctx.h MAX_CHAINED_SUB_CMD 64, aie2_msg_priv.h 4 KiB chain buffer).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "npu/driver/ert.h"

using namespace xdna::npu::ert;

namespace {

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A START_CU packet with `regmap_words` of kernel arguments after the CU mask.
std::vector<uint32_t> start_cu(uint32_t regmap_words) {
  std::vector<uint32_t> p = {encode_header({State::New, 0, 1 + regmap_words, Opcode::StartCu}), 1};
  p.resize(2 + regmap_words, 0);
  return p;
}

}  // namespace

TEST(ErtChain, PreemptLayout) {
  StartNpuPreempt c;
  c.cu_mask = 1;
  c.instruction_buffer = 0x100002000ull;
  c.save_buffer = 0x3000;
  c.restore_buffer = 0x4000;
  c.instruction_bytes = 96;
  c.save_bytes = c.restore_bytes = 0x800;
  c.args = {3, 0};
  // NEW 1 | count 13 << 12 (0xD000) | START_NPU_PREEMPT 21 << 23 (0x0A800000); payload: mask,
  // inst lo/hi, save lo/hi, restore lo/hi, three sizes, prop_count 0, args.
  const std::vector<uint32_t> want = {0x0A80D001, 1, 0x2000, 1, 0x3000, 0, 0x4000, 0, 96, 0x800, 0x800, 0, 3, 0};
  EXPECT_EQ(encode_start_npu_preempt(c), want);
  c.elf = true;  // opcode 22 << 23 = 0x0B000000
  std::vector<uint32_t> elf = want;
  elf[0] = 0x0B00D001;
  EXPECT_EQ(encode_start_npu_preempt(c), elf);

  const StartNpuPreempt back = decode_start_npu_preempt(elf);
  EXPECT_TRUE(back.elf);
  EXPECT_EQ(back.instruction_buffer, 0x100002000ull);
  EXPECT_EQ(back.save_buffer, 0x3000u);
  EXPECT_EQ(back.restore_buffer, 0x4000u);
  EXPECT_EQ(back.instruction_bytes, 96u);
  EXPECT_EQ(back.save_bytes, 0x800u);
  EXPECT_EQ(back.restore_bytes, 0x800u);
  EXPECT_EQ(back.args, (std::vector<uint32_t>{3, 0}));
  const std::string d = describe(want);
  EXPECT_NE(d.find("START_NPU_PREEMPT state=new count=13"), std::string::npos) << d;
  EXPECT_NE(d.find("save: 0x3000, 2048 bytes"), std::string::npos) << d;
  EXPECT_NE(d.find("args: 0x00000003 0x00000000"), std::string::npos) << d;
}

TEST(ErtChain, PreemptValidation) {
  StartNpuPreempt c;
  c.instruction_buffer = 0x1000;
  c.instruction_bytes = 16;
  c.save_buffer = 0x2000;  // no size
  EXPECT_NE(error_of([&] { encode_start_npu_preempt(c); }).find("save/restore"), std::string::npos);
  c.save_bytes = 64;
  EXPECT_NO_THROW(encode_start_npu_preempt(c));
  c.cu_mask = 0;
  EXPECT_THROW(encode_start_npu_preempt(c), std::invalid_argument);
  c.cu_mask = 1;
  c.instruction_bytes = 0;
  EXPECT_THROW(encode_start_npu_preempt(c), std::invalid_argument);
  c.instruction_bytes = 16;
  c.args.assign(2037, 0);  // 1 + 10 + 2037 = 2048 payload words: one too many
  EXPECT_THROW(encode_start_npu_preempt(c), std::invalid_argument);
  // Decoding: too short a count, a packet shorter than its count, the wrong opcode.
  const std::vector<uint32_t> short_count = {encode_header({State::New, 0, 5, Opcode::StartNpuPreempt}), 1, 0, 0, 0, 0};
  EXPECT_NE(error_of([&] { decode_start_npu_preempt(short_count); }).find("10 words"), std::string::npos);
  std::vector<uint32_t> ok = {encode_header({State::New, 0, 11, Opcode::StartNpuPreempt}), 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0};
  EXPECT_NO_THROW(decode_start_npu_preempt(ok));
  ok.pop_back();
  EXPECT_THROW(decode_start_npu_preempt(ok), std::invalid_argument);
  EXPECT_THROW(decode_start_npu_preempt(start_cu(5)), std::invalid_argument);
}

TEST(ErtChain, ChainReadBackAfterAnError) {
  std::vector<uint32_t> p = encode_cmd_chain(std::vector<uint32_t>{11, 12, 13});
  // count 6 + 2 x 3 = 12: 0x0980C001
  EXPECT_EQ(p[0], 0x0980C001u);
  // The driver writes the outcome back: ERROR, submitted 3, the second command failed.
  p[0] = (p[0] & ~0xFu) | 5;
  p[2] = 3;
  p[3] = 1;
  const ChainStatus s = decode_cmd_chain(p);
  EXPECT_EQ(s.state, State::Error);
  EXPECT_EQ(s.submit_index, 3u);
  EXPECT_EQ(s.error_index, 1u);
  EXPECT_EQ(s.command_bo_handles, (std::vector<uint32_t>{11, 12, 13}));
  // A count that is not 6 + 2n (XRT's packet check) and a handle above 32 bits are refused.
  std::vector<uint32_t> bad = p;
  bad[0] = encode_header({State::New, 0, 13, Opcode::CmdChain});
  bad.push_back(0);
  EXPECT_NE(error_of([&] { decode_cmd_chain(bad); }).find("not 6 + 2"), std::string::npos);
  bad = p;
  bad[8] = 1;  // high word of handle 12
  EXPECT_NE(error_of([&] { decode_cmd_chain(bad); }).find("above 32 bits"), std::string::npos);
  EXPECT_THROW(decode_cmd_chain(start_cu(5)), std::invalid_argument);
}

TEST(ErtChain, EncodeLimits) {
  EXPECT_THROW(encode_cmd_chain(std::vector<uint32_t>{}), std::invalid_argument);
  EXPECT_NE(error_of([&] { encode_cmd_chain(std::vector<uint32_t>(65, 1)); }).find("at most 64"), std::string::npos);
  EXPECT_EQ(encode_cmd_chain(std::vector<uint32_t>(64, 1)).size(), 1u + 6 + 128);
  EXPECT_NE(error_of([&] { encode_cmd_chain(std::vector<uint32_t>{3, 0}); }).find("handle 0"), std::string::npos);
}

TEST(ErtChain, SlotSizesAndChainChecks) {
  // START_CU with 9 regmap words: 8-byte slot header + 36 bytes.
  EXPECT_EQ(chain_slot_bytes(start_cu(9)), 44u);
  // START_NPU with 9 argument words: 24-byte slot + 36 bytes (its 4 fixed words move into the slot).
  StartNpu n;
  n.instruction_buffer = 0x1000;
  n.instruction_bytes = 64;
  n.args.assign(9, 0);
  EXPECT_EQ(chain_slot_bytes(encode_start_npu(n)), 60u);
  StartNpuPreempt pe;
  pe.instruction_buffer = 0x1000;
  pe.instruction_bytes = 64;
  EXPECT_NE(error_of([&] { chain_slot_bytes(encode_start_npu_preempt(pe)); }).find("does not chain"), std::string::npos);

  // 4096 / 44 = 93 slots fit the buffer, but only 64 commands are allowed.
  std::vector<std::vector<uint32_t>> ps(64, start_cu(9));
  EXPECT_NO_THROW(check_chain(ps));
  ps.push_back(start_cu(9));
  EXPECT_NE(error_of([&] { check_chain(ps); }).find("at most 64"), std::string::npos);
  // 4 KiB: slots of 8 + 4 x 255 = 1028 bytes: three fit (3084), the fourth ends at 4112.
  ps.assign(4, start_cu(255));
  EXPECT_NE(error_of([&] { check_chain(ps); }).find("ends at byte 4112"), std::string::npos);
  ps.pop_back();
  EXPECT_NO_THROW(check_chain(ps));
  // One opcode per chain.
  ps = {start_cu(9), encode_start_npu(n)};
  EXPECT_NE(error_of([&] { check_chain(ps); }).find("one opcode"), std::string::npos);
  EXPECT_THROW(check_chain({}), std::invalid_argument);
}

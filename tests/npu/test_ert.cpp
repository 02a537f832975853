// ERT command packets: header bit positions against words computed by hand from XRT's ert.h
// (state [3:0], extra_cu_masks [11:10], count [22:12], opcode [27:23]), the START_NPU and
// CMD_CHAIN payload layouts, and decoding errors.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "npu/driver/ert.h"

using namespace xdna::npu::ert;

TEST(Ert, HeaderBitPositions) {
  // NEW 1 | count 6 << 12 (0x6000) | START_NPU 20 << 23 (0x0A000000)
  EXPECT_EQ(encode_header({State::New, 0, 6, Opcode::StartNpu}), 0x0A006001u);
  // COMPLETED 4 | 3 << 10 (0xC00) | 2047 << 12 (0x7FF000) | CMD_CHAIN 19 << 23 (0x09800000)
  EXPECT_EQ(encode_header({State::Completed, 3, 2047, Opcode::CmdChain}), 0x09FFFC04u);
  // START_NPU_PREEMPT_ELF 22 << 23 = 0x0B000000, TIMEOUT 8
  EXPECT_EQ(encode_header({State::Timeout, 0, 0, Opcode::StartNpuPreemptElf}), 0x0B000008u);
  EXPECT_EQ(encode_header({State::New, 1, 0, Opcode::StartCu}), 0x00000401u);

  const Header h = decode_header(0x09FFFC04);
  EXPECT_EQ(h.state, State::Completed);
  EXPECT_EQ(h.extra_cu_masks, 3u);
  EXPECT_EQ(h.count, 2047u);
  EXPECT_EQ(h.opcode, Opcode::CmdChain);
  EXPECT_EQ(decode_state(0x0A006005), State::Error);
  EXPECT_EQ(decode_state(0x0A006008), State::Timeout);
  EXPECT_EQ(state_name(decode_state(0x0A006004)), "completed");
  EXPECT_EQ(opcode_name(decode_header(0x0A006004).opcode), "START_NPU");
}

TEST(Ert, RejectsOutOfRangeAndUnknownFields) {
  EXPECT_THROW(encode_header({State::New, 4, 0, Opcode::StartNpu}), std::invalid_argument);
  EXPECT_THROW(encode_header({State::New, 0, 2048, Opcode::StartNpu}), std::invalid_argument);
  EXPECT_THROW(encode_header({static_cast<State>(0), 0, 0, Opcode::StartNpu}), std::invalid_argument);
  EXPECT_THROW(encode_header({State::New, 0, 0, static_cast<Opcode>(7)}), std::invalid_argument);
  EXPECT_THROW(decode_header(5u << 23 | 1), std::invalid_argument);     // opcode 5
  EXPECT_THROW(decode_header(20u << 23 | 0), std::invalid_argument);    // state 0
  EXPECT_THROW(decode_header(20u << 23 | 10), std::invalid_argument);   // state 10
  EXPECT_THROW(decode_header(1u << 28 | 20u << 23 | 1), std::invalid_argument);  // type 1
  try {
    decode_header(23u << 23 | 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown opcode 23"), std::string::npos) << e.what();
  }
}

TEST(Ert, StartNpuLayout) {
  StartNpu cmd;
  cmd.cu_mask = 1;
  cmd.instruction_buffer = 0x123456780ull;
  cmd.instruction_bytes = 720;
  cmd.args = {0xAAAA, 0x1, 0xBBBB, 0};  // two u64 BO addresses, lo then hi
  // payload: cu_mask, {addr lo, addr hi, size, prop_count 0}, args -> count 9
  const std::vector<uint32_t> want = {0x0A009001, 1, 0x23456780, 0x1, 720, 0, 0xAAAA, 1, 0xBBBB, 0};
  EXPECT_EQ(encode_start_npu(cmd), want);

  const std::string d = describe(want);
  EXPECT_NE(d.find("START_NPU state=new count=9 cu_mask=0x00000001"), std::string::npos) << d;
  EXPECT_NE(d.find("instructions: 0x123456780, 720 bytes, 0 property words"), std::string::npos) << d;
  EXPECT_NE(d.find("args: 0x0000aaaa 0x00000001 0x0000bbbb 0x00000000"), std::string::npos) << d;

  cmd.args.assign(2043, 0);  // 1 + 4 + 2043 = 2048 payload words: one too many
  EXPECT_THROW(encode_start_npu(cmd), std::invalid_argument);
  cmd.args.assign(2042, 0);
  EXPECT_EQ(encode_start_npu(cmd).size(), 2048u);
  cmd.cu_mask = 0;
  EXPECT_THROW(encode_start_npu(cmd), std::invalid_argument);
}

TEST(Ert, CmdChainLayout) {
  const std::vector<uint32_t> bos = {5, 7};
  // no CU mask; {count 2, submit_index, error_index, reserved[3]}, then u64 handles -> count 10
  const std::vector<uint32_t> want = {0x0980A001, 2, 0, 0, 0, 0, 0, 5, 0, 7, 0};
  EXPECT_EQ(encode_cmd_chain(bos), want);
  const std::string d = describe(want);
  EXPECT_NE(d.find("CMD_CHAIN state=new count=10 commands=2 submit_index=0 error_index=0"), std::string::npos) << d;
  EXPECT_NE(d.find("bo: 5 7"), std::string::npos) << d;
  EXPECT_THROW(encode_cmd_chain({}), std::invalid_argument);
}

TEST(Ert, DescribeRejectsMalformedPackets) {
  EXPECT_THROW(describe({}), std::invalid_argument);
  const std::vector<uint32_t> short_npu = {0x0A009001, 1, 0x23456780};  // count 9, 2 words present
  EXPECT_THROW(describe(short_npu), std::invalid_argument);
  const std::vector<uint32_t> bad_chain = {0x09806001, 9, 0, 0, 0, 0, 0};  // 9 commands, none listed
  EXPECT_THROW(describe(bad_chain), std::invalid_argument);
  const std::vector<uint32_t> bad_props = {0x0A005001, 1, 0, 0, 16, 3};  // 3 property words absent
  EXPECT_THROW(describe(bad_props), std::invalid_argument);
  const std::vector<uint32_t> completed = {0x0A005004, 1, 0, 0, 16, 0};
  EXPECT_NE(describe(completed).find("state=completed"), std::string::npos);
}

// ERT command packets: what a command BO holds (firmware ABI; aie2p.md "Command BO"). One u32
// header word (state [3:0], extra_cu_mask [11:10], payload word count [22:12], opcode [27:23],
// type [31:28] = 0; XRT include/xrt/detail/ert.h, struct ert_start_kernel_cmd), then the payload.
// The runtime writes packets into CMD BOs; the firmware writes the final state back into the
// header, which decode_state() reads. The driver (linux drivers/accel/amdxdna/amdxdna_ctx.c,
// amdxdna_cmd_get_payload / amdxdna_cmd_get_cu_idx) skips 1 + extra_cu_masks mask words before
// the payload it hands to firmware, takes the CU index as the lowest set bit of the first non-zero
// mask, and reads a CMD_CHAIN packet with no mask words at all.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace xdna::npu::ert {

enum class Opcode : uint8_t {
  StartCu = 0,
  CmdChain = 19,
  StartNpu = 20,
  StartNpuPreempt = 21,
  StartNpuPreemptElf = 22,
};
enum class State : uint8_t {
  New = 1, Queued = 2, Running = 3, Completed = 4, Error = 5, Abort = 6, Submitted = 7,
  Timeout = 8, NoResponse = 9,
};
std::string_view state_name(State s);     // "completed", "error", ...
std::string_view opcode_name(Opcode op);  // "START_NPU", ...

struct Header {
  State state = State::New;
  uint32_t extra_cu_masks = 0;  // 0..3: cu mask words after the first
  uint32_t count = 0;           // payload words after the header (< 2048)
  Opcode opcode = Opcode::StartCu;
};
uint32_t encode_header(const Header& h);  // throws std::invalid_argument on out-of-range fields
Header decode_header(uint32_t word);       // throws on an unknown opcode or state
State decode_state(uint32_t header_word);  // bits [3:0]; throws std::invalid_argument on an unknown state

// START_NPU: run one instruction stream on the context's CU. Payload: cu_mask word(s), then
// {u64 instruction_buffer (device address); u32 instruction_buffer_size (bytes);
//  u32 instruction_prop_count (0); kernel arguments as u32 words}.
struct StartNpu {
  uint32_t cu_mask = 1;
  uint64_t instruction_buffer = 0;
  uint32_t instruction_bytes = 0;
  std::vector<uint32_t> args;  // the kernel's register map: its arguments in order, u64 as two words (lo, hi)
};
std::vector<uint32_t> encode_start_npu(const StartNpu& cmd);

// CMD_CHAIN: run the listed command BOs (by BO handle) in order as one submission.
// Payload {u32 command_count; u32 submit_index; u32 error_index; u32 reserved[3]; u64 data[]}
// (XRT ert_cmd_chain_data), no CU mask words; data[i] is a BO handle (the driver looks each up
// as a CMD BO), written as two words (handle, 0). The firmware/driver fill submit_index and
// error_index (the failing command) on completion.
std::vector<uint32_t> encode_cmd_chain(std::span<const uint32_t> command_bo_handles);

// The decoded packet, for `npu design dump` style printing and tests.
std::string describe(std::span<const uint32_t> packet);

}  // namespace xdna::npu::ert

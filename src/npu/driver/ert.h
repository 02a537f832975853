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

// START_NPU_PREEMPT (21) / START_NPU_PREEMPT_ELF (22): a START_NPU whose context can be
// preempted at the instruction stream's preemption points. Payload: cu_mask word(s), then
// {u64 instruction_buffer, save_buffer, restore_buffer; u32 instruction_buffer_size,
//  save_buffer_size, restore_buffer_size (bytes); u32 instruction_prop_count (0); args...}
// (XRT ert.h ert_npu_preempt_data; kernel amdxdna_ctx.h amdxdna_cmd_preempt_data: 10 fixed
// words). The save/restore buffers hold the context's state across a preemption. The ELF
// variant carries an ELF control-code buffer instead of a raw instruction stream; the driver
// forwards it as EXEC_NPU_TYPE_ELF and supplies the kernel opcode (3) itself. Both need the
// driver's AIE2_PREEMPT feature (firmware support): otherwise EXEC_CMD fails with EOPNOTSUPP.
struct StartNpuPreempt {
  bool elf = false;  // START_NPU_PREEMPT_ELF
  uint32_t cu_mask = 1;
  uint64_t instruction_buffer = 0, save_buffer = 0, restore_buffer = 0;
  uint32_t instruction_bytes = 0, save_bytes = 0, restore_bytes = 0;
  std::vector<uint32_t> args;
};
std::vector<uint32_t> encode_start_npu_preempt(const StartNpuPreempt& cmd);
// The fields of a START_NPU_PREEMPT(_ELF) packet; throws naming what is short or wrong.
StartNpuPreempt decode_start_npu_preempt(std::span<const uint32_t> packet);

// CMD_CHAIN: run the listed command BOs (by BO handle) in order as one submission.
// Payload {u32 command_count; u32 submit_index; u32 error_index; u32 reserved[3]; u64 data[]}
// (XRT ert_cmd_chain_data), no CU mask words; data[i] is a BO handle (the driver looks each up
// as a CMD BO), written as two words (handle, 0). The header count is exactly 6 + 2n (XRT's
// packet validation). The firmware/driver fill submit_index and error_index (the failing
// command) on completion.
// Driver limits (amd/xdna-driver src/driver/amdxdna/amdxdna_ctx.h and aie2_msg_priv.h):
//  - at most 64 sub-commands (MAX_CHAINED_SUB_CMD), at least 1;
//  - every sub-command has the opcode of the first (aie2_cmdlist_fill_one_slot);
//  - the sub-commands are copied into one 4 KiB command-list buffer (MAX_CHAIN_CMDBUF_SIZE),
//    one slot each: START_CU 8 bytes + its payload after the CU masks (cmd_chain_slot_execbuf_cf),
//    START_NPU 24 bytes + its arguments after the 4 fixed words (cmd_chain_slot_dpu);
//  - older drivers chain only START_CU and START_NPU; preemptible packets chain only where the
//    driver has the AIE2_PREEMPT feature.
inline constexpr size_t kMaxChainCommands = 64;
inline constexpr size_t kChainBufferBytes = 4096;
std::vector<uint32_t> encode_cmd_chain(std::span<const uint32_t> command_bo_handles);

// A CMD_CHAIN packet read back (after completion: submit_index / error_index as written by the
// driver). Throws on a header that is not CMD_CHAIN or a count that is not 6 + 2n.
struct ChainStatus {
  State state = State::New;
  uint32_t submit_index = 0, error_index = 0;
  std::vector<uint32_t> command_bo_handles;
};
ChainStatus decode_cmd_chain(std::span<const uint32_t> packet);

// The bytes one packet takes in the driver's 4 KiB chain buffer (see above); throws for an
// opcode the driver does not chain.
size_t chain_slot_bytes(std::span<const uint32_t> packet);
// Checks packets meant for one chain against the driver's limits: 1..64 packets, one opcode,
// slots within 4 KiB. Throws std::invalid_argument naming the limit and the packet.
void check_chain(std::span<const std::vector<uint32_t>> packets);

// The decoded packet, for `npu design dump` style printing and tests.
std::string describe(std::span<const uint32_t> packet);

}  // namespace xdna::npu::ert

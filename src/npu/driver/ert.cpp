// ERT command packets (ert.h). Bit positions: XRT include/xrt/detail/ert.h (ert_start_kernel_cmd,
// ert_npu_data, ert_cmd_chain_data); aie2p.md "Command BO".
#include "npu/driver/ert.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace xdna::npu::ert {

namespace {

constexpr uint32_t kStateMask = 0xF;        // [3:0]
constexpr uint32_t kExtraCuShift = 10;      // [11:10]
constexpr uint32_t kCountShift = 12;        // [22:12]
constexpr uint32_t kCountMax = (1u << 11) - 1;
constexpr uint32_t kOpcodeShift = 23;       // [27:23]
constexpr uint32_t kTypeShift = 28;         // [31:28], always 0 here
constexpr size_t kStartNpuFixedWords = 4;   // u64 instruction_buffer, u32 size, u32 prop_count
constexpr size_t kChainFixedWords = 6;      // command_count, submit_index, error_index, reserved[3]
constexpr size_t kPreemptFixedWords = 10;   // 3 x u64 buffers, 3 x u32 sizes, u32 prop_count
constexpr size_t kChainSlotCfBytes = 8;     // cmd_chain_slot_execbuf_cf {cu_idx, arg_cnt}
constexpr size_t kChainSlotDpuBytes = 24;   // cmd_chain_slot_dpu {u64 inst, size, props, cu_idx, arg_cnt}

bool known_state(uint32_t s) { return s >= 1 && s <= 9; }
bool known_opcode(uint32_t op) { return op == 0 || (op >= 19 && op <= 22); }

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

std::string_view state_name(State s) {
  switch (s) {
    case State::New: return "new";
    case State::Queued: return "queued";
    case State::Running: return "running";
    case State::Completed: return "completed";
    case State::Error: return "error";
    case State::Abort: return "abort";
    case State::Submitted: return "submitted";
    case State::Timeout: return "timeout";
    case State::NoResponse: return "no response";
  }
  return "unknown";
}

std::string_view opcode_name(Opcode op) {
  switch (op) {
    case Opcode::StartCu: return "START_CU";
    case Opcode::CmdChain: return "CMD_CHAIN";
    case Opcode::StartNpu: return "START_NPU";
    case Opcode::StartNpuPreempt: return "START_NPU_PREEMPT";
    case Opcode::StartNpuPreemptElf: return "START_NPU_PREEMPT_ELF";
  }
  return "unknown";
}

uint32_t encode_header(const Header& h) {
  const auto state = static_cast<uint32_t>(h.state);
  const auto opcode = static_cast<uint32_t>(h.opcode);
  if (!known_state(state)) throw std::invalid_argument("ERT header: unknown state " + std::to_string(state));
  if (!known_opcode(opcode)) throw std::invalid_argument("ERT header: unknown opcode " + std::to_string(opcode));
  if (h.extra_cu_masks > 3)
    throw std::invalid_argument("ERT header: extra_cu_masks " + std::to_string(h.extra_cu_masks) + " > 3");
  if (h.count > kCountMax)
    throw std::invalid_argument("ERT header: payload of " + std::to_string(h.count) + " words exceeds " +
                                std::to_string(kCountMax));
  return state | h.extra_cu_masks << kExtraCuShift | h.count << kCountShift | opcode << kOpcodeShift;
}

State decode_state(uint32_t header_word) {
  const uint32_t s = header_word & kStateMask;
  if (!known_state(s))
    throw std::invalid_argument("ERT header " + hex(header_word) + ": unknown state " + std::to_string(s));
  return static_cast<State>(s);
}

Header decode_header(uint32_t word) {
  Header h;
  h.state = decode_state(word);
  h.extra_cu_masks = (word >> kExtraCuShift) & 0x3;
  h.count = (word >> kCountShift) & kCountMax;
  const uint32_t op = (word >> kOpcodeShift) & 0x1F;
  if (!known_opcode(op))
    throw std::invalid_argument("ERT header " + hex(word) + ": unknown opcode " + std::to_string(op));
  if (word >> kTypeShift)
    throw std::invalid_argument("ERT header " + hex(word) + ": type " + std::to_string(word >> kTypeShift) +
                                " is not 0");
  h.opcode = static_cast<Opcode>(op);
  return h;
}

std::vector<uint32_t> encode_start_npu(const StartNpu& cmd) {
  if (cmd.cu_mask == 0) throw std::invalid_argument("START_NPU: cu_mask is 0 (no CU selected)");
  Header h;
  h.opcode = Opcode::StartNpu;
  h.count = static_cast<uint32_t>(std::min<size_t>(1 + kStartNpuFixedWords + cmd.args.size(), kCountMax + 1));
  std::vector<uint32_t> p;
  p.reserve(1 + 1 + kStartNpuFixedWords + cmd.args.size());
  p.push_back(encode_header(h));  // throws when the args do not fit the count field
  p.push_back(cmd.cu_mask);
  p.push_back(static_cast<uint32_t>(cmd.instruction_buffer));
  p.push_back(static_cast<uint32_t>(cmd.instruction_buffer >> 32));
  p.push_back(cmd.instruction_bytes);
  p.push_back(0);  // instruction_prop_count: no properties
  p.insert(p.end(), cmd.args.begin(), cmd.args.end());
  return p;
}

std::vector<uint32_t> encode_start_npu_preempt(const StartNpuPreempt& cmd) {
  const char* name = cmd.elf ? "START_NPU_PREEMPT_ELF" : "START_NPU_PREEMPT";
  if (cmd.cu_mask == 0) throw std::invalid_argument(std::string(name) + ": cu_mask is 0 (no CU selected)");
  if (cmd.instruction_buffer == 0 || cmd.instruction_bytes == 0)
    throw std::invalid_argument(std::string(name) + ": no instruction buffer");
  // A preemption saves the context into save_buffer and resumes from restore_buffer: each
  // address needs its size and the reverse.
  if ((cmd.save_buffer == 0) != (cmd.save_bytes == 0) || (cmd.restore_buffer == 0) != (cmd.restore_bytes == 0))
    throw std::invalid_argument(std::string(name) + ": a save/restore buffer address without its size (or a size without address)");
  Header h;
  h.opcode = cmd.elf ? Opcode::StartNpuPreemptElf : Opcode::StartNpuPreempt;
  h.count = static_cast<uint32_t>(std::min<size_t>(1 + kPreemptFixedWords + cmd.args.size(), kCountMax + 1));
  std::vector<uint32_t> p;
  p.reserve(2 + kPreemptFixedWords + cmd.args.size());
  p.push_back(encode_header(h));  // throws when the args do not fit the count field
  p.push_back(cmd.cu_mask);
  for (uint64_t a : {cmd.instruction_buffer, cmd.save_buffer, cmd.restore_buffer}) {
    p.push_back(static_cast<uint32_t>(a));
    p.push_back(static_cast<uint32_t>(a >> 32));
  }
  p.insert(p.end(), {cmd.instruction_bytes, cmd.save_bytes, cmd.restore_bytes, 0u});  // prop_count 0
  p.insert(p.end(), cmd.args.begin(), cmd.args.end());
  return p;
}

StartNpuPreempt decode_start_npu_preempt(std::span<const uint32_t> packet) {
  if (packet.empty()) throw std::invalid_argument("START_NPU_PREEMPT: empty packet");
  const Header h = decode_header(packet[0]);
  if (h.opcode != Opcode::StartNpuPreempt && h.opcode != Opcode::StartNpuPreemptElf)
    throw std::invalid_argument("START_NPU_PREEMPT: the header's opcode is " + std::string(opcode_name(h.opcode)));
  const size_t masks = 1 + h.extra_cu_masks;
  if (h.count < masks + kPreemptFixedWords)
    throw std::invalid_argument("START_NPU_PREEMPT: count " + std::to_string(h.count) + " is shorter than " +
                                std::to_string(masks) + " CU mask word(s) + 10 words of ert_npu_preempt_data");
  if (packet.size() < 1 + size_t(h.count))
    throw std::invalid_argument("START_NPU_PREEMPT: header counts " + std::to_string(h.count) +
                                " payload words, packet has " + std::to_string(packet.size() - 1));
  const auto d = packet.subspan(1 + masks, h.count - masks);
  auto u64 = [&](size_t i) { return d[i] | uint64_t(d[i + 1]) << 32; };
  StartNpuPreempt c;
  c.elf = h.opcode == Opcode::StartNpuPreemptElf;
  c.cu_mask = packet[1];
  c.instruction_buffer = u64(0);
  c.save_buffer = u64(2);
  c.restore_buffer = u64(4);
  c.instruction_bytes = d[6];
  c.save_bytes = d[7];
  c.restore_bytes = d[8];
  if (d[9] > d.size() - kPreemptFixedWords)
    throw std::invalid_argument("START_NPU_PREEMPT: instruction_prop_count " + std::to_string(d[9]) + " runs past the payload");
  c.args.assign(d.begin() + kPreemptFixedWords + d[9], d.end());
  return c;
}

ChainStatus decode_cmd_chain(std::span<const uint32_t> packet) {
  if (packet.empty()) throw std::invalid_argument("CMD_CHAIN: empty packet");
  const Header h = decode_header(packet[0]);
  if (h.opcode != Opcode::CmdChain)
    throw std::invalid_argument("CMD_CHAIN: the header's opcode is " + std::string(opcode_name(h.opcode)));
  if (h.count < kChainFixedWords || packet.size() < 1 + kChainFixedWords)
    throw std::invalid_argument("CMD_CHAIN: payload shorter than 6 words");
  const uint32_t n = packet[1];
  if (h.count != kChainFixedWords + 2 * size_t(n))
    throw std::invalid_argument("CMD_CHAIN: header count " + std::to_string(h.count) + " is not 6 + 2 x command_count " +
                                std::to_string(n));
  if (packet.size() < 1 + size_t(h.count))
    throw std::invalid_argument("CMD_CHAIN: command_count " + std::to_string(n) + " runs past the packet");
  ChainStatus c;
  c.state = h.state;
  c.submit_index = packet[2];
  c.error_index = packet[3];
  for (uint32_t i = 0; i < n; ++i) {
    if (packet[1 + kChainFixedWords + 2 * i + 1] != 0)
      throw std::invalid_argument("CMD_CHAIN: command " + std::to_string(i) + " has a handle above 32 bits");
    c.command_bo_handles.push_back(packet[1 + kChainFixedWords + 2 * i]);
  }
  return c;
}

size_t chain_slot_bytes(std::span<const uint32_t> packet) {
  if (packet.empty()) throw std::invalid_argument("chain slot: empty packet");
  const Header h = decode_header(packet[0]);
  const size_t masks = 1 + h.extra_cu_masks;
  if (h.count <= masks) throw std::invalid_argument("chain slot: packet has no payload after its CU masks");
  const size_t payload = (h.count - masks) * 4;
  switch (h.opcode) {
    case Opcode::StartCu: return kChainSlotCfBytes + payload;
    case Opcode::StartNpu:
      if (payload < kStartNpuFixedWords * 4) throw std::invalid_argument("chain slot: START_NPU payload shorter than 4 words");
      return kChainSlotDpuBytes + payload - kStartNpuFixedWords * 4;
    default:
      throw std::invalid_argument("chain slot: the driver does not chain " + std::string(opcode_name(h.opcode)) +
                                  " packets (START_CU and START_NPU only)");
  }
}

void check_chain(std::span<const std::vector<uint32_t>> packets) {
  if (packets.empty()) throw std::invalid_argument("CMD_CHAIN: no commands");
  if (packets.size() > kMaxChainCommands)
    throw std::invalid_argument("CMD_CHAIN: " + std::to_string(packets.size()) + " commands, the driver takes at most " +
                                std::to_string(kMaxChainCommands));
  size_t bytes = 0;
  Opcode first = Opcode::StartCu;
  for (size_t i = 0; i < packets.size(); ++i) {
    if (packets[i].empty()) throw std::invalid_argument("CMD_CHAIN: command " + std::to_string(i) + " is empty");
    const Opcode op = decode_header(packets[i][0]).opcode;
    if (i == 0) first = op;
    if (op != first)
      throw std::invalid_argument("CMD_CHAIN: command " + std::to_string(i) + " is " + std::string(opcode_name(op)) +
                                  ", the first is " + std::string(opcode_name(first)) + " (the driver needs one opcode)");
    bytes += chain_slot_bytes(packets[i]);
    if (bytes > kChainBufferBytes)
      throw std::invalid_argument("CMD_CHAIN: command " + std::to_string(i) + " ends at byte " + std::to_string(bytes) +
                                  " of the driver's " + std::to_string(kChainBufferBytes) + "-byte chain buffer");
  }
}

std::vector<uint32_t> encode_cmd_chain(std::span<const uint32_t> command_bo_handles) {
  if (command_bo_handles.empty()) throw std::invalid_argument("CMD_CHAIN: no commands");
  if (command_bo_handles.size() > kMaxChainCommands)
    throw std::invalid_argument("CMD_CHAIN: " + std::to_string(command_bo_handles.size()) +
                                " commands, the driver takes at most " + std::to_string(kMaxChainCommands));
  for (uint32_t bo : command_bo_handles)
    if (bo == 0) throw std::invalid_argument("CMD_CHAIN: BO handle 0 (GEM handles start at 1)");
  Header h;
  h.opcode = Opcode::CmdChain;
  h.count = static_cast<uint32_t>(std::min<size_t>(kChainFixedWords + 2 * command_bo_handles.size(), kCountMax + 1));
  std::vector<uint32_t> p;
  p.push_back(encode_header(h));
  p.push_back(static_cast<uint32_t>(command_bo_handles.size()));
  p.insert(p.end(), {0u, 0u, 0u, 0u, 0u});  // submit_index, error_index, reserved[3]
  for (uint32_t bo : command_bo_handles) {
    p.push_back(bo);
    p.push_back(0);
  }
  return p;
}

std::string describe(std::span<const uint32_t> packet) {
  if (packet.empty()) throw std::invalid_argument("ERT packet: empty");
  const Header h = decode_header(packet[0]);
  if (packet.size() < 1 + size_t(h.count))
    throw std::invalid_argument("ERT packet: header counts " + std::to_string(h.count) + " payload words, packet has " +
                                std::to_string(packet.size() - 1));
  const auto payload = packet.subspan(1, h.count);
  std::string s = std::string(opcode_name(h.opcode)) + " state=" + std::string(state_name(h.state)) +
                  " count=" + std::to_string(h.count);
  if (h.opcode == Opcode::CmdChain) {
    if (payload.size() < kChainFixedWords) throw std::invalid_argument("CMD_CHAIN: payload shorter than 6 words");
    const uint32_t n = payload[0];
    if (payload.size() < kChainFixedWords + 2 * size_t(n))
      throw std::invalid_argument("CMD_CHAIN: command_count " + std::to_string(n) + " runs past the payload");
    s += " commands=" + std::to_string(n) + " submit_index=" + std::to_string(payload[1]) +
         " error_index=" + std::to_string(payload[2]) + "\n  bo:";
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t bo = payload[kChainFixedWords + 2 * i] | uint64_t(payload[kChainFixedWords + 2 * i + 1]) << 32;
      (s += ' ') += std::to_string(bo);
    }
    return s + "\n";
  }
  const size_t masks = 1 + h.extra_cu_masks;
  if (payload.size() < masks) throw std::invalid_argument("ERT packet: payload shorter than its CU masks");
  s += " cu_mask=";
  for (size_t i = 0; i < masks; ++i) (s += i ? "," : "") += hex(payload[i]);
  const auto data = payload.subspan(masks);
  if (h.opcode == Opcode::StartNpuPreempt || h.opcode == Opcode::StartNpuPreemptElf) {
    const StartNpuPreempt c = decode_start_npu_preempt(packet);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "\n  instructions: 0x%llx, %u bytes\n  save: 0x%llx, %u bytes\n  restore: 0x%llx, %u bytes",
                  (unsigned long long)c.instruction_buffer, c.instruction_bytes, (unsigned long long)c.save_buffer,
                  c.save_bytes, (unsigned long long)c.restore_buffer, c.restore_bytes);
    s += buf;
    s += "\n  args:";
    for (uint32_t w : c.args) (s += ' ') += hex(w);
    return s + "\n";
  }
  if (h.opcode == Opcode::StartNpu) {
    if (data.size() < kStartNpuFixedWords) throw std::invalid_argument("START_NPU: payload shorter than ert_npu_data");
    const uint64_t addr = data[0] | uint64_t(data[1]) << 32;
    const uint32_t props = data[3];
    if (data.size() < kStartNpuFixedWords + size_t(props))
      throw std::invalid_argument("START_NPU: instruction_prop_count " + std::to_string(props) + " runs past the payload");
    char buf[96];
    std::snprintf(buf, sizeof buf, "\n  instructions: 0x%llx, %u bytes, %u property words", (unsigned long long)addr,
                  data[2], props);
    s += buf;
    s += "\n  args:";
    for (size_t i = kStartNpuFixedWords + props; i < data.size(); ++i) (s += ' ') += hex(data[i]);
    return s + "\n";
  }
  s += "\n  data:";
  for (uint32_t w : data) (s += ' ') += hex(w);
  return s + "\n";
}

}  // namespace xdna::npu::ert

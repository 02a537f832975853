// The NPU device runtime: runs designs on the XDNA2 array through the amdxdna driver
// (driver/device.h), with no XRT. For each design it loads the compiled artifact (manifest.h:
// xclbin + instruction stream), keeps one hardware context per xclbin (PDIs in BOs,
// CONFIG_CU), one instruction BO per design and one BO per host argument, and per invocation
// writes a START_CU / START_NPU command (driver/ert.h), submits it and waits on the context's
// syncobj; a sequence of invocations goes as CMD_CHAIN packets (run_sequence).
// Over DryRunIo the same code produces the exact ioctl structures without a device.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "npu/artifacts/manifest.h"
#include "npu/design.h"
#include "npu/driver/device.h"

namespace xdna::npu {

// Which ERT packet carries an invocation (docs/npu-runtime.md, "Command packets").
//  StartCu: opcode START_CU, payload = cu mask + the kernel's register map (opcode 3, instruction
//    BO address, instruction word count, data BO addresses). What XRT sends for an xclbin whose
//    kernel takes its instruction stream as an argument (mlir-aie's host code); the driver hands
//    it to the firmware as a non-ELF command. The default.
//  StartNpu: opcode START_NPU, the instruction buffer address and size in the packet's own
//    fields, then the same register map. The driver forwards it as a "partial ELF" command, so
//    it is kept only for experiments on the first hardware run.
enum class CommandPacket : uint8_t { StartCu, StartNpu };

// How run_sequence submits several invocations (docs/npu-runtime.md, "Command chains").
//  Chained: the invocations' packets go into CMD_CHAIN packets (ert.h: at most 64 commands and
//    4 KiB of chain slots each, one hardware context per chain): one EXEC_CMD and one syncobj
//    wait per chain instead of per design, and no host copy between the designs (buffers the
//    invocations share stay in their BO). The default: the driver's command-list path exists
//    for this (a no-op runlist costs 55.7 us per run alone, 32.8 us at 8 per list: aie2p.md).
//  PerCommand: one EXEC_CMD + wait per invocation (run() for each), with host copies between:
//    for the first hardware run, to tell a chain problem from a design problem.
enum class Submission : uint8_t { Chained, PerCommand };

struct DeviceRuntimeOptions {
  std::chrono::milliseconds timeout{10000};  // per command (per chain when chained)
  CommandPacket packet = CommandPacket::StartCu;
  Submission submission = Submission::Chained;
  // Runtime sequences kept loaded (an instruction stream in the DEV heap, command and argument
  // BOs each): past this, the least recently used one not in the running sequence is freed.
  size_t max_loaded_sequences = 16;
};

// One invocation in a sequence: a design and its host buffers (the design's HostArgs, exactly
// their bytes). Invocations of one sequence that pass the same buffer (same pointer and size)
// share one BO: what an earlier design writes there, a later one reads, on the device.
struct DesignCall {
  const Design* design = nullptr;
  std::vector<std::span<uint8_t>> args;
};

// DEV_HEAP BO size: one 64 MiB heap page, as the XDNA shim allocates on first open
// (amd/xdna-driver src/shim/kmq/pcidev.cpp: heap_page_size; instruction and PDI BOs are carved
// from it, so it also bounds their total size).
inline constexpr uint64_t kDevHeapBytes = 64ull << 20;
// mlir-aie kernel opcode for "run the transaction (instruction stream) in `instr`"
// (amdxdna aie2_msg_priv.h: AIE2_EXEC_BUFFER_KERNEL_OP_TXN).
inline constexpr uint32_t kKernelOpTransaction = 3;

// The mlir-aie NPU kernel's register map (aiecc's kernel metadata: opcode u64 at 0x00, instr u64
// at 0x08, ninstr u32 at 0x10, bo<i> u64 at 0x14 + 8i) as u32 words, u64 as (lo, hi).
std::vector<uint32_t> kernel_register_map(uint64_t instr_address, uint32_t instr_words,
                                          std::span<const uint64_t> data_addresses);
// A START_CU packet: header (state NEW, opcode START_CU, count = 1 + regmap words), cu mask, regmap.
std::vector<uint32_t> encode_start_cu(uint32_t cu_mask, std::span<const uint32_t> regmap);

class DeviceRuntime {
 public:
  DeviceRuntime(std::unique_ptr<driver::DriverIo> io, artifacts::Manifest manifest,
                DeviceRuntimeOptions options = {});
  ~DeviceRuntime();
  driver::Device& device();
  const artifacts::Manifest& manifest() const;

  // Whether the artifacts hold this design (by Design::name).
  bool has_artifact(const std::string& design) const;
  // One invocation of `d`: args[i] (the design's HostArg i, exactly its bytes) copied into its BO
  // before, and every BO copied back after. Throws naming the design on a missing artifact, a
  // size mismatch, a driver error, or a command that ends in a state other than completed.
  void run(const Design& d, std::span<const std::span<uint8_t>> args);
  // The invocations in order, e.g. every design of one decode token. Every distinct buffer is
  // copied in before the first and back after the last. Chained (the default): one EXEC_CMD per
  // chain of up to 64 packets; a chain that fails names the design at its error_index.
  // PerCommand: run() for each. Throws as run() does; also for buffers that overlap without
  // being the same buffer (their BOs could not be kept consistent).
  void run_sequence(std::span<const DesignCall> calls);

  // Resident buffers (docs/npu-runtime.md, "Resident buffers"; npu (needs hardware, unverified
  // here)): a SHMEM BO that lives as long as the runtime, zero-filled, which the caller writes and
  // reads through the returned mapping. An invocation argument that starts inside a resident
  // buffer binds that BO at its device address plus the offset (several arguments may be views
  // of one buffer, e.g. decode_layer's kv and kv_row); one that runs past the buffer's end is
  // refused (std::out_of_range, "argument NAME ... runs past its resident buffer"). run_sequence copies
  // nothing in or back for it, so weights uploaded once stay on the device, and one design's
  // output is the next one's input without a host copy. The caller syncs what it changed
  // (sync_to_device) before a run and what it reads (sync_from_device) after. Submission::
  // PerCommand ignores residency (run() copies every argument).
  std::span<uint8_t> allocate_resident(uint64_t bytes);
  // `part` must lie inside one resident buffer; throws std::invalid_argument otherwise.
  void sync_to_device(std::span<const uint8_t> part);
  void sync_from_device(std::span<const uint8_t> part);

  // Runtime sequences loaded now (each an instruction stream BO; at most max_loaded_sequences
  // once a sequence has finished) and their instruction streams' bytes.
  size_t loaded_sequences() const;
  uint64_t loaded_instruction_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdna::npu

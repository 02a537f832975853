// The NPU device runtime: runs designs on the XDNA2 array through the amdxdna driver
// (driver/device.h), with no XRT. For each design it loads the compiled artifact (manifest.h:
// xclbin + instruction stream), keeps one hardware context per xclbin (PDIs in BOs,
// CONFIG_CU), one instruction BO per design and one BO per host argument, and per invocation
// writes a START_NPU command (driver/ert.h), submits it and waits on the context's syncobj.
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

struct DeviceRuntimeOptions {
  std::chrono::milliseconds timeout{10000};  // per command
  CommandPacket packet = CommandPacket::StartCu;
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdna::npu

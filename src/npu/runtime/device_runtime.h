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

struct DeviceRuntimeOptions {
  std::chrono::milliseconds timeout{10000};  // per command
};

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

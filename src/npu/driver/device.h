// RAII owners over the amdxdna driver (uapi: amdxdna_uapi.h; facts: aie2p.md "Driver user API"):
// the open device, buffer objects with their mappings, hardware contexts. Every failed call
// throws DriverError naming the call, errno and what it usually means for this driver.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "npu/driver/driver_io.h"

namespace xdna::npu::driver {

// "EINVAL" for EINVAL ("errno 1234" for a number without a name).
std::string errno_name(int err);
// What `err` from `call` usually means for amdxdna ("" when nothing specific is known).
std::string_view error_hint(std::string_view call, int err);

class DriverError : public std::runtime_error {
 public:
  // Message: "amdxdna <call> failed: <ENAME> (<strerror>): <what>"; an empty `what` is replaced
  // by error_hint(call, err) (and left off when there is no hint either).
  DriverError(std::string call, int err, const std::string& what);
  const std::string& call() const { return call_; }
  int error() const { return err_; }  // errno
 private:
  std::string call_;
  int err_;
};

// GET_INFO replies, decoded.
struct TileMetadata {
  int row_count = 0, row_start = 0, dma_channels = 0, locks = 0, event_regs = 0;
};
struct AieMetadata {
  uint32_t col_size = 0;
  int cols = 0, rows = 0;
  uint32_t version_major = 0, version_minor = 0;
  TileMetadata core, mem, shim;
};
struct ClockInfo {
  std::string name;
  uint32_t freq_mhz = 0;
};
struct FirmwareVersion {
  uint32_t major = 0, minor = 0, patch = 0, build = 0;
  std::string text() const;  // "1.5.2.380"
};
struct HwContextInfo {
  uint32_t context_id = 0, start_col = 0, num_col = 0;
  int64_t pid = 0;
  uint64_t submissions = 0, completions = 0, migrations = 0, preemptions = 0, errors = 0;
};

class Device {
 public:
  explicit Device(std::unique_ptr<DriverIo> io);
  static Device open(const std::string& node) { return Device(open_kernel_io(node)); }
  DriverIo& io() { return *io_; }

  AieMetadata aie_metadata();
  std::vector<ClockInfo> clocks();  // MP-NPU clock, H clock
  FirmwareVersion firmware_version();
  std::vector<HwContextInfo> hw_contexts();  // every process's, as the driver reports them

 private:
  void get_info(uint32_t param, void* buffer, uint32_t size, const char* what);
  std::unique_ptr<DriverIo> io_;
};

enum class BoType : uint32_t { Shmem = 1, DevHeap = 2, Dev = 3, Cmd = 4 };
// The largest DEV_HEAP the driver accepts on AIE2 devices (kernel aie2_pci.h AIE2_DEVM_SIZE).
inline constexpr uint64_t kDevHeapMaxBytes = 64ull << 20;

// A buffer object: CREATE_BO, GET_BO_INFO, mmap of the whole BO; unmapped and closed
// (DRM_IOCTL_GEM_CLOSE) on destruction. Move-only.
class BufferObject {
 public:
  BufferObject(Device& dev, BoType type, uint64_t size);
  BufferObject(BufferObject&&) noexcept;
  BufferObject& operator=(BufferObject&&) noexcept;
  ~BufferObject();

  uint32_t handle() const { return handle_; }
  BoType type() const { return type_; }
  uint64_t size() const { return size_; }
  uint64_t device_address() const { return xdna_addr_; }  // what instruction streams patch in
  std::span<uint8_t> bytes() { return {static_cast<uint8_t*>(map_), size_}; }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(map_), size_}; }
  void sync_to_device(uint64_t offset = 0, uint64_t size = 0);    // size 0: to the end
  void sync_from_device(uint64_t offset = 0, uint64_t size = 0);

 private:
  void sync(uint32_t direction, uint64_t offset, uint64_t size);
  void release() noexcept;  // munmap + GEM_CLOSE, errors ignored
  Device* dev_ = nullptr;
  BoType type_ = BoType::Shmem;
  uint32_t handle_ = 0;
  uint64_t size_ = 0, xdna_addr_ = 0;
  void* map_ = nullptr;
};

// CREATE_HWCTX parameters (the driver sizes the partition from num_tiles).
struct HwContextParams {
  uint32_t num_tiles = 0;  // compute tiles the design uses (columns x 4)
  uint32_t max_opc = 0;    // QoS hints: 0 = driver default
  uint32_t gops = 0, fps = 0, dma_bandwidth = 0, latency = 0, frame_exec_time = 0, priority = 0;
};

// One compute unit to configure: the BO holding its PDI and the CU function index.
struct CuConfig {
  uint32_t pdi_bo = 0;
  uint8_t func = 0;
};

// A hardware context: a partition of columns configured with one xclbin's CUs. Commands
// submitted to it complete in order on its syncobj timeline. Destroyed on destruction.
class HwContext {
 public:
  HwContext(Device& dev, const HwContextParams& params);
  HwContext(HwContext&&) noexcept;
  HwContext& operator=(HwContext&&) = delete;
  ~HwContext();

  uint32_t handle() const { return handle_; }
  uint32_t syncobj() const { return syncobj_; }
  void configure_cus(std::span<const CuConfig> cus);  // CONFIG_HWCTX(CONFIG_CU), <= 4 KiB payload
  // EXEC_CMD(EXEC_BUF) of one command BO (or a chain's head) with the BOs it references:
  // returns the sequence number to wait for.
  uint64_t submit(const BufferObject& cmd, std::span<const uint32_t> arg_bo_handles);
  // Waits for `seq` on the syncobj timeline; throws DriverError("syncobj wait", ETIME, ...) on timeout.
  void wait(uint64_t seq, std::chrono::milliseconds timeout);

 private:
  Device* dev_ = nullptr;
  uint32_t handle_ = 0, syncobj_ = 0;
};

}  // namespace xdna::npu::driver

// The system calls the NPU runtime makes, as a small table of functions: the kernel's
// (KernelIo: open /dev/accel/accelN, ioctl, mmap, libdrm syncobj waits) or a recorder
// (DryRunIo) that answers each call the way the amdxdna driver does (handles, device addresses,
// sequence numbers) without a device, and keeps the exact bytes of every argument structure and
// of every command buffer submitted. The dry run is how the whole runtime is tested here: the
// same code that drives hardware produces the structures, and tests compare them with goldens.
// Everything above this file (device.h, runtime/) is the same code for both.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xdna::npu::driver {

class DriverIo {
 public:
  virtual ~DriverIo() = default;
  // ioctl(2) on the device fd: 0, or -errno on failure.
  virtual int ioctl(unsigned long request, void* arg) = 0;
  // mmap(2) of `length` bytes at the DRM fake `offset` (GET_BO_INFO map_offset), shared,
  // read+write: the mapping, or nullptr with errno set.
  virtual void* mmap(size_t length, uint64_t offset) = 0;
  virtual void munmap(void* addr, size_t length) = 0;
  // drmSyncobjTimelineWait for one point: 0, -ETIME on timeout, or -errno.
  virtual int syncobj_wait(uint32_t syncobj, uint64_t point, int64_t timeout_ns) = 0;
  virtual std::string describe() const = 0;  // "/dev/accel/accel0" or "dry run"
};

// Opens the device node read-write (O_CLOEXEC). Throws DriverError (device.h) naming the node
// and errno's meaning (ENOENT: no such node, EACCES: not in the `render` group, ...).
std::unique_ptr<DriverIo> open_kernel_io(const std::string& node);

// One call the runtime made, as the driver saw it.
struct IoctlRecord {
  std::string call;             // "CREATE_BO", "EXEC_CMD", ... (the uapi name without the prefix)
  unsigned long request = 0;    // the ioctl request number
  std::vector<uint8_t> in;      // the argument structure's bytes as passed in
  std::vector<uint8_t> out;     // ... and as returned (handles, addresses, seq filled in)
  std::vector<uint8_t> payload; // bytes the structure points to (CONFIG_CU's cu config, EXEC_CMD's
                                // handle arrays, GET_INFO's buffer), when it points to any
};

// What a submitted command buffer held at EXEC_CMD time.
struct SubmittedCommand {
  uint32_t bo_handle = 0;
  std::vector<uint32_t> words;  // the command BO's contents (header + payload)
};

// The dry-run driver. Deterministic: handles count from 1, device addresses and map offsets
// are assigned from fixed bases in creation order, EXEC_CMD seq counts from 1, every wait
// completes at once and marks the command BO's header state COMPLETED (as the firmware does).
// AIE metadata, clocks and firmware version answer with the values of an npu2 (Strix) device
// from aie2p.md, labelled as such by describe().
class DryRunIo final : public DriverIo {
 public:
  DryRunIo();
  ~DryRunIo() override;
  int ioctl(unsigned long request, void* arg) override;
  void* mmap(size_t length, uint64_t offset) override;
  void munmap(void* addr, size_t length) override;
  int syncobj_wait(uint32_t syncobj, uint64_t point, int64_t timeout_ns) override;
  std::string describe() const override { return "dry run (no device; answers as amdxdna would)"; }

  const std::vector<IoctlRecord>& records() const { return records_; }
  const std::vector<SubmittedCommand>& submitted() const { return submitted_; }
  // The contents of a live BO (what the runtime wrote through its mapping).
  const std::vector<uint8_t>& bo_bytes(uint32_t handle) const;
  // Make the next call of `call` fail with -err (tests of error paths), once. `call` is an
  // IoctlRecord name, or "SYNCOBJ_WAIT" for syncobj_wait (e.g. ETIME to test timeouts).
  void fail_next(const std::string& call, int err);

  size_t live_bos() const { return bos_.size(); }
  size_t live_contexts() const { return contexts_.size(); }
  // Bytes of the DEV heap held by live DEV BOs (page-rounded), and the most it ever held.
  uint64_t heap_used() const { return heap_used_; }
  uint64_t heap_peak() const { return heap_peak_; }

  // The fixed bases of the answers (page-aligned, assigned in creation order). DRM fake mmap
  // offsets start above 4 GiB (DRM_FILE_PAGE_OFFSET_START); the DEV_HEAP sits at the AIE2 device
  // memory base (kernel aie2_pci.h AIE2_DEVM_BASE, 64 MiB AIE2_DEVM_SIZE) and DEV BOs are carved
  // from it, first fit (a closed DEV BO's pages are reused, as the driver's range allocator
  // does); other BOs get addresses from kBoAddrBase (the dry run's choice: no device maps them).
  static constexpr uint64_t kPage = 4096;
  static constexpr uint64_t kMapOffsetBase = 0x1'0000'0000;
  static constexpr uint64_t kDevHeapAddr = 0x400'0000;
  static constexpr uint64_t kDevHeapMax = 64ull << 20;
  static constexpr uint64_t kBoAddrBase = 0x2'0000'0000;
  static constexpr int kColumns = 8;  // aie2p.md: npu2 array, 8 columns

 private:
  struct Bo {
    uint32_t type = 0;
    uint64_t size = 0, map_offset = 0, xdna_addr = 0;
    std::vector<uint8_t> bytes;
    bool mapped = false;
  };
  struct Context {
    uint32_t syncobj = 0, start_col = 0, num_col = 0;
    uint64_t last_seq = 0, submitted = 0, completed = 0;
    std::map<uint64_t, uint32_t> pending;  // seq -> command BO handle, until waited for
  };
  int answer(unsigned long request, uint8_t* arg, std::vector<uint8_t>& payload);
  int create_bo(uint8_t* arg);
  int get_bo_info(uint8_t* arg);
  int sync_bo(uint8_t* arg);
  int create_hwctx(uint8_t* arg, std::vector<uint8_t>& payload);
  int destroy_hwctx(uint8_t* arg);
  int config_hwctx(uint8_t* arg, std::vector<uint8_t>& payload);
  int exec_cmd(uint8_t* arg, std::vector<uint8_t>& payload);
  int get_info(uint8_t* arg, std::vector<uint8_t>& payload);
  int set_state(uint8_t* arg, std::vector<uint8_t>& payload);
  int gem_close(uint8_t* arg);
  std::map<uint32_t, Context> contexts_;
  uint32_t heap_ = 0;       // the DEV_HEAP BO's handle, 0 while there is none
  uint64_t heap_used_ = 0;  // bytes of the heap given to DEV BOs
  uint64_t heap_peak_ = 0;
  std::map<uint64_t, uint64_t> heap_ranges_;  // live DEV BOs: heap offset -> page-rounded bytes
  std::vector<IoctlRecord> records_;
  std::vector<SubmittedCommand> submitted_;
  std::map<uint32_t, Bo> bos_;
  std::map<std::string, int> fail_next_;
  uint32_t next_bo_ = 1, next_ctx_ = 1, next_syncobj_ = 1;
  uint64_t next_seq_ = 1, next_addr_ = 0, next_map_ = 0;  // addr/map: bytes assigned above the bases
};

}  // namespace xdna::npu::driver

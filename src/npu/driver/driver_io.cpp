// KernelIo: the real system calls on /dev/accel/accelN. DryRunIo: the amdxdna driver's answers
// without a device (see driver_io.h). The dry run checks arguments the way the kernel does
// (drivers/accel/amdxdna: amdxdna_gem.c, amdxdna_ctx.c, aie2_ctx.c, aie2_pci.c) so that a
// runtime that passes here fails on hardware only for reasons the hardware alone can show.
#include "npu/driver/driver_io.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xf86drm.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <limits>
#include <stdexcept>

#include "npu/driver/amdxdna_uapi.h"
#include "npu/driver/device.h"

namespace xdna::npu::driver {

namespace {

class KernelIo final : public DriverIo {
 public:
  KernelIo(int fd, std::string node) : fd_(fd), node_(std::move(node)) {}
  ~KernelIo() override { ::close(fd_); }
  KernelIo(const KernelIo&) = delete;
  KernelIo& operator=(const KernelIo&) = delete;

  int ioctl(unsigned long request, void* arg) override {
    for (;;) {
      if (::ioctl(fd_, request, arg) == 0) return 0;
      if (errno != EINTR && errno != EAGAIN) return -errno;
    }
  }
  void* mmap(size_t length, uint64_t offset) override {
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(offset));
    return p == MAP_FAILED ? nullptr : p;
  }
  void munmap(void* addr, size_t length) override { ::munmap(addr, length); }

  int syncobj_wait(uint32_t syncobj, uint64_t point, int64_t timeout_ns) override {
    // drmSyncobjTimelineWait takes an absolute CLOCK_MONOTONIC deadline, not a duration.
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t now_ns = int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
    const int64_t max = std::numeric_limits<int64_t>::max();
    const int64_t deadline = timeout_ns < 0 || timeout_ns > max - now_ns ? max : now_ns + timeout_ns;
    // WAIT_FOR_SUBMIT: a point not yet attached to a fence is waited for, not an EINVAL.
    uint64_t p = point;
    return drmSyncobjTimelineWait(fd_, &syncobj, &p, 1, deadline,
                                  DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL | DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT,
                                  nullptr);
  }
  std::string describe() const override { return node_; }

 private:
  int fd_;
  std::string node_;
};

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(uint8_t* p, const T& v) {
  std::memcpy(p, &v, sizeof v);
}

uint64_t page_align(uint64_t n) { return (n + DryRunIo::kPage - 1) / DryRunIo::kPage * DryRunIo::kPage; }

void append(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

void* user_ptr(uint64_t v) { return reinterpret_cast<void*>(static_cast<uintptr_t>(v)); }

}  // namespace

std::unique_ptr<DriverIo> open_kernel_io(const std::string& node) {
  const int fd = ::open(node.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string hint(error_hint("open", err));
    throw DriverError("open", err, node + (hint.empty() ? "" : ": " + hint));
  }
  return std::make_unique<KernelIo>(fd, node);
}

// ---- DryRunIo ----

DryRunIo::DryRunIo() = default;
DryRunIo::~DryRunIo() = default;

const std::vector<uint8_t>& DryRunIo::bo_bytes(uint32_t handle) const {
  auto it = bos_.find(handle);
  if (it == bos_.end()) throw std::out_of_range("dry run: no live BO with handle " + std::to_string(handle));
  return it->second.bytes;
}

void DryRunIo::fail_next(const std::string& call, int err) { fail_next_[call] = err; }

int DryRunIo::ioctl(unsigned long request, void* arg) {
  IoctlRecord rec;
  rec.request = request;
  rec.call = std::string(uapi::ioctl_name(request));
  if (rec.call.empty()) {  // the kernel answers ENOTTY to an ioctl it does not know
    rec.call = "UNKNOWN";
    records_.push_back(std::move(rec));
    return -ENOTTY;
  }
  const size_t n = _IOC_SIZE(request);
  rec.in.assign(static_cast<uint8_t*>(arg), static_cast<uint8_t*>(arg) + n);
  std::vector<uint8_t> work = rec.in;
  int r;
  if (auto it = fail_next_.find(rec.call); it != fail_next_.end()) {
    r = -it->second;
    fail_next_.erase(it);
  } else {
    r = answer(request, work.data(), rec.payload);
  }
  if (r == 0) std::memcpy(arg, work.data(), n);
  rec.out = r == 0 ? work : rec.in;
  records_.push_back(std::move(rec));
  return r;
}

int DryRunIo::answer(unsigned long request, uint8_t* arg, std::vector<uint8_t>& payload) {
  switch (request) {
    case uapi::kIoctlCreateBo: return create_bo(arg);
    case uapi::kIoctlGetBoInfo: return get_bo_info(arg);
    case uapi::kIoctlSyncBo: return sync_bo(arg);
    case uapi::kIoctlCreateHwctx: return create_hwctx(arg, payload);
    case uapi::kIoctlDestroyHwctx: return destroy_hwctx(arg);
    case uapi::kIoctlConfigHwctx: return config_hwctx(arg, payload);
    case uapi::kIoctlExecCmd: return exec_cmd(arg, payload);
    case uapi::kIoctlGetInfo: return get_info(arg, payload);
    case uapi::kIoctlSetState: return set_state(arg, payload);
    case uapi::kIoctlGemClose: return gem_close(arg);
    default: return -ENOTTY;
  }
}

int DryRunIo::create_bo(uint8_t* arg) {
  auto a = load<uapi::create_bo>(arg);
  if (a.flags != 0 || a.vaddr != 0 || a.size == 0) return -EINVAL;  // flags, vaddr: MBZ
  Bo bo;
  bo.type = a.type;
  bo.size = a.size;
  const uint64_t span = page_align(a.size);
  switch (a.type) {
    case uapi::BO_SHMEM:
    case uapi::BO_CMD:
      bo.xdna_addr = kBoAddrBase + next_addr_;
      next_addr_ += span;
      break;
    case uapi::BO_DEV_HEAP:  // one per client, at most AIE2_DEVM_SIZE, at AIE2_DEVM_BASE
      if (heap_ != 0) return -EBUSY;
      if (a.size > kDevHeapMax) return -EINVAL;
      bo.xdna_addr = kDevHeapAddr;
      break;
    case uapi::BO_DEV: {  // carved out of the client's heap
      auto heap = bos_.find(heap_);
      if (heap == bos_.end()) return -EINVAL;
      uint64_t at = 0;  // first fit among the live ranges (ordered by offset)
      for (const auto& [off, bytes] : heap_ranges_) {
        if (off - at >= span) break;
        at = off + bytes;
      }
      if (at + span > heap->second.size) return -ENOMEM;
      bo.xdna_addr = heap->second.xdna_addr + at;
      heap_ranges_.emplace(at, span);
      heap_used_ += span;
      heap_peak_ = std::max(heap_peak_, heap_used_);
      break;
    }
    default: return -EINVAL;
  }
  bo.map_offset = kMapOffsetBase + next_map_;
  next_map_ += span;
  bo.bytes.assign(a.size, 0);
  a.handle = next_bo_++;
  if (a.type == uapi::BO_DEV_HEAP) heap_ = a.handle;
  bos_.emplace(a.handle, std::move(bo));
  store(arg, a);
  return 0;
}

int DryRunIo::get_bo_info(uint8_t* arg) {
  auto a = load<uapi::get_bo_info>(arg);
  if (a.ext != 0 || a.ext_flags != 0 || a.pad != 0) return -EINVAL;
  auto it = bos_.find(a.handle);
  if (it == bos_.end()) return -ENOENT;
  a.map_offset = it->second.map_offset;
  a.vaddr = 0;  // the user maps it
  a.xdna_addr = it->second.xdna_addr;
  store(arg, a);
  return 0;
}

int DryRunIo::sync_bo(uint8_t* arg) {
  const auto a = load<uapi::sync_bo>(arg);
  auto it = bos_.find(a.handle);
  if (it == bos_.end()) return -ENOENT;
  if (a.direction > uapi::SYNC_FROM_DEVICE) return -EINVAL;
  if (a.offset > it->second.size || a.size > it->second.size - a.offset) return -EINVAL;
  return 0;  // host memory is the device's memory here: nothing to flush
}

int DryRunIo::create_hwctx(uint8_t* arg, std::vector<uint8_t>& payload) {
  auto a = load<uapi::create_hwctx>(arg);
  if (a.ext != 0 || a.ext_flags != 0) return -EINVAL;
  if (a.qos_p == 0) return -EFAULT;  // the driver copies the QoS struct unconditionally
  append(payload, user_ptr(a.qos_p), sizeof(uapi::qos_info));
  // aie2_hwctx_init: no heap -> ENOENT ("dev heap object not exist"); a heap that was never
  // mapped has no user address for the firmware -> EINVAL.
  auto heap = bos_.find(heap_);
  if (heap == bos_.end()) return -ENOENT;
  if (!heap->second.mapped) return -EINVAL;
  // The partition: whole columns of 4 compute tiles (aie2p.md: rows 2-5 compute).
  constexpr uint32_t kCoreRows = 4;
  if (a.num_tiles == 0 || a.num_tiles > kColumns * kCoreRows) return -EINVAL;
  const uint32_t cols = (a.num_tiles + kCoreRows - 1) / kCoreRows;
  bool used[kColumns] = {};
  for (const auto& [h, c] : contexts_)
    for (uint32_t i = 0; i < c.num_col; ++i) used[c.start_col + i] = true;
  int start = -1;
  for (uint32_t s = 0; s + cols <= kColumns && start < 0; ++s) {
    bool free = true;
    for (uint32_t i = 0; i < cols; ++i) free = free && !used[s + i];
    if (free) start = static_cast<int>(s);
  }
  if (start < 0) return -EBUSY;
  Context ctx;
  ctx.syncobj = next_syncobj_++;
  ctx.start_col = static_cast<uint32_t>(start);
  ctx.num_col = cols;
  a.handle = next_ctx_++;
  a.syncobj_handle = ctx.syncobj;
  a.umq_doorbell = 0;
  contexts_.emplace(a.handle, std::move(ctx));
  store(arg, a);
  return 0;
}

int DryRunIo::destroy_hwctx(uint8_t* arg) {
  const auto a = load<uapi::destroy_hwctx>(arg);
  if (a.pad != 0) return -EINVAL;
  return contexts_.erase(a.handle) ? 0 : -EINVAL;
}

int DryRunIo::config_hwctx(uint8_t* arg, std::vector<uint8_t>& payload) {
  const auto a = load<uapi::config_hwctx>(arg);
  if (a.pad != 0 || !contexts_.count(a.handle)) return -EINVAL;
  if (a.param_type != uapi::CONFIG_CU) return -EOPNOTSUPP;
  if (a.param_val == 0) return -EFAULT;
  if (a.param_val_size > uapi::kConfigPayloadMax || a.param_val_size < sizeof(uapi::hwctx_param_config_cu))
    return -EINVAL;
  append(payload, user_ptr(a.param_val), a.param_val_size);
  const auto head = load<uapi::hwctx_param_config_cu>(payload.data());
  const size_t need = sizeof head + size_t(head.num_cus) * sizeof(uapi::cu_config);
  if (head.num_cus == 0 || need > a.param_val_size) return -EINVAL;
  for (uint16_t i = 0; i < head.num_cus; ++i) {
    const auto cu = load<uapi::cu_config>(payload.data() + sizeof head + i * sizeof(uapi::cu_config));
    if (!bos_.count(cu.cu_bo)) return -EINVAL;
  }
  return 0;
}

int DryRunIo::exec_cmd(uint8_t* arg, std::vector<uint8_t>& payload) {
  auto a = load<uapi::exec_cmd>(arg);
  if (a.ext != 0 || a.ext_flags != 0) return -EINVAL;
  auto ctx = contexts_.find(a.hwctx);
  if (ctx == contexts_.end()) return -EINVAL;
  if (a.type != uapi::CMD_SUBMIT_EXEC_BUF || a.cmd_count != 1) return -EINVAL;  // one command per call
  if (a.arg_count > 0 && a.args == 0) return -EFAULT;
  append(payload, user_ptr(a.args), size_t(a.arg_count) * sizeof(uint32_t));
  const uint32_t cmd_handle = static_cast<uint32_t>(a.cmd_handles);
  auto cmd = bos_.find(cmd_handle);
  if (cmd == bos_.end() || cmd->second.type != uapi::BO_CMD) return -EINVAL;
  for (uint32_t i = 0; i < a.arg_count; ++i)
    if (!bos_.count(load<uint32_t>(payload.data() + 4 * i))) return -ENOENT;
  SubmittedCommand sub;
  sub.bo_handle = cmd_handle;
  sub.words.resize(cmd->second.bytes.size() / 4);
  std::memcpy(sub.words.data(), cmd->second.bytes.data(), sub.words.size() * 4);
  submitted_.push_back(std::move(sub));
  // One counter for all contexts, from 1, as the contract states (the real driver counts per
  // context; waits only compare a point with its own context's last seq, so both work).
  a.seq = next_seq_++;
  ctx->second.last_seq = a.seq;
  ++ctx->second.submitted;
  ctx->second.pending[a.seq] = cmd_handle;
  store(arg, a);
  return 0;
}

int DryRunIo::get_info(uint8_t* arg, std::vector<uint8_t>& payload) {
  auto a = load<uapi::get_info>(arg);
  auto reply = [&](const void* p, size_t n) {
    if (a.buffer == 0) return -EFAULT;
    if (a.buffer_size < n) return -EINVAL;
    std::memcpy(user_ptr(a.buffer), p, n);
    append(payload, p, n);
    return 0;
  };
  switch (a.param) {
    case uapi::QUERY_AIE_METADATA: {
      // An npu2 (Strix) array per aie2p.md "Array geometry": 8 columns x 6 rows, row 0 shim,
      // row 1 memtile, rows 2-5 compute; DMA channels (S2MM + MM2S) compute 2+2, memtile 6+6,
      // shim 2+2; locks 16 / 64 / 16. col_size is the AIE2 column address space (mlir-aie
      // AIETargetModel: column shift 25 = 32 MiB). version and event_reg_count are not in
      // aie2p.md: the dry run answers 2.0 and 0, which a real device replaces.
      uapi::query_aie_metadata m{};
      m.col_size = 1u << 25;
      m.cols = kColumns;
      m.rows = 6;
      m.version = {2, 0};
      m.core = {4, 2, 4, 16, 0, {}};
      m.mem = {1, 1, 12, 64, 0, {}};
      m.shim = {1, 0, 4, 16, 0, {}};
      return reply(&m, sizeof m);
    }
    case uapi::QUERY_AIE_VERSION: {
      uapi::query_aie_version v{2, 0};
      return reply(&v, sizeof v);
    }
    case uapi::QUERY_CLOCK_METADATA: {
      // The kernel's clock names; frequencies: the top of the npu4 (Strix) DPM table from
      // aie2p.md "Clock". A real device reports its current level instead.
      uapi::query_clock_metadata c{};
      std::memcpy(c.mp_npu_clock.name, "MP-NPU Clock", 13);
      c.mp_npu_clock.freq_mhz = 1267;
      std::memcpy(c.h_clock.name, "H Clock", 8);
      c.h_clock.freq_mhz = 1800;
      return reply(&c, sizeof c);
    }
    case uapi::QUERY_FIRMWARE_VERSION: {
      uapi::query_firmware_version v{1, 5, 2, 380};  // the dry run's own: no firmware runs here
      return reply(&v, sizeof v);
    }
    case uapi::QUERY_HW_CONTEXTS: {
      // One entry per live context while the buffer has room; buffer_size out = bytes written
      // (kernels differ here; readers should stop at the first zero context_id instead).
      if (a.buffer == 0) return -EFAULT;
      const size_t room = a.buffer_size / sizeof(uapi::query_hwctx);
      size_t written = 0;
      for (const auto& [h, c] : contexts_) {
        if (written == room) break;
        uapi::query_hwctx e{};
        e.context_id = h;
        e.start_col = c.start_col;
        e.num_col = c.num_col;
        e.pid = ::getpid();
        e.command_submissions = c.submitted;
        e.command_completions = c.completed;
        std::memcpy(static_cast<uint8_t*>(user_ptr(a.buffer)) + written * sizeof e, &e, sizeof e);
        append(payload, &e, sizeof e);
        ++written;
      }
      a.buffer_size = static_cast<uint32_t>(written * sizeof(uapi::query_hwctx));
      store(arg, a);
      return 0;
    }
    default: return -EOPNOTSUPP;
  }
}

int DryRunIo::set_state(uint8_t* arg, std::vector<uint8_t>& payload) {
  const auto a = load<uapi::set_state>(arg);
  if (a.param != uapi::SET_POWER_MODE) return -EOPNOTSUPP;
  if (a.buffer == 0) return -EFAULT;
  if (a.buffer_size < sizeof(uapi::set_power_mode)) return -EINVAL;
  append(payload, user_ptr(a.buffer), sizeof(uapi::set_power_mode));
  const auto m = load<uapi::set_power_mode>(payload.data());
  for (uint8_t b : m.pad)
    if (b != 0) return -EINVAL;
  return m.power_mode <= uapi::POWER_MODE_TURBO ? 0 : -EINVAL;
}

int DryRunIo::gem_close(uint8_t* arg) {
  const auto a = load<uapi::gem_close>(arg);
  auto it = bos_.find(a.handle);
  if (it == bos_.end()) return -EINVAL;
  if (a.handle == heap_) {
    heap_ = 0;
    heap_used_ = 0;
    heap_ranges_.clear();
  } else if (it->second.type == uapi::BO_DEV && heap_ != 0) {
    const auto r = heap_ranges_.find(it->second.xdna_addr - kDevHeapAddr);
    if (r != heap_ranges_.end()) heap_used_ -= r->second, heap_ranges_.erase(r);
  }
  bos_.erase(it);
  return 0;
}

void* DryRunIo::mmap(size_t length, uint64_t offset) {
  for (auto& [h, bo] : bos_) {
    if (bo.map_offset != offset) continue;
    if (length == 0 || length > bo.size) break;
    bo.mapped = true;
    return bo.bytes.data();
  }
  errno = EINVAL;
  return nullptr;
}

void DryRunIo::munmap(void* addr, size_t) {
  for (auto& [h, bo] : bos_)
    if (bo.bytes.data() == addr) bo.mapped = false;
}

int DryRunIo::syncobj_wait(uint32_t syncobj, uint64_t point, int64_t) {
  if (auto it = fail_next_.find("SYNCOBJ_WAIT"); it != fail_next_.end()) {
    const int err = it->second;
    fail_next_.erase(it);
    return -err;
  }
  for (auto& [h, ctx] : contexts_) {
    if (ctx.syncobj != syncobj) continue;
    if (point > ctx.last_seq) return -ETIME;  // never submitted: a real wait would time out
    // Commands complete in order: everything up to `point` is done; the firmware writes
    // COMPLETED (4) into the header's state bits [3:0] (ert.h).
    for (auto p = ctx.pending.begin(); p != ctx.pending.end() && p->first <= point;) {
      if (auto bo = bos_.find(p->second); bo != bos_.end() && bo->second.bytes.size() >= 4) {
        uint32_t header = load<uint32_t>(bo->second.bytes.data());
        store(bo->second.bytes.data(), (header & ~0xFu) | 4u);
      }
      ++ctx.completed;
      p = ctx.pending.erase(p);
    }
    return 0;
  }
  return -ENOENT;
}

}  // namespace xdna::npu::driver

// RAII owners over amdxdna (device.h). Each method is one ioctl (or two) through DriverIo, so
// the same code runs on hardware and in the dry run.
#include "npu/driver/device.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "npu/driver/amdxdna_uapi.h"

namespace xdna::npu::driver {

namespace {

uint64_t ptr_value(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

std::string compose(const std::string& call, int err, const std::string& what) {
  std::string msg = "amdxdna " + call + " failed: " + errno_name(err) + " (" + std::strerror(err) + ")";
  std::string detail = what.empty() ? std::string(error_hint(call, err)) : what;
  if (!detail.empty()) msg += ": " + detail;
  return msg;
}

// Runs one ioctl; throws DriverError naming `call` on failure.
void check(DriverIo& io, const char* call, unsigned long request, void* arg, const std::string& what = {}) {
  const int r = io.ioctl(request, arg);
  if (r != 0) throw DriverError(call, -r, what);
}

}  // namespace

std::string errno_name(int err) {
  const char* name = strerrorname_np(err);
  return name ? name : "errno " + std::to_string(err);
}

std::string_view error_hint(std::string_view call, int err) {
  struct Hint {
    std::string_view call;  // "" matches any call
    int err;
    std::string_view text;
  };
  // Specific calls first; the kernel sources named in each line say where the error comes from.
  static constexpr Hint kHints[] = {
      {"open", ENOENT, "no such device node (is the amdxdna driver loaded?)"},
      {"open", EACCES, "the user is not in the render group"},
      {"open", EPERM, "the user is not in the render group"},
      {"open", ENXIO, "the node exists but no device is bound to it"},
      {"CREATE_HWCTX", ENOENT, "no DEV_HEAP buffer object yet (aie2_hwctx_init needs one first)"},
      {"CREATE_HWCTX", EINVAL,
       "no DEV_HEAP buffer object yet, the DEV_HEAP is not mapped, or the partition is larger than the array"},
      {"CREATE_HWCTX", EBUSY, "all columns are in use by other contexts"},
      {"CREATE_HWCTX", EACCES, "the user is not in the render group"},
      {"CREATE_HWCTX", EFAULT, "qos_p does not point to a QoS struct"},
      {"CREATE_BO", EINVAL, "bad size, type or flags (DEV_HEAP over 64 MiB, or a DEV BO without a DEV_HEAP)"},
      {"CREATE_BO", EBUSY, "this process already has its one DEV_HEAP"},
      {"CREATE_BO", ENOMEM, "out of memory (a DEV BO: the DEV_HEAP is full)"},
      {"GET_BO_INFO", ENOENT, "no BO with this handle"},
      {"SYNC_BO", ENOENT, "no BO with this handle"},
      {"SYNC_BO", EINVAL, "the range is outside the BO, or the direction is not 0 or 1"},
      {"CONFIG_HWCTX", EINVAL, "unknown context, a CU's PDI BO handle is unknown, or the payload is over 4 KiB"},
      {"EXEC_CMD", EINVAL, "unknown context, not a CMD BO, or more than one command per call"},
      {"EXEC_CMD", ENOENT, "an argument BO handle is unknown"},
      {"DESTROY_HWCTX", EINVAL, "no context with this handle"},
      {"GEM_CLOSE", EINVAL, "no BO with this handle"},
      {"GET_INFO", EOPNOTSUPP, "this driver does not answer the query (an older kernel?)"},
      {"syncobj wait", ETIME, "the command did not complete in time (the NPU may be hung: see dmesg)"},
      {"syncobj wait", ENOENT, "no syncobj with this handle"},
      {"mmap", EINVAL, "bad map offset or length"},
      {"", ENOTTY, "the driver does not know this request (wrong struct size or number, or not an amdxdna node)"},
      {"", ENODEV, "the device is gone or resetting"},
      {"", EFAULT, "a pointer in the argument structure is bad"},
      {"", ENOMEM, "out of memory"},
      {"", ETIMEDOUT, "the firmware did not answer"},
      {"", EACCES, "permission denied (the render group?)"},
  };
  for (const Hint& h : kHints)
    if (h.err == err && (h.call.empty() || h.call == call)) return h.text;
  return {};
}

DriverError::DriverError(std::string call, int err, const std::string& what)
    : std::runtime_error(compose(call, err, what)), call_(std::move(call)), err_(err) {}

std::string FirmwareVersion::text() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) + "." +
         std::to_string(build);
}

// ---- Device ----

Device::Device(std::unique_ptr<DriverIo> io) : io_(std::move(io)) {
  if (!io_) throw std::invalid_argument("Device: null DriverIo");
}

void Device::get_info(uint32_t param, void* buffer, uint32_t size, const char* what) {
  uapi::get_info g{};
  g.param = param;
  g.buffer_size = size;
  g.buffer = ptr_value(buffer);
  const int r = io_->ioctl(uapi::kIoctlGetInfo, &g);
  if (r != 0) {
    std::string hint(error_hint("GET_INFO", -r));
    throw DriverError("GET_INFO", -r, std::string("query ") + what + (hint.empty() ? "" : ": " + hint));
  }
}

AieMetadata Device::aie_metadata() {
  uapi::query_aie_metadata m{};
  get_info(uapi::QUERY_AIE_METADATA, &m, sizeof m, "AIE_METADATA");
  auto tile = [](const uapi::query_aie_tile_metadata& t) {
    return TileMetadata{t.row_count, t.row_start, t.dma_channel_count, t.lock_count, t.event_reg_count};
  };
  AieMetadata a;
  a.col_size = m.col_size;
  a.cols = m.cols;
  a.rows = m.rows;
  a.version_major = m.version.major;
  a.version_minor = m.version.minor;
  a.core = tile(m.core);
  a.mem = tile(m.mem);
  a.shim = tile(m.shim);
  return a;
}

std::vector<ClockInfo> Device::clocks() {
  uapi::query_clock_metadata c{};
  get_info(uapi::QUERY_CLOCK_METADATA, &c, sizeof c, "CLOCK_METADATA");
  auto clock = [](const uapi::query_clock& q) {
    const char* name = reinterpret_cast<const char*>(q.name);
    return ClockInfo{std::string(name, strnlen(name, sizeof q.name)), q.freq_mhz};
  };
  return {clock(c.mp_npu_clock), clock(c.h_clock)};
}

FirmwareVersion Device::firmware_version() {
  uapi::query_firmware_version v{};
  get_info(uapi::QUERY_FIRMWARE_VERSION, &v, sizeof v, "FIRMWARE_VERSION");
  return {v.major, v.minor, v.patch, v.build};
}

std::vector<HwContextInfo> Device::hw_contexts() {
  // Kernels disagree on what buffer_size says on return, so the buffer starts zeroed and the
  // list ends at the first entry with context id 0 (never a valid id).
  constexpr size_t kMaxEntries = 256;
  std::vector<uapi::query_hwctx> buf(kMaxEntries);
  get_info(uapi::QUERY_HW_CONTEXTS, buf.data(), static_cast<uint32_t>(buf.size() * sizeof buf[0]),
           "HW_CONTEXTS");
  std::vector<HwContextInfo> out;
  for (const auto& e : buf) {
    if (e.context_id == 0) break;
    out.push_back({e.context_id, e.start_col, e.num_col, e.pid, e.command_submissions,
                   e.command_completions, e.migrations, e.preemptions, e.errors});
  }
  return out;
}

// ---- BufferObject ----

BufferObject::BufferObject(Device& dev, BoType type, uint64_t size) : dev_(&dev), type_(type), size_(size) {
  if (size == 0) throw std::invalid_argument("BufferObject: size 0");
  uapi::create_bo c{};
  c.size = size;
  c.type = static_cast<uint32_t>(type);
  check(dev.io(), "CREATE_BO", uapi::kIoctlCreateBo, &c);
  handle_ = c.handle;
  try {
    uapi::get_bo_info info{};
    info.handle = handle_;
    check(dev.io(), "GET_BO_INFO", uapi::kIoctlGetBoInfo, &info);
    xdna_addr_ = info.xdna_addr;
    map_ = dev.io().mmap(size, info.map_offset);
    if (!map_) {
      const int err = errno;
      throw DriverError("mmap", err, "BO " + std::to_string(handle_) + " of " + std::to_string(size) +
                                         " bytes at offset " + std::to_string(info.map_offset));
    }
  } catch (...) {
    release();
    throw;
  }
}

BufferObject::BufferObject(BufferObject&& o) noexcept
    : dev_(o.dev_), type_(o.type_), handle_(std::exchange(o.handle_, 0)), size_(std::exchange(o.size_, 0)),
      xdna_addr_(std::exchange(o.xdna_addr_, 0)), map_(std::exchange(o.map_, nullptr)) {}

BufferObject& BufferObject::operator=(BufferObject&& o) noexcept {
  if (this != &o) {
    release();
    dev_ = o.dev_;
    type_ = o.type_;
    handle_ = std::exchange(o.handle_, 0);
    size_ = std::exchange(o.size_, 0);
    xdna_addr_ = std::exchange(o.xdna_addr_, 0);
    map_ = std::exchange(o.map_, nullptr);
  }
  return *this;
}

BufferObject::~BufferObject() { release(); }

void BufferObject::release() noexcept {
  if (map_) dev_->io().munmap(map_, size_);
  map_ = nullptr;
  if (handle_ != 0) {
    uapi::gem_close g{};
    g.handle = handle_;
    dev_->io().ioctl(uapi::kIoctlGemClose, &g);  // nothing useful to do if it fails
  }
  handle_ = 0;
}

void BufferObject::sync(uint32_t direction, uint64_t offset, uint64_t size) {
  if (offset > size_ || size > size_ - offset)
    throw std::invalid_argument("BufferObject::sync: range [" + std::to_string(offset) + ", +" +
                                std::to_string(size) + ") is outside the BO's " + std::to_string(size_) +
                                " bytes");
  uapi::sync_bo s{};
  s.handle = handle_;
  s.direction = direction;
  s.offset = offset;
  s.size = size == 0 ? size_ - offset : size;
  check(dev_->io(), "SYNC_BO", uapi::kIoctlSyncBo, &s);
}

void BufferObject::sync_to_device(uint64_t offset, uint64_t size) { sync(uapi::SYNC_TO_DEVICE, offset, size); }
void BufferObject::sync_from_device(uint64_t offset, uint64_t size) { sync(uapi::SYNC_FROM_DEVICE, offset, size); }

// ---- HwContext ----

HwContext::HwContext(Device& dev, const HwContextParams& p) : dev_(&dev) {
  uapi::qos_info qos{p.gops, p.fps, p.dma_bandwidth, p.latency, p.frame_exec_time, p.priority};
  uapi::create_hwctx c{};
  c.qos_p = ptr_value(&qos);
  c.max_opc = p.max_opc;
  c.num_tiles = p.num_tiles;
  check(dev.io(), "CREATE_HWCTX", uapi::kIoctlCreateHwctx, &c);
  handle_ = c.handle;
  syncobj_ = c.syncobj_handle;
}

HwContext::HwContext(HwContext&& o) noexcept
    : dev_(o.dev_), handle_(std::exchange(o.handle_, 0)), syncobj_(std::exchange(o.syncobj_, 0)) {}

HwContext::~HwContext() {
  if (handle_ == 0) return;
  uapi::destroy_hwctx d{};
  d.handle = handle_;
  dev_->io().ioctl(uapi::kIoctlDestroyHwctx, &d);  // a destructor must not throw
}

void HwContext::configure_cus(std::span<const CuConfig> cus) {
  constexpr size_t kHead = sizeof(uapi::hwctx_param_config_cu), kEntry = sizeof(uapi::cu_config);
  constexpr size_t kMaxCus = (uapi::kConfigPayloadMax - kHead) / kEntry;
  if (cus.empty() || cus.size() > kMaxCus)
    throw std::invalid_argument("configure_cus: " + std::to_string(cus.size()) + " CUs (1.." +
                                std::to_string(kMaxCus) + " fit the driver's 4 KiB payload)");
  std::vector<uint8_t> payload(kHead + cus.size() * kEntry, 0);
  uapi::hwctx_param_config_cu head{};
  head.num_cus = static_cast<uint16_t>(cus.size());
  std::memcpy(payload.data(), &head, kHead);
  for (size_t i = 0; i < cus.size(); ++i) {
    uapi::cu_config e{};
    e.cu_bo = cus[i].pdi_bo;
    e.cu_func = cus[i].func;
    std::memcpy(payload.data() + kHead + i * kEntry, &e, kEntry);
  }
  uapi::config_hwctx c{};
  c.handle = handle_;
  c.param_type = uapi::CONFIG_CU;
  c.param_val = ptr_value(payload.data());
  c.param_val_size = static_cast<uint32_t>(payload.size());
  check(dev_->io(), "CONFIG_HWCTX", uapi::kIoctlConfigHwctx, &c);
}

uint64_t HwContext::submit(const BufferObject& cmd, std::span<const uint32_t> arg_bo_handles) {
  if (cmd.type() != BoType::Cmd)
    throw std::invalid_argument("HwContext::submit: BO " + std::to_string(cmd.handle()) + " is not a CMD BO");
  uapi::exec_cmd e{};
  e.hwctx = handle_;
  e.type = uapi::CMD_SUBMIT_EXEC_BUF;
  e.cmd_handles = cmd.handle();  // one command: the handle itself, not a pointer to an array
  e.args = arg_bo_handles.empty() ? 0 : ptr_value(arg_bo_handles.data());
  e.cmd_count = 1;
  e.arg_count = static_cast<uint32_t>(arg_bo_handles.size());
  check(dev_->io(), "EXEC_CMD", uapi::kIoctlExecCmd, &e);
  return e.seq;
}

void HwContext::wait(uint64_t seq, std::chrono::milliseconds timeout) {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const int r = dev_->io().syncobj_wait(syncobj_, seq, ns);
  if (r == 0) return;
  std::string what = "command seq " + std::to_string(seq) + " on context " + std::to_string(handle_);
  if (r == -ETIME) what += " did not complete within " + std::to_string(timeout.count()) + " ms";
  std::string hint(error_hint("syncobj wait", -r));
  throw DriverError("syncobj wait", -r, what + (hint.empty() ? "" : ": " + hint));
}

}  // namespace xdna::npu::driver

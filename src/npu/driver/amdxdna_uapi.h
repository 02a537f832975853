// The amdxdna DRM user API, written from the Linux kernel's include/uapi/drm/amdxdna_accel.h
// and ../shared/docs/aie2p.md "Driver user API". Only layouts and numbers live here: every
// struct's size and every field's offset is checked against the x86-64 layout, because the
// struct size is encoded in the ioctl request number and a wrong size is simply rejected.
#pragma once
#include <drm.h>  // libdrm: DRM_IOWR, DRM_COMMAND_BASE, DRM_IOCTL_GEM_CLOSE, struct drm_gem_close

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace xdna::npu::driver::uapi {

// Ioctl numbers relative to DRM_COMMAND_BASE (enum amdxdna_drm_ioctl_id).
enum ioctl_id : uint32_t {
  CREATE_HWCTX = 0, DESTROY_HWCTX = 1, CONFIG_HWCTX = 2, CREATE_BO = 3, GET_BO_INFO = 4,
  SYNC_BO = 5, EXEC_CMD = 6, GET_INFO = 7, SET_STATE = 8,
};

struct qos_info {
  uint32_t gops, fps, dma_bandwidth, latency, frame_exec_time, priority;
};

struct create_hwctx {
  uint64_t ext;        // must be zero
  uint64_t ext_flags;  // must be zero
  uint64_t qos_p;      // user pointer to a qos_info
  uint32_t umq_bo, log_buf_bo, max_opc, num_tiles, mem_size;
  uint32_t umq_doorbell;    // out
  uint32_t handle;          // out
  uint32_t syncobj_handle;  // out: DRM syncobj whose timeline points are EXEC_CMD seqs
};

struct destroy_hwctx {
  uint32_t handle, pad;
};

// One CU of CONFIG_CU: the BO holding its PDI and its function index.
struct cu_config {
  uint32_t cu_bo;
  uint8_t cu_func;
  uint8_t pad[3];
};

// Header of the CONFIG_CU payload; num_cus cu_config entries follow it.
struct hwctx_param_config_cu {
  uint16_t num_cus;
  uint16_t pad[3];
};

enum config_hwctx_param : uint32_t { CONFIG_CU = 0, ASSIGN_DBG_BUF = 1, REMOVE_DBG_BUF = 2 };

struct config_hwctx {
  uint32_t handle, param_type;
  uint64_t param_val;  // user pointer to the payload (CONFIG_CU: hwctx_param_config_cu + entries)
  uint32_t param_val_size, pad;
};
// The driver copies a pointed-to parameter of at most one page.
inline constexpr uint32_t kConfigPayloadMax = 4096;

enum bo_type : uint32_t { BO_INVALID = 0, BO_SHMEM = 1, BO_DEV_HEAP = 2, BO_DEV = 3, BO_CMD = 4 };

struct create_bo {
  uint64_t flags;  // must be zero
  uint64_t vaddr;  // must be zero
  uint64_t size;
  uint32_t type;
  uint32_t handle;  // out
};

struct get_bo_info {
  uint64_t ext, ext_flags;
  uint32_t handle, pad;
  uint64_t map_offset;  // out: DRM fake offset for mmap() of the device fd
  uint64_t vaddr;       // out
  uint64_t xdna_addr;   // out: the device address instruction streams use
};

enum sync_direction : uint32_t { SYNC_TO_DEVICE = 0, SYNC_FROM_DEVICE = 1 };

struct sync_bo {
  uint32_t handle, direction;
  uint64_t offset, size;
};

enum cmd_type : uint32_t { CMD_SUBMIT_EXEC_BUF = 0, CMD_SUBMIT_DEPENDENCY = 1, CMD_SUBMIT_SIGNAL = 2 };

struct exec_cmd {
  uint64_t ext, ext_flags;
  uint32_t hwctx, type;
  uint64_t cmd_handles;  // the command BO handle itself when cmd_count is 1, else a user pointer
  uint64_t args;         // user pointer to arg_count u32 BO handles
  uint32_t cmd_count, arg_count;
  uint64_t seq;  // out: the syncobj timeline point of this command
};

// GET_INFO params (enum amdxdna_drm_get_param).
enum get_param : uint32_t {
  QUERY_AIE_STATUS = 0, QUERY_AIE_METADATA = 1, QUERY_AIE_VERSION = 2, QUERY_CLOCK_METADATA = 3,
  QUERY_SENSORS = 4, QUERY_HW_CONTEXTS = 5, QUERY_FIRMWARE_VERSION = 8, GET_POWER_MODE = 9,
};

struct get_info {
  uint32_t param;
  uint32_t buffer_size;  // in: the buffer's size; out (HW_CONTEXTS): varies by kernel version
  uint64_t buffer;       // user pointer to the reply structure
};

struct query_aie_version {
  uint32_t major, minor;
};

struct query_aie_tile_metadata {
  uint16_t row_count, row_start, dma_channel_count, lock_count, event_reg_count;
  uint16_t pad[3];
};

struct query_aie_metadata {
  uint32_t col_size;  // bytes of AIE address space per column
  uint16_t cols, rows;
  query_aie_version version;
  query_aie_tile_metadata core, mem, shim;
};

struct query_clock {
  uint8_t name[16];  // NUL-terminated
  uint32_t freq_mhz, pad;
};

struct query_clock_metadata {
  query_clock mp_npu_clock, h_clock;
};

struct query_firmware_version {
  uint32_t major, minor, patch, build;
};

// One entry of the QUERY_HW_CONTEXTS array. Context ids start at 1 (0 is the invalid handle).
struct query_hwctx {
  uint32_t context_id, start_col, num_col, pad;
  int64_t pid;
  uint64_t command_submissions, command_completions, migrations, preemptions, errors;
};

enum set_param : uint32_t { SET_POWER_MODE = 0, WRITE_AIE_MEM = 1, WRITE_AIE_REG = 2 };
enum power_mode : uint8_t {
  POWER_MODE_DEFAULT = 0, POWER_MODE_LOW = 1, POWER_MODE_MEDIUM = 2, POWER_MODE_HIGH = 3,
  POWER_MODE_TURBO = 4,
};

struct set_state {
  uint32_t param, buffer_size;
  uint64_t buffer;
};

struct set_power_mode {
  uint8_t power_mode;
  uint8_t pad[7];
};

// Request numbers: DRM_IOWR('d', DRM_COMMAND_BASE + id, struct).
inline constexpr unsigned long kIoctlCreateHwctx = DRM_IOWR(DRM_COMMAND_BASE + CREATE_HWCTX, create_hwctx);
inline constexpr unsigned long kIoctlDestroyHwctx = DRM_IOWR(DRM_COMMAND_BASE + DESTROY_HWCTX, destroy_hwctx);
inline constexpr unsigned long kIoctlConfigHwctx = DRM_IOWR(DRM_COMMAND_BASE + CONFIG_HWCTX, config_hwctx);
inline constexpr unsigned long kIoctlCreateBo = DRM_IOWR(DRM_COMMAND_BASE + CREATE_BO, create_bo);
inline constexpr unsigned long kIoctlGetBoInfo = DRM_IOWR(DRM_COMMAND_BASE + GET_BO_INFO, get_bo_info);
inline constexpr unsigned long kIoctlSyncBo = DRM_IOWR(DRM_COMMAND_BASE + SYNC_BO, sync_bo);
inline constexpr unsigned long kIoctlExecCmd = DRM_IOWR(DRM_COMMAND_BASE + EXEC_CMD, exec_cmd);
inline constexpr unsigned long kIoctlGetInfo = DRM_IOWR(DRM_COMMAND_BASE + GET_INFO, get_info);
inline constexpr unsigned long kIoctlSetState = DRM_IOWR(DRM_COMMAND_BASE + SET_STATE, set_state);
// The generic DRM GEM_CLOSE (struct drm_gem_close {u32 handle, pad}) frees a BO handle.
inline constexpr unsigned long kIoctlGemClose = DRM_IOCTL_GEM_CLOSE;
using gem_close = ::drm_gem_close;

// "CREATE_BO", ..., "GEM_CLOSE"; "" for a request that is not one of these.
inline std::string_view ioctl_name(unsigned long request) {
  switch (request) {
    case kIoctlCreateHwctx: return "CREATE_HWCTX";
    case kIoctlDestroyHwctx: return "DESTROY_HWCTX";
    case kIoctlConfigHwctx: return "CONFIG_HWCTX";
    case kIoctlCreateBo: return "CREATE_BO";
    case kIoctlGetBoInfo: return "GET_BO_INFO";
    case kIoctlSyncBo: return "SYNC_BO";
    case kIoctlExecCmd: return "EXEC_CMD";
    case kIoctlGetInfo: return "GET_INFO";
    case kIoctlSetState: return "SET_STATE";
    case kIoctlGemClose: return "GEM_CLOSE";
    default: return "";
  }
}

// ---- Layout checks against the kernel's x86-64 layout (aie2p.md gives the struct sizes). ----
#define XDNA_UAPI_AT(type, field, offset) static_assert(offsetof(type, field) == (offset), #type "." #field)
static_assert(sizeof(qos_info) == 24);
XDNA_UAPI_AT(qos_info, gops, 0); XDNA_UAPI_AT(qos_info, fps, 4); XDNA_UAPI_AT(qos_info, dma_bandwidth, 8);
XDNA_UAPI_AT(qos_info, latency, 12); XDNA_UAPI_AT(qos_info, frame_exec_time, 16);
XDNA_UAPI_AT(qos_info, priority, 20);

static_assert(sizeof(create_hwctx) == 56);
XDNA_UAPI_AT(create_hwctx, ext, 0); XDNA_UAPI_AT(create_hwctx, ext_flags, 8);
XDNA_UAPI_AT(create_hwctx, qos_p, 16); XDNA_UAPI_AT(create_hwctx, umq_bo, 24);
XDNA_UAPI_AT(create_hwctx, log_buf_bo, 28); XDNA_UAPI_AT(create_hwctx, max_opc, 32);
XDNA_UAPI_AT(create_hwctx, num_tiles, 36); XDNA_UAPI_AT(create_hwctx, mem_size, 40);
XDNA_UAPI_AT(create_hwctx, umq_doorbell, 44); XDNA_UAPI_AT(create_hwctx, handle, 48);
XDNA_UAPI_AT(create_hwctx, syncobj_handle, 52);

static_assert(sizeof(destroy_hwctx) == 8);
XDNA_UAPI_AT(destroy_hwctx, handle, 0); XDNA_UAPI_AT(destroy_hwctx, pad, 4);

static_assert(sizeof(cu_config) == 8);
XDNA_UAPI_AT(cu_config, cu_bo, 0); XDNA_UAPI_AT(cu_config, cu_func, 4); XDNA_UAPI_AT(cu_config, pad, 5);

static_assert(sizeof(hwctx_param_config_cu) == 8);
XDNA_UAPI_AT(hwctx_param_config_cu, num_cus, 0); XDNA_UAPI_AT(hwctx_param_config_cu, pad, 2);

static_assert(sizeof(config_hwctx) == 24);
XDNA_UAPI_AT(config_hwctx, handle, 0); XDNA_UAPI_AT(config_hwctx, param_type, 4);
XDNA_UAPI_AT(config_hwctx, param_val, 8); XDNA_UAPI_AT(config_hwctx, param_val_size, 16);
XDNA_UAPI_AT(config_hwctx, pad, 20);

static_assert(sizeof(create_bo) == 32);
XDNA_UAPI_AT(create_bo, flags, 0); XDNA_UAPI_AT(create_bo, vaddr, 8); XDNA_UAPI_AT(create_bo, size, 16);
XDNA_UAPI_AT(create_bo, type, 24); XDNA_UAPI_AT(create_bo, handle, 28);

static_assert(sizeof(get_bo_info) == 48);
XDNA_UAPI_AT(get_bo_info, ext, 0); XDNA_UAPI_AT(get_bo_info, ext_flags, 8);
XDNA_UAPI_AT(get_bo_info, handle, 16); XDNA_UAPI_AT(get_bo_info, pad, 20);
XDNA_UAPI_AT(get_bo_info, map_offset, 24); XDNA_UAPI_AT(get_bo_info, vaddr, 32);
XDNA_UAPI_AT(get_bo_info, xdna_addr, 40);

// aie2p.md lists sync_bo as 32 bytes; the kernel header (every version) has u32, u32, u64, u64 =
// 24 bytes, and 24 is what the request number must encode.
static_assert(sizeof(sync_bo) == 24);
XDNA_UAPI_AT(sync_bo, handle, 0); XDNA_UAPI_AT(sync_bo, direction, 4); XDNA_UAPI_AT(sync_bo, offset, 8);
XDNA_UAPI_AT(sync_bo, size, 16);

static_assert(sizeof(exec_cmd) == 56);
XDNA_UAPI_AT(exec_cmd, ext, 0); XDNA_UAPI_AT(exec_cmd, ext_flags, 8); XDNA_UAPI_AT(exec_cmd, hwctx, 16);
XDNA_UAPI_AT(exec_cmd, type, 20); XDNA_UAPI_AT(exec_cmd, cmd_handles, 24); XDNA_UAPI_AT(exec_cmd, args, 32);
XDNA_UAPI_AT(exec_cmd, cmd_count, 40); XDNA_UAPI_AT(exec_cmd, arg_count, 44); XDNA_UAPI_AT(exec_cmd, seq, 48);

static_assert(sizeof(get_info) == 16);
XDNA_UAPI_AT(get_info, param, 0); XDNA_UAPI_AT(get_info, buffer_size, 4); XDNA_UAPI_AT(get_info, buffer, 8);

static_assert(sizeof(query_aie_version) == 8);
XDNA_UAPI_AT(query_aie_version, major, 0); XDNA_UAPI_AT(query_aie_version, minor, 4);
static_assert(sizeof(query_aie_tile_metadata) == 16);
XDNA_UAPI_AT(query_aie_tile_metadata, row_count, 0); XDNA_UAPI_AT(query_aie_tile_metadata, row_start, 2);
XDNA_UAPI_AT(query_aie_tile_metadata, dma_channel_count, 4);
XDNA_UAPI_AT(query_aie_tile_metadata, lock_count, 6);
XDNA_UAPI_AT(query_aie_tile_metadata, event_reg_count, 8); XDNA_UAPI_AT(query_aie_tile_metadata, pad, 10);
static_assert(sizeof(query_aie_metadata) == 64);
XDNA_UAPI_AT(query_aie_metadata, col_size, 0); XDNA_UAPI_AT(query_aie_metadata, cols, 4);
XDNA_UAPI_AT(query_aie_metadata, rows, 6); XDNA_UAPI_AT(query_aie_metadata, version, 8);
XDNA_UAPI_AT(query_aie_metadata, core, 16); XDNA_UAPI_AT(query_aie_metadata, mem, 32);
XDNA_UAPI_AT(query_aie_metadata, shim, 48);

static_assert(sizeof(query_clock) == 24);
XDNA_UAPI_AT(query_clock, name, 0); XDNA_UAPI_AT(query_clock, freq_mhz, 16); XDNA_UAPI_AT(query_clock, pad, 20);
static_assert(sizeof(query_clock_metadata) == 48);
XDNA_UAPI_AT(query_clock_metadata, mp_npu_clock, 0); XDNA_UAPI_AT(query_clock_metadata, h_clock, 24);

static_assert(sizeof(query_firmware_version) == 16);
XDNA_UAPI_AT(query_firmware_version, major, 0); XDNA_UAPI_AT(query_firmware_version, minor, 4);
XDNA_UAPI_AT(query_firmware_version, patch, 8); XDNA_UAPI_AT(query_firmware_version, build, 12);

static_assert(sizeof(query_hwctx) == 64);
XDNA_UAPI_AT(query_hwctx, context_id, 0); XDNA_UAPI_AT(query_hwctx, start_col, 4);
XDNA_UAPI_AT(query_hwctx, num_col, 8); XDNA_UAPI_AT(query_hwctx, pad, 12); XDNA_UAPI_AT(query_hwctx, pid, 16);
XDNA_UAPI_AT(query_hwctx, command_submissions, 24); XDNA_UAPI_AT(query_hwctx, command_completions, 32);
XDNA_UAPI_AT(query_hwctx, migrations, 40); XDNA_UAPI_AT(query_hwctx, preemptions, 48);
XDNA_UAPI_AT(query_hwctx, errors, 56);

static_assert(sizeof(set_state) == 16);
XDNA_UAPI_AT(set_state, param, 0); XDNA_UAPI_AT(set_state, buffer_size, 4); XDNA_UAPI_AT(set_state, buffer, 8);
static_assert(sizeof(set_power_mode) == 8);

static_assert(sizeof(gem_close) == 8);
XDNA_UAPI_AT(gem_close, handle, 0); XDNA_UAPI_AT(gem_close, pad, 4);
#undef XDNA_UAPI_AT

}  // namespace xdna::npu::driver::uapi

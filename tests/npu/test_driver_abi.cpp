// The amdxdna uapi layouts and request numbers (amdxdna_uapi.h) against the kernel's x86-64
// layout: the struct sizes from aie2p.md "Driver user API" (sync_bo: 24, see the header) and the
// request encoding DRM_IOWR('d', 0x40 + n, size).
#include <gtest/gtest.h>
#include <sys/ioctl.h>

#include <cstddef>

#include "npu/driver/amdxdna_uapi.h"

namespace u = xdna::npu::driver::uapi;

// Compile-time: the header asserts every offset; repeated here for the sizes the doc lists, so a
// change to the header that drops an assert still fails this file.
static_assert(sizeof(u::create_hwctx) == 56 && sizeof(u::destroy_hwctx) == 8 && sizeof(u::config_hwctx) == 24);
static_assert(sizeof(u::cu_config) == 8 && sizeof(u::create_bo) == 32 && sizeof(u::get_bo_info) == 48);
static_assert(sizeof(u::sync_bo) == 24 && sizeof(u::exec_cmd) == 56 && sizeof(u::get_info) == 16);
static_assert(sizeof(u::set_state) == 16 && sizeof(u::qos_info) == 24);
static_assert(offsetof(u::create_hwctx, handle) == 48 && offsetof(u::create_hwctx, syncobj_handle) == 52);
static_assert(offsetof(u::exec_cmd, seq) == 48 && offsetof(u::get_bo_info, xdna_addr) == 40);

struct Expected {
  unsigned long request;
  const char* name;
  unsigned nr;
  size_t size;
};

TEST(DriverAbi, RequestNumbersEncodeSizeNrAndDirection) {
  const Expected all[] = {
      {u::kIoctlCreateHwctx, "CREATE_HWCTX", 0x40, 56}, {u::kIoctlDestroyHwctx, "DESTROY_HWCTX", 0x41, 8},
      {u::kIoctlConfigHwctx, "CONFIG_HWCTX", 0x42, 24}, {u::kIoctlCreateBo, "CREATE_BO", 0x43, 32},
      {u::kIoctlGetBoInfo, "GET_BO_INFO", 0x44, 48},    {u::kIoctlSyncBo, "SYNC_BO", 0x45, 24},
      {u::kIoctlExecCmd, "EXEC_CMD", 0x46, 56},         {u::kIoctlGetInfo, "GET_INFO", 0x47, 16},
      {u::kIoctlSetState, "SET_STATE", 0x48, 16},
  };
  for (const auto& e : all) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(_IOC_SIZE(e.request), e.size);
    EXPECT_EQ(_IOC_NR(e.request), e.nr);
    EXPECT_EQ(_IOC_TYPE(e.request), unsigned('d'));
    EXPECT_EQ(_IOC_DIR(e.request), unsigned(_IOC_READ | _IOC_WRITE));
    EXPECT_EQ(u::ioctl_name(e.request), e.name);
  }
}

TEST(DriverAbi, KnownRequestValues) {
  // Computed by hand: (dir 3 << 30) | (size << 16) | ('d' << 8) | nr.
  EXPECT_EQ(u::kIoctlCreateHwctx, 0xC0386440ul);
  EXPECT_EQ(u::kIoctlCreateBo, 0xC0206443ul);
  EXPECT_EQ(u::kIoctlSyncBo, 0xC0186445ul);
  EXPECT_EQ(u::kIoctlExecCmd, 0xC0386446ul);
  EXPECT_EQ(u::kIoctlGetInfo, 0xC0106447ul);
  // GEM_CLOSE: the generic DRM ioctl 0x09, write-only, struct drm_gem_close (8 bytes).
  EXPECT_EQ(_IOC_NR(u::kIoctlGemClose), 0x09u);
  EXPECT_EQ(_IOC_SIZE(u::kIoctlGemClose), 8u);
  EXPECT_EQ(_IOC_DIR(u::kIoctlGemClose), unsigned(_IOC_WRITE));
  EXPECT_EQ(u::ioctl_name(u::kIoctlGemClose), "GEM_CLOSE");
  EXPECT_EQ(u::ioctl_name(0x1234), "");
}

TEST(DriverAbi, EnumValuesMatchTheKernel) {
  EXPECT_EQ(u::BO_SHMEM, 1u);
  EXPECT_EQ(u::BO_DEV_HEAP, 2u);
  EXPECT_EQ(u::BO_DEV, 3u);
  EXPECT_EQ(u::BO_CMD, 4u);
  EXPECT_EQ(u::QUERY_AIE_METADATA, 1u);
  EXPECT_EQ(u::QUERY_CLOCK_METADATA, 3u);
  EXPECT_EQ(u::QUERY_HW_CONTEXTS, 5u);
  EXPECT_EQ(u::QUERY_FIRMWARE_VERSION, 8u);
  EXPECT_EQ(u::GET_POWER_MODE, 9u);
  EXPECT_EQ(u::SYNC_FROM_DEVICE, 1u);
  EXPECT_EQ(u::CONFIG_CU, 0u);
  EXPECT_EQ(u::CMD_SUBMIT_EXEC_BUF, 0u);
  EXPECT_EQ(u::POWER_MODE_TURBO, 4);
}

TEST(DriverAbi, ReplyStructOffsets) {
  EXPECT_EQ(offsetof(u::query_aie_metadata, shim), 48u);
  EXPECT_EQ(sizeof(u::query_aie_metadata), 64u);
  EXPECT_EQ(offsetof(u::query_clock_metadata, h_clock), 24u);
  EXPECT_EQ(sizeof(u::query_hwctx), 64u);
  EXPECT_EQ(offsetof(u::query_hwctx, pid), 16u);
  EXPECT_EQ(sizeof(u::query_firmware_version), 16u);
  EXPECT_EQ(sizeof(u::hwctx_param_config_cu), 8u);
}

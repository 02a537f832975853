// The NPU is single-tenant: one engine process at a time may drive a device node. The engine takes
// an exclusive flock on a lock file named after the node before it uses the device; the file holds
// the holder's pid and command line so a second engine can say who has it. The kernel drops a
// flock when its holder exits or crashes, so a lock file left by a dead process is simply taken over.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>

namespace xdna::npu {

struct LockHolder {
  long pid = 0;         // 0: unknown (the holder had not written it yet)
  std::string command;  // its command line, arguments separated by spaces
};

// Another process holds the device.
struct DeviceBusy : std::runtime_error {
  DeviceBusy(std::string device, LockHolder holder, const std::string& lock_file);
  std::string device;
  LockHolder holder;
};

// $XDG_RUNTIME_DIR/xdna-engine when XDG_RUNTIME_DIR is set, else /tmp/xdna-engine-<uid>.
std::string default_lock_dir();
// "/dev/accel/accel0" -> "accel0.lock".
std::string lock_file_name(const std::string& device_node);
// The first /dev/accel/accel* node (in name order) under `dir`, or nullopt when there is none.
std::optional<std::string> find_accel_node(const std::string& dir = "/dev/accel");
// This process's command line from /proc/self/cmdline ("" when unreadable).
std::string own_command_line();
// What a lock file says about its holder (pid 0 when it is empty or unreadable).
LockHolder read_lock_holder(const std::string& lock_file);

class DeviceLock {
 public:
  // Takes the lock on `device_node` at once (never waits), creating `lock_dir` (mode 0700) and the
  // lock file as needed. Throws DeviceBusy naming the holder when another process has it, and
  // std::runtime_error naming the path when the lock file cannot be made.
  static DeviceLock acquire(const std::string& device_node, const std::string& lock_dir = default_lock_dir());

  DeviceLock(DeviceLock&& o) noexcept;
  DeviceLock& operator=(DeviceLock&& o) noexcept;
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;
  ~DeviceLock();  // releases the lock (the file stays: removing it would race a new taker)

  const std::string& device() const { return device_; }
  const std::string& path() const { return path_; }

 private:
  DeviceLock(int fd, std::string device, std::string path);
  int fd_ = -1;
  std::string device_, path_;
};

}  // namespace xdna::npu

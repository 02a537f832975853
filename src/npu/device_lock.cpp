#include "npu/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace fs = std::filesystem;

namespace xdna::npu {

namespace {

std::string holder_text(const LockHolder& h) {
  if (h.pid == 0) return "another process (its pid is not recorded yet)";
  return "pid " + std::to_string(h.pid) + (h.command.empty() ? "" : " (" + h.command + ")");
}

}  // namespace

DeviceBusy::DeviceBusy(std::string device_, LockHolder holder_, const std::string& lock_file)
    : std::runtime_error("the NPU " + device_ + " is in use by " + holder_text(holder_) +
                         "; the NPU serves one engine at a time (stop that one, send the work to it if it is "
                         "`npu serve`, or pass --allow-host-fallback to run on the host; lock file " + lock_file + ")"),
      device(std::move(device_)),
      holder(std::move(holder_)) {}

std::string default_lock_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime && *runtime) return (fs::path(runtime) / "xdna-engine").string();
  return "/tmp/xdna-engine-" + std::to_string(getuid());
}

std::string lock_file_name(const std::string& device_node) {
  return fs::path(device_node).filename().string() + ".lock";
}

std::optional<std::string> find_accel_node(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> nodes;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with("accel")) nodes.push_back(e.path().string());
  if (nodes.empty()) return std::nullopt;
  return *std::min_element(nodes.begin(), nodes.end());
}

std::string own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

LockHolder read_lock_holder(const std::string& lock_file) {
  LockHolder h;
  std::ifstream f(lock_file);
  std::string pid;
  if (!std::getline(f, pid)) return h;
  h.pid = std::strtol(pid.c_str(), nullptr, 10);
  std::getline(f, h.command);
  return h;
}

DeviceLock DeviceLock::acquire(const std::string& device_node, const std::string& lock_dir) {
  std::error_code ec;
  fs::create_directories(lock_dir, ec);
  if (ec) throw std::runtime_error("cannot create the NPU lock directory " + lock_dir + ": " + ec.message());
  ::chmod(lock_dir.c_str(), 0700);  // ours alone; the command lines in it are private
  const std::string path = (fs::path(lock_dir) / lock_file_name(device_node)).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot open the NPU lock file " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) throw DeviceBusy(device_node, read_lock_holder(path), path);
    throw std::runtime_error("cannot lock " + path + ": " + std::strerror(err));
  }
  // Ours now: whatever a previous (dead) holder wrote is replaced by who we are.
  const std::string who = std::to_string(getpid()) + "\n" + own_command_line() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
  }
  return DeviceLock(fd, device_node, path);
}

DeviceLock::DeviceLock(int fd, std::string device, std::string path)
    : fd_(fd), device_(std::move(device)), path_(std::move(path)) {}

DeviceLock::DeviceLock(DeviceLock&& o) noexcept : fd_(o.fd_), device_(std::move(o.device_)), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

DeviceLock& DeviceLock::operator=(DeviceLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
    device_ = std::move(o.device_);
    path_ = std::move(o.path_);
  }
  return *this;
}

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
}

}  // namespace xdna::npu

// The NPU's single-tenant lock (src/npu/device_lock.h) across real processes: a second taker is
// refused with the holder's pid and command line, the lock goes away when its holder closes it,
// exits or is killed, and a lock file left by a dead process is taken over.
#include "npu/device_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace fs = std::filesystem;
using namespace xdna::npu;

namespace {

constexpr const char* kNode = "/dev/accel/accel0";

class DeviceLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xdna-device-lock-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A child process that takes the lock, reports through a pipe, then waits until killed or told
  // to exit (a byte on `release`). Returns its pid once it holds the lock.
  pid_t spawn_holder(bool* took) {
    int ready[2];
    if (pipe(ready) != 0 || pipe(release_) != 0) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      char ok = 0;
      try {
        DeviceLock lock = DeviceLock::acquire(kNode, dir_.string());
        ok = 1;
        (void)!write(ready[1], &ok, 1);
        char c;
        (void)!read(release_[0], &c, 1);  // hold until told (or killed)
      } catch (...) {
        (void)!write(ready[1], &ok, 1);
      }
      _exit(0);
    }
    close(ready[1]);
    char ok = 0;
    *took = read(ready[0], &ok, 1) == 1 && ok == 1;
    close(ready[0]);
    return pid;
  }
  void release_holder(pid_t pid) {
    const char c = 'x';
    (void)!write(release_[1], &c, 1);
    int status = 0;
    waitpid(pid, &status, 0);
    close(release_[0]);
    close(release_[1]);
  }

  fs::path dir_;
  int release_[2] = {-1, -1};
};

TEST_F(DeviceLockTest, SecondProcessIsRefusedWithTheHolderNamed) {
  bool took = false;
  const pid_t holder = spawn_holder(&took);
  ASSERT_GT(holder, 0);
  ASSERT_TRUE(took);
  try {
    DeviceLock second = DeviceLock::acquire(kNode, dir_.string());
    FAIL() << "a second engine took the NPU while pid " << holder << " held it";
  } catch (const DeviceBusy& e) {
    EXPECT_EQ(e.holder.pid, holder);
    EXPECT_EQ(e.device, kNode);
    EXPECT_NE(e.holder.command.find("test_device_lock"), std::string::npos) << e.holder.command;
    const std::string what = e.what();
    EXPECT_NE(what.find("pid " + std::to_string(holder)), std::string::npos) << what;
    EXPECT_NE(what.find("test_device_lock"), std::string::npos) << what;
    EXPECT_NE(what.find("--allow-host-fallback"), std::string::npos) << what;
  }
  release_holder(holder);
  // The holder exited: the lock is free, and the file now names this process.
  const DeviceLock mine = DeviceLock::acquire(kNode, dir_.string());
  EXPECT_EQ(read_lock_holder(mine.path()).pid, getpid());
  EXPECT_EQ(mine.path(), (dir_ / "accel0.lock").string());
}

TEST_F(DeviceLockTest, KilledHolderReleasesTheLock) {
  bool took = false;
  const pid_t holder = spawn_holder(&took);
  ASSERT_TRUE(took);
  kill(holder, SIGKILL);
  int status = 0;
  waitpid(holder, &status, 0);
  close(release_[0]);
  close(release_[1]);
  // Its pid is still written in the file, but the kernel dropped the flock with the process.
  EXPECT_EQ(read_lock_holder((dir_ / "accel0.lock").string()).pid, holder);
  const DeviceLock mine = DeviceLock::acquire(kNode, dir_.string());
  EXPECT_EQ(read_lock_holder(mine.path()).pid, getpid());
}

TEST_F(DeviceLockTest, StaleLockFileFromADeadPidIsTakenOver) {
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  fs::create_directories(dir_);
  std::ofstream(dir_ / "accel0.lock") << dead << "\nnpu serve --port 1234 with a much longer command line than ours\n";
  const DeviceLock mine = DeviceLock::acquire(kNode, dir_.string());
  const LockHolder h = read_lock_holder(mine.path());
  EXPECT_EQ(h.pid, getpid());
  EXPECT_EQ(h.command, own_command_line());  // the old, longer text is gone entirely
}

TEST_F(DeviceLockTest, ClosingReleasesAndEachOpenIsItsOwnTaker) {
  std::optional<DeviceLock> first(DeviceLock::acquire(kNode, dir_.string()));
  // flock belongs to an open file description: a second acquire, even in this process, is refused.
  EXPECT_THROW(DeviceLock::acquire(kNode, dir_.string()), DeviceBusy);
  DeviceLock moved = std::move(*first);
  first.reset();  // the moved-from lock releases nothing
  EXPECT_THROW(DeviceLock::acquire(kNode, dir_.string()), DeviceBusy);
  { DeviceLock gone = std::move(moved); }
  EXPECT_NO_THROW(DeviceLock::acquire(kNode, dir_.string()));
  // Another node has its own lock.
  const DeviceLock a = DeviceLock::acquire("/dev/accel/accel0", dir_.string());
  EXPECT_NO_THROW(DeviceLock::acquire("/dev/accel/accel1", dir_.string()));
}

TEST_F(DeviceLockTest, LockDirectoryIsCreatedPrivate) {
  const fs::path nested = dir_ / "run" / "xdna-engine";
  const DeviceLock l = DeviceLock::acquire(kNode, nested.string());
  EXPECT_TRUE(fs::exists(nested / "accel0.lock"));
  EXPECT_EQ(fs::status(nested).permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST_F(DeviceLockTest, UnwritableLockDirectoryIsAClearError) {
  std::ofstream(dir_ / "file") << "x";
  try {
    DeviceLock::acquire(kNode, (dir_ / "file" / "sub").string());
    FAIL() << "a lock under a regular file was taken";
  } catch (const DeviceBusy&) {
    FAIL() << "reported as busy";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "file" / "sub").string()), std::string::npos) << e.what();
  }
}

TEST_F(DeviceLockTest, DefaultDirectoryAndNodes) {
  const char* old = std::getenv("XDG_RUNTIME_DIR");
  const std::string saved = old ? old : "";
  setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  EXPECT_EQ(default_lock_dir(), "/run/user/4242/xdna-engine");
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(default_lock_dir(), "/tmp/xdna-engine-" + std::to_string(getuid()));
  if (old) setenv("XDG_RUNTIME_DIR", saved.c_str(), 1);

  EXPECT_EQ(lock_file_name("/dev/accel/accel3"), "accel3.lock");
  EXPECT_FALSE(find_accel_node(dir_.string()).has_value());
  EXPECT_FALSE(find_accel_node((dir_ / "missing").string()).has_value());
  std::ofstream(dir_ / "accel1") << "";
  std::ofstream(dir_ / "accel0") << "";
  std::ofstream(dir_ / "card0") << "";
  EXPECT_EQ(find_accel_node(dir_.string()), (dir_ / "accel0").string());
}

}  // namespace

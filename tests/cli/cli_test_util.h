// What the tests/cli programs share: running a shell command line (the `npu` binary, mostly) and
// collecting what it printed and how it exited.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace xdna::test {

struct ShellResult {
  int rc = -1;      // exit status; -1 when the command could not start or was killed by a signal
  std::string out;  // its stdout (stderr too when the command line redirects it there)
};

inline ShellResult run_shell(const std::string& command_line) {
  ShellResult r;
  FILE* p = popen(command_line.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace xdna::test

// A shell command's exit status and its output (stdout and stderr together),
// for tests that run the project's own tools and scripts.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace oomsnap_test {

struct CommandRun {
  int status = -1;  // the exit status; -1 when it did not exit normally or could not run
  std::string out;
};

inline CommandRun run_command(const std::string& cmd) {
  CommandRun r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace oomsnap_test

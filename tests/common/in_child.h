// Runs a check in a forked child process, for what the test process could not
// undo (a seccomp filter stays for good). The child reports through a pipe;
// "" means every check held.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace oomsnap_test {

inline std::string in_child(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    const std::string report = body();
    for (size_t done = 0; done < report.size();) {
      const ssize_t n = ::write(fds[1], report.data() + done, report.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);  // not exit(): the test process's atexit handlers are not the child's
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    report += " (the child " + (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                    : "exited " + std::to_string(WEXITSTATUS(status))) + ")";
  return report;
}

}  // namespace oomsnap_test

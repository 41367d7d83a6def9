// A child of this test that joins a memory cgroup and runs a loop there,
// handing back the count the loop returns (exit_flood_test's deaths by a
// signal, oom_kill_flood_test's OOM kills). The test process has threads, so
// the loop makes system calls only: no malloc, no lock another thread may
// have held at the fork. The child dies with the test and with this object.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include "test_cgroup.h"

namespace oomsnap_test {

class CountingChildInCgroup {
 public:
  CountingChildInCgroup(const TestMemcg& cg, const std::function<int()>& loop) {
    const std::string procs = cg.dir() + "/cgroup.procs";  // allocated before the fork
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int cfd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (cfd < 0 || write(cfd, "0\n", 2) != 2) _exit(126);
      close(cfd);
      const int n = loop();
      _exit(write(fds[1], &n, sizeof n) == sizeof n ? 0 : 1);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~CountingChildInCgroup() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  CountingChildInCgroup(const CountingChildInCgroup&) = delete;
  CountingChildInCgroup& operator=(const CountingChildInCgroup&) = delete;

  // The loop's count once it is over; -1 while it runs (after `timeout`).
  int count(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    int n = -1;
    if (read(fd_, &n, sizeof n) != sizeof n) return -1;
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return n;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace oomsnap_test

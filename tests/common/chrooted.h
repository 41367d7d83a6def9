// A process (a fork of the test, no exec) chrooted into a directory, named
// `comm`, waiting; killed on scope exit. Its /proc/PID/root is that
// directory: a target "in a container" for the tests of what the capture
// process may open.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace oomsnap_test {

class Chrooted {
 public:
  Chrooted(const std::string& root, const std::string& comm) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (chroot(root.c_str()) != 0 || chdir("/") != 0) _exit(126);
      prctl(PR_SET_NAME, comm.c_str());
      [[maybe_unused]] auto n = ::write(p[1], "r", 1);
      for (;;) pause();
    }
    ::close(p[1]);
    char c = 0;
    const bool ready = ::read(p[0], &c, 1) == 1;
    ::close(p[0]);
    if (!ready) throw std::runtime_error("chrooted child did not start");
  }
  ~Chrooted() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  Chrooted(const Chrooted&) = delete;
  Chrooted& operator=(const Chrooted&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace oomsnap_test

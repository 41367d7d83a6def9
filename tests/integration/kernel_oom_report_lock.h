// The kernel prints at most 10 OOM reports per 5 s (oom_kill_process's
// ratelimit: DEFAULT_RATELIMIT_BURST in DEFAULT_RATELIMIT_INTERVAL) and drops
// the rest ("oom_kill_process: N callbacks suppressed"). A test that floods
// OOM kills holds this lock while it does and for one interval after, and a
// test that needs the kernel's report of its own kill holds it too: ctest
// runs tests in parallel, and a kill inside a flood's window gets no report
// (seen in a fresh-clone run: KillWithoutSnapshot right after the flood test).
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace oomsnap_test {

class KernelOomReportLock {
 public:
  // hold_after: how long to keep the lock once done (the flood: the
  // ratelimit's interval, so the window its last kills opened has passed).
  explicit KernelOomReportLock(std::chrono::milliseconds hold_after = std::chrono::milliseconds(0))
      : hold_after_(hold_after), fd_(::open("/tmp/oomsnap-test-kernel-oom-reports.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~KernelOomReportLock() {
    std::this_thread::sleep_for(hold_after_);
    if (fd_ >= 0) ::close(fd_);
  }
  KernelOomReportLock(const KernelOomReportLock&) = delete;
  KernelOomReportLock& operator=(const KernelOomReportLock&) = delete;

 private:
  std::chrono::milliseconds hold_after_;
  int fd_;
};

}  // namespace oomsnap_test

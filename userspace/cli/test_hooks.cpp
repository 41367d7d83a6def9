#include "cli/test_hooks.h"

#include <linux/bpf.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

// Set by userspace/CMakeLists.txt for each executable; a build that forgets it
// must not fall back to either variant silently.
#ifndef OOMSNAP_TEST_HOOKS
#error "OOMSNAP_TEST_HOOKS must be 0 (oomsnap) or 1 (oomsnap-test-hooks)"
#endif

namespace oomsnap {

#if OOMSNAP_TEST_HOOKS

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string outcome(const std::string& call, long rc, int err) {
  if (rc >= 0) return call + " succeeded";
  const char* name = strerrorname_np(err);
  return call + " failed: " + (name ? name : "errno " + std::to_string(err));
}

// What a compromised agent would try first: trace another process, load a
// BPF program, clear the kernel's log. Each must fail with EPERM once the
// agent confined itself; reading the log's size still works.
std::string probe_confinement(pid_t pid) {
  const std::string attach = "ptrace(PTRACE_ATTACH, " + std::to_string(pid) + ")";
  long rc = ptrace(PTRACE_ATTACH, pid, nullptr, nullptr);
  std::string out = outcome(attach, rc, errno);
  if (rc == 0) {
    // Not confined: the process is stopped and traced by this thread; wait
    // for the stop (bounded) and let it go again.
    for (int i = 0; i < 200 && waitpid(pid, nullptr, WNOHANG | __WALL) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
  }
  // An empty attribute: the kernel refuses it (E2BIG or EINVAL) when the call
  // gets that far.
  bpf_attr attr{};
  rc = syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr);
  if (rc >= 0) ::close(static_cast<int>(rc));
  out += "; " + outcome("bpf(BPF_PROG_LOAD)", rc, errno);
  // syslog(2) reads the log and its size only (kernel_log.h); every other
  // action is refused. Probed with one that changes nothing (the unread
  // count), the same rule as clearing the log.
  rc = syscall(SYS_syslog, 9 /* SYSLOG_ACTION_SIZE_UNREAD */, nullptr, 0);
  out += "; " + outcome("syslog(SIZE_UNREAD)", rc, errno);
  rc = syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, nullptr, 0);
  return out + "; " + outcome("syslog(SIZE_BUFFER)", rc, errno);
}

}  // namespace

TestHooks read_test_hooks() {
  TestHooks hooks;
  hooks.built_in = true;
  if (const std::string stall = env("OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2"); !stall.empty())
    hooks.agent.stall_on_sigusr2 = std::chrono::seconds(std::clamp(std::atoi(stall.c_str()), 0, 60));
  hooks.agent.capture_helper = env("OOMSNAP_CAPTURE_HELPER");
  hooks.agent.capture_in_process = env("OOMSNAP_TEST_CAPTURE_IN_PROCESS") == "1";
  hooks.agent.kmsg_path = env("OOMSNAP_TEST_KMSG_PATH");
  if (const std::string pid = env("OOMSNAP_TEST_CONFINEMENT_PROBE_PID"); !pid.empty())
    hooks.agent.confinement_probe = [target = static_cast<pid_t>(std::atoi(pid.c_str()))] {
      return probe_confinement(target);
    };
  return hooks;
}

#else

// The shipped binary: no hook can be switched on, and no hook's name is in it
// (tests/build/test_hooks_build_test.cpp checks both).
TestHooks read_test_hooks() { return {}; }

#endif

}  // namespace oomsnap

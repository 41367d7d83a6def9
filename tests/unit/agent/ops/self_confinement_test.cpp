// The agent's own seccomp deny-list (agent/ops/self_confinement.h), loaded in
// a child process (it cannot be taken off again): what a compromised agent
// would try first answers EPERM, on threads started before the load too, and
// what the agent and its capture process keep doing still works.
#include "agent/ops/self_confinement.h"

#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "in_child.h"

using namespace oomsnap;
using oomsnap_test::in_child;

namespace {

// "" when `call` failed with errno `want`, else what happened instead.
std::string expect_errno(const char* what, const std::function<long()>& call, int want) {
  const long rc = call();
  const int err = errno;
  if (rc == -1 && err == want) return "";
  const char* name = strerrorname_np(err);
  return std::string(what) + ": " + std::to_string(rc) + (rc == -1 ? std::string(" ") + (name ? name : "?") : "") +
         " instead of " + strerrorname_np(want) + "; ";
}

long bpf(uint64_t cmd) {
  bpf_attr attr{};
  attr.map_fd = static_cast<__u32>(-1);
  return syscall(SYS_bpf, cmd, &attr, sizeof attr);
}

// What the checks below try; each would behave otherwise without the filter
// (ESRCH, EINVAL, E2BIG, EFAULT, EBADF, ENOENT or success, as root).
std::string refused_calls() {
  std::string r;
  r += expect_errno("ptrace(PTRACE_ATTACH)", [] { return ptrace(PTRACE_ATTACH, -1, nullptr, nullptr); }, EPERM);
  r += expect_errno("mount", [] { return mount("none", "/nonexistent-oomsnap-test", "tmpfs", 0, nullptr); }, EPERM);
  r += expect_errno("unshare(CLONE_NEWUTS)", [] { return unshare(CLONE_NEWUTS); }, EPERM);
  r += expect_errno("setns", [] { return setns(-1, 0); }, EPERM);
  r += expect_errno("open_by_handle_at", [] { return syscall(SYS_open_by_handle_at, -1, nullptr, 0); }, EPERM);
  r += expect_errno("perf_event_open", [] { return syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0); }, EPERM);
  r += expect_errno("io_uring_setup", [] { return syscall(SYS_io_uring_setup, 1, nullptr); }, EPERM);
  r += expect_errno("keyctl", [] { return syscall(SYS_keyctl, 0, 0, 0, 0, 0); }, EPERM);
  r += expect_errno("bpf(BPF_PROG_LOAD)", [] { return bpf(BPF_PROG_LOAD); }, EPERM);
  r += expect_errno("bpf(BPF_MAP_CREATE)", [] { return bpf(BPF_MAP_CREATE); }, EPERM);
  // The kernel takes the command as an int: high bits must not sneak one past.
  r += expect_errno("bpf(BPF_PROG_LOAD | 1 << 32)", [] { return bpf(BPF_PROG_LOAD | (1ull << 32)); }, EPERM);
  r += expect_errno("bpf(BPF_MAP_LOOKUP_ELEM | 1 << 32)", [] { return bpf(BPF_MAP_LOOKUP_ELEM | (1ull << 32)); },
                    EPERM);
  // A process in a new user namespace (as root without the filter: created,
  // and it leaves at once).
  r += expect_errno("clone(CLONE_NEWUSER)", [] {
    const long rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
    if (rc == 0) _exit(0);
    if (rc > 0) waitpid(static_cast<pid_t>(rc), nullptr, 0);
    return rc;
  }, EPERM);
  return r;
}

// What the agent keeps doing after start: map lookups, reading a process's
// memory (the capture process), threads, spawning the capture process.
std::string kept_calls() {
  std::string r;
  for (uint64_t cmd : {BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM, BPF_MAP_GET_NEXT_KEY})
    r += expect_errno(("bpf command " + std::to_string(cmd)).c_str(), [cmd] { return bpf(cmd); }, EBADF);
  long word = 42, copy = 0;
  iovec local{&copy, sizeof copy}, remote{&word, sizeof word};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != sizeof word || copy != 42)
    r += std::string("process_vm_readv: ") + std::strerror(errno) + "; ";
  bool ran = false;
  std::thread([&] { ran = true; }).join();
  if (!ran) r += "a new thread did not run; ";
  pid_t pid = -1;
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  if (const int err = posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ); err != 0) {
    r += std::string("posix_spawn: ") + std::strerror(err) + "; ";
  } else {
    int st = -1;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) r += "the spawned /bin/true failed; ";
  }
  return r;
}

}  // namespace

TEST(SelfConfinement, RefusesWhatTheAgentNeverNeedsOnEveryThread) {
  const std::string report = in_child([] {
    std::mutex m;
    std::condition_variable cv;
    bool confined = false;
    std::string on_early_thread;
    // Started before the filter, like the agent's HTTP server and worker.
    std::thread early([&] {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return confined; });
      on_early_thread = refused_calls();
    });
    Confinement c;
    std::string why;
    const bool ok = confine_agent(c, why);
    {
      std::lock_guard lock(m);
      confined = true;
    }
    cv.notify_one();
    early.join();
    if (!ok) return "not confined: " + why;
    if (!c.supported) return "this kernel has no seccomp filters: " + c.summary;
    std::string r;
    if (c.summary.find("loaded on all 2 threads") == std::string::npos) r += "summary: " + c.summary + "; ";
    if (!c.unknown.empty()) r += "names unknown to libseccomp: " + c.unknown.front() + "; ";
    r += refused_calls();
    if (!on_early_thread.empty()) r += "on the earlier thread: " + on_early_thread;
    return r + kept_calls();
  });
  EXPECT_EQ(report, "");
}

// The list names real system calls, and none that the agent or its capture
// process makes after start (the capture process inherits the filter and
// confines itself with chroot, capabilities, rlimits, seccomp and landlock).
TEST(SelfConfinement, DeniesNoSystemCallTheAgentOrItsCaptureProcessMakes) {
  const std::set<std::string> needed = {
      "bpf", "process_vm_readv", "openat", "openat2", "read", "write", "close", "clone", "clone3", "execve",
      "wait4", "kill", "epoll_wait", "socket", "sendmsg", "accept4", "chroot", "capset", "prctl", "setrlimit",
      "prlimit64", "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
      "mmap", "munmap", "mprotect", "eventfd2", "inotify_add_watch", "rename", "renameat2", "unlinkat"};
  std::set<std::string> seen;
  for (const DeniedSyscall& d : agent_denied_syscalls()) {
    const std::string name(d.name);
    EXPECT_FALSE(needed.count(name)) << name << " is needed";
    EXPECT_TRUE(seen.insert(name).second) << name << " listed twice";
    EXPECT_GE(seccomp_syscall_resolve_name(name.c_str()), 0) << name << " is not a system call here";
    EXPECT_FALSE(d.group.empty()) << name;
  }
  for (const char* must : {"ptrace", "process_vm_writev", "mount", "setns", "unshare", "kexec_load", "init_module",
                           "finit_module", "open_by_handle_at", "keyctl", "userfaultfd", "io_uring_setup"})
    EXPECT_TRUE(seen.count(must)) << must << " is not denied";
}

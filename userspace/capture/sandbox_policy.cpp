#include "capture/sandbox_policy.h"

#include "capture/capture_child.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <linux/capability.h>
#include <malloc.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "base/safe_open.h"
#include "base/seccomp_filter.h"
#include "core/pagemap_scan.h"

namespace oomsnap {
namespace {

bool set_limit(int resource, rlim_t soft, rlim_t hard, const char* name, std::string& why) {
  rlimit rl{soft, hard};
  if (setrlimit(resource, &rl) == 0) return true;
  why = std::string("setrlimit(") + name + "): " + std::strerror(errno);
  return false;
}

[[noreturn]] void out_of_memory() { _exit(kExitMemoryCap); }

}  // namespace

bool apply_limits(const SandboxLimits& l, std::string& why) {
  // One malloc arena: each extra arena reserves 64 MiB of address space,
  // which would eat the cap without holding data.
  mallopt(M_ARENA_MAX, 1);
  std::set_new_handler(out_of_memory);
  return set_limit(RLIMIT_AS, l.memory_bytes, l.memory_bytes, "RLIMIT_AS", why) &&
         set_limit(RLIMIT_CPU, l.cpu_seconds, l.cpu_seconds + 1, "RLIMIT_CPU", why) &&
         set_limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE", why) && set_limit(RLIMIT_FSIZE, 0, 0, "RLIMIT_FSIZE", why) &&
         set_limit(RLIMIT_NOFILE, l.max_fds, l.max_fds, "RLIMIT_NOFILE", why) &&
         (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 || (why = "PR_SET_DUMPABLE failed", false)) &&
         (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 || (why = "PR_SET_NO_NEW_PRIVS failed", false));
}

bool drop_capabilities(std::string& why) {
  const cap_value_t last = static_cast<cap_value_t>(cap_max_bits()) - 1;
  cap_t now = cap_get_proc();
  if (!now) {
    why = std::string("cap_get_proc: ") + std::strerror(errno);
    return false;
  }
  auto permitted = [&](cap_value_t c) {
    cap_flag_value_t v = CAP_CLEAR;
    return c <= last && cap_get_flag(now, c, CAP_PERMITTED, &v) == 0 && v == CAP_SET;
  };
  std::vector<cap_value_t> keep = {CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH};
  // map_files needs CAP_CHECKPOINT_RESTORE (5.9+), or CAP_SYS_ADMIN: the
  // latter only where the former is not to be had (an older kernel, or a
  // unit or pod that grants SYS_ADMIN but not CHECKPOINT_RESTORE).
  constexpr cap_value_t kCheckpointRestore = 40;
  keep.push_back(permitted(kCheckpointRestore) || !permitted(CAP_SYS_ADMIN) ? kCheckpointRestore : CAP_SYS_ADMIN);
  auto kept = [&](cap_value_t c) {
    for (auto k : keep)
      if (k == c) return true;
    return false;
  };
  // The bounding set first, while CAP_SETPCAP is still effective. One
  // PR_CAPBSET_DROP each: a capability this kernel lacks answers EINVAL (asking
  // first with CAP_IS_SUPPORTED doubled the ~40 system calls, ~15 µs each on
  // a VM, of every capture's start).
  for (cap_value_t c = 0; c <= last; ++c) {
    if (kept(c)) continue;
    if (cap_drop_bound(c) != 0 && errno != EINVAL && errno != EPERM) {
      why = "cannot drop capability " + std::to_string(c) + " from the bounding set: " + std::strerror(errno);
      return false;
    }
  }
  // Keep a capability only where the process already has it (an agent run
  // with fewer privileges passes on fewer, never more).
  std::vector<cap_value_t> have;
  for (auto c : keep)
    if (permitted(c)) have.push_back(c);
  cap_t next = cap_init();
  bool ok = next && (have.empty() || (cap_set_flag(next, CAP_PERMITTED, static_cast<int>(have.size()), have.data(), CAP_SET) == 0 &&
                                      cap_set_flag(next, CAP_EFFECTIVE, static_cast<int>(have.size()), have.data(), CAP_SET) == 0)) &&
            cap_set_proc(next) == 0;
  if (!ok) why = std::string("cap_set_proc: ") + std::strerror(errno);
  cap_free(now);
  if (next) cap_free(next);
  if (ok && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    why = std::string("clearing ambient capabilities: ") + std::strerror(errno);
    ok = false;
  }
  return ok;
}

bool load_seccomp_filter(int result_fd, pid_t target, std::string& why) {
  SeccompFilter filter(SCMP_ACT_KILL_PROCESS);
  // apply_limits set no_new_privs; libseccomp's own prctl for it would be
  // refused under the first filter.
  filter.no_new_privs_already_set();
  // Reading the target and its files; the process's own memory and threads.
  for (int nr : {SCMP_SYS(read), SCMP_SYS(pread64), SCMP_SYS(readv), SCMP_SYS(lseek),
                 SCMP_SYS(close), SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(statx), SCMP_SYS(readlink),
                 SCMP_SYS(readlinkat), SCMP_SYS(getdents64), SCMP_SYS(fcntl), SCMP_SYS(mmap), SCMP_SYS(munmap),
                 SCMP_SYS(mremap), SCMP_SYS(mprotect), SCMP_SYS(madvise), SCMP_SYS(brk), SCMP_SYS(futex),
                 SCMP_SYS(clock_gettime), SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(gettid),
                 SCMP_SYS(getpid), SCMP_SYS(getppid), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
                 SCMP_SYS(sched_yield), SCMP_SYS(getrandom), SCMP_SYS(exit), SCMP_SYS(exit_group),
                 SCMP_SYS(restart_syscall), SCMP_SYS(rseq), SCMP_SYS(set_robust_list), SCMP_SYS(sched_getaffinity),
                 SCMP_SYS(sysinfo) /* glibc's qsort sizes its buffer by physical memory */})
    filter.add(SCMP_ACT_ALLOW, nr);
  // The target's memory, and no other process's: a reader bug a crafted
  // target exploits cannot read the agent (the parent) or another pod.
  if (target == kNoTargetPid) {
    // nothing: process_vm_readv kills the process
  } else if (target > 0) {
    filter.add(SCMP_ACT_ALLOW, SCMP_SYS(process_vm_readv), {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(target))});
  } else {
    filter.add(SCMP_ACT_ALLOW, SCMP_SYS(process_vm_readv));
  }
  // The request, from the request socket only.
  filter.add(SCMP_ACT_ALLOW, SCMP_SYS(recvmsg), {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(kCaptureRequestFd))});
  // Loading the next filter (a filter can only take rights away); the
  // last, load_confinement_filter, does not allow it again.
  filter.add(SCMP_ACT_ALLOW, SCMP_SYS(seccomp), {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(SECCOMP_SET_MODE_FILTER))});
  // Files only read-only: no O_CREAT, O_TRUNC, O_TMPFILE, write access. The
  // mask takes O_TMPFILE's own bit (020000000) without O_DIRECTORY, which
  // O_TMPFILE includes: a read-only O_DIRECTORY open is fine. (Once the
  // target is open, load_confinement_filter takes opens by path away.)
  constexpr scmp_datum_t kTmpfileBit = 020000000;
  filter.add(SCMP_ACT_ALLOW, SCMP_SYS(openat),
             {SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC | kTmpfileBit, O_RDONLY)});
  // openat2 takes its flags in a struct seccomp cannot read, so it is
  // allowed only with the structs base/safe_open.h passes, sealed read-only
  // before this filter: open_regular_in_root's O_PATH handle (an fd that
  // cannot be read; a regular file is then reopened through /proc/self/fd
  // by openat, under the rule above) and open_directory_in_root's directory,
  // both resolved inside the directory given (RESOLVE_IN_ROOT, no magic
  // links). Any other openat2 kills the process. Where the structs cannot be
  // sealed (mseal: Linux 6.10+), openat2 fails with ENOSYS and files are
  // opened through /proc/PID/map_files only.
  if (const SealedOpenHows* how = seal_open_hows()) {
    for (const void* p : {how->path_handle, how->directory})
      filter.add(SCMP_ACT_ALLOW, SCMP_SYS(openat2),
                 {SCMP_A2(SCMP_CMP_EQ, static_cast<scmp_datum_t>(reinterpret_cast<uintptr_t>(p))),
                  SCMP_A3(SCMP_CMP_EQ, static_cast<scmp_datum_t>(open_how_size()))});
  } else {
    filter.add(SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2));
  }
  // The memory breakdown's page scan (core/pagemap_scan.h) on the target's
  // /proc/PID/pagemap: that one ioctl request, no other (a tty's, a
  // device's). On a kernel without it (before 6.7) it fails with ENOTTY and
  // the breakdown reads smaps.
  filter.add(SCMP_ACT_ALLOW, SCMP_SYS(ioctl), {SCMP_A1(SCMP_CMP_EQ, static_cast<scmp_datum_t>(kPagemapScanIoctl))});
  // Threads of its own (the pprof encoder compresses on a worker thread):
  // clone only with CLONE_VM | CLONE_THREAD, never a new process. clone3 takes
  // its flags in a struct seccomp cannot read: ENOSYS, and glibc falls back
  // to clone.
  constexpr scmp_datum_t kThread = CLONE_VM | CLONE_THREAD;
  filter.add(SCMP_ACT_ALLOW, SCMP_SYS(clone), {SCMP_A0(SCMP_CMP_MASKED_EQ, kThread, kThread)});
  filter.add(SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3));
  // Writes only to the result pipe and stderr.
  for (int fd : {result_fd, STDERR_FILENO})
    filter.add(SCMP_ACT_ALLOW, SCMP_SYS(write), {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(fd))});
  // abort() signals itself; nobody else.
  filter.add(SCMP_ACT_ALLOW, SCMP_SYS(tgkill), {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(getpid()))});
  return filter.load(why);
}

bool load_confinement_filter(std::string& why) {
  SeccompFilter filter(SCMP_ACT_ALLOW);  // the filters before it decide the rest
  filter.no_new_privs_already_set();
  // No file opened by a path: an absolute path, or one through
  // /proc/self/fd or a magic link, could name any file on the node. EACCES,
  // so that a library that looks for a file fails as it would without it.
  filter.add(SCMP_ACT_ERRNO(EACCES), SCMP_SYS(openat));
  // Only a directory (the tmpfs walk), resolved inside a directory fd, not
  // the working directory (the agent's): the only directories the process
  // holds now are its target's root and those below it.
  if (const SealedOpenHows* how = seal_open_hows()) {
    filter.add(SCMP_ACT_KILL_PROCESS, SCMP_SYS(openat2),
               {SCMP_A2(SCMP_CMP_NE, static_cast<scmp_datum_t>(reinterpret_cast<uintptr_t>(how->directory)))});
    filter.add(SCMP_ACT_KILL_PROCESS, SCMP_SYS(openat2), {SCMP_A0_32(SCMP_CMP_EQ, static_cast<uint32_t>(AT_FDCWD))});
  }
  filter.add(SCMP_ACT_KILL_PROCESS, SCMP_SYS(seccomp));
  return filter.load(why);
}

}  // namespace oomsnap

// What the capture process may do. It reads a hostile target, so it keeps
// only what reading needs (see docs/agent.md, "Capture process"):
// - rlimits: address space (the memory cap: the collectors reserve address
//   space for the largest tables they accept, ~600 MiB for the Go reader, and
//   touch only what they use, so the cap is on reservations, a bound on
//   resident memory too), CPU seconds, no core dumps (they would hold target
//   memory), no file writes, few descriptors;
// - not dumpable, PR_SET_NO_NEW_PRIVS;
// - capabilities: CAP_SYS_PTRACE (process_vm_readv and /proc/PID/{maps,exe,
//   root} of another user's process), CAP_DAC_READ_SEARCH (the target's
//   binaries whatever their modes), CAP_CHECKPOINT_RESTORE (opening
//   /proc/PID/map_files; CAP_SYS_ADMIN instead on kernels before 5.9);
//   everything else leaves the bounding, permitted and effective sets;
// - a seccomp allow-list: reading (the target's memory, files opened
//   read-only), its own memory and threads, writing to the result pipe and
//   stderr (a pipe the parent reads, capped: child_stderr.h), exiting.
//   Anything else kills the process (SIGSYS). Three filters stack: one
//   loaded before the helper waits for its request; once the request names
//   the target, one that pins process_vm_readv to that pid; once the target
//   is open (core/target.h: its /proc files and the files of its mappings),
//   one that opens no file by a path and allows no further filter: only
//   directories inside the target's root are left (its tmpfs walk), so a
//   reader bug a crafted target exploits cannot read another file on the
//   node (docs/security.md says what was weighed: chroot, Landlock, a
//   broker).
//   No pidfd call (pidfd_open, pidfd_getfd), process_madvise or ptrace is
//   allowed at all.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace oomsnap {

struct SandboxLimits {
  uint64_t memory_bytes = 1ull << 30;  // RLIMIT_AS
  uint64_t cpu_seconds = 4;              // RLIMIT_CPU (soft; SIGXCPU)
  uint64_t max_fds = 512;                // RLIMIT_NOFILE (Target keeps up to 384 mapped files open)
};

// Exit status of a capture process whose memory ran out (operator new found
// the cap): the parent reports "exceeded its memory cap".
inline constexpr int kExitMemoryCap = 86;
// Exit status when the result would be larger than the cap: refused, not cut.
inline constexpr int kExitResultTooLarge = 87;

// Each step false + why on failure. Call in this order, single-threaded for
// the first two; the seccomp filter is synchronised to every thread.
bool apply_limits(const SandboxLimits& limits, std::string& why);
bool drop_capabilities(std::string& why);
// result_fd: the only descriptor (besides stderr) it may write to. target 0:
// the first filter (any pid); a pid: the filter for the capture of that
// process, loaded once the request names it; kNoTargetPid: no process at all
// (a last-gasp decode, whose process is gone). The first filter also takes
// the request (recvmsg on the request socket, with its descriptors).
inline constexpr pid_t kNoTargetPid = -1;
bool load_seccomp_filter(int result_fd, pid_t target, std::string& why);
// The last filter, once the target is open (core/target.h): no file opened
// by a path, only directories inside a directory fd (the target's root and
// below), no further filter.
bool load_confinement_filter(std::string& why);

}  // namespace oomsnap

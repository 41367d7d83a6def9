// The capabilities the agent works with, checked at start: a missing one is
// named with what it costs, rather than found later as a failed snapshot or
// an EPERM from bpf(2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace oomsnap {

// What the check looks at; the pure part below takes it as input, so every
// kernel and capability combination is testable without changing privileges.
struct PrivilegeFacts {
  uint64_t effective = 0;    // CapEff of this process (bit N = capability N)
  int cap_last_cap = 40;     // /proc/sys/kernel/cap_last_cap: which capabilities the kernel knows
  int kernel_major = 6, kernel_minor = 1;
  bool memlock_unlimited = false;  // RLIMIT_MEMLOCK already infinite (e.g. LimitMEMLOCK=infinity)
};

struct MissingPrivilege {
  std::string capabilities;  // "CAP_SYS_PTRACE", "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"
  std::string consequence;   // what does not work without it
  bool fatal = false;        // the agent cannot run at all
};

// Which needed capabilities `facts` lacks, most important first.
std::vector<MissingPrivilege> missing_privileges(const PrivilegeFacts& facts);

// The facts of this process and kernel.
PrivilegeFacts current_privilege_facts();

// The capabilities the agent uses on this kernel, for the log and docs/security.md:
// "CAP_BPF CAP_PERFMON CAP_SYS_PTRACE ...".
std::string needed_capabilities(const PrivilegeFacts& facts);

}  // namespace oomsnap

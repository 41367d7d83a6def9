#include "agent/ops/privileges.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/proc_info.h"

namespace oomsnap {
namespace {

// Kernels before 5.8 have no CAP_BPF/CAP_PERFMON, before 5.9 no
// CAP_CHECKPOINT_RESTORE: CAP_SYS_ADMIN stands in for them there. Kernels
// before 5.11 charge BPF maps to RLIMIT_MEMLOCK instead of the memcg.
constexpr int kCapBpf = 39, kCapPerfmon = 38, kCapCheckpointRestore = 40;

bool has(const PrivilegeFacts& f, int cap) { return cap >= 0 && cap < 64 && ((f.effective >> cap) & 1) != 0; }
bool kernel_knows(const PrivilegeFacts& f, int cap) { return cap <= f.cap_last_cap; }
bool kernel_before(const PrivilegeFacts& f, int major, int minor) {
  return f.kernel_major < major || (f.kernel_major == major && f.kernel_minor < minor);
}

}  // namespace

std::vector<MissingPrivilege> missing_privileges(const PrivilegeFacts& f) {
  std::vector<MissingPrivilege> out;
  const bool admin = has(f, CAP_SYS_ADMIN);
  if (kernel_knows(f, kCapBpf)) {
    if (!admin && !(has(f, kCapBpf) && has(f, kCapPerfmon)))
      out.push_back({"CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)",
                     "the BPF programs (OOM kills, memcg reclaim, process exits) cannot be loaded", true});
  } else if (!admin) {
    out.push_back({"CAP_SYS_ADMIN (this kernel has no CAP_BPF)",
                   "the BPF programs (OOM kills, memcg reclaim, process exits) cannot be loaded", true});
  }
  if (!has(f, CAP_SYS_PTRACE))
    out.push_back({"CAP_SYS_PTRACE",
                   "the memory and /proc/PID/{maps,smaps,exe,root} of other users' processes cannot be read: "
                   "their snapshots fail and their containers are not identified", false});
  if (!has(f, CAP_DAC_READ_SEARCH))
    out.push_back({"CAP_DAC_READ_SEARCH",
                   "binaries and libraries inside containers that their mode keeps from root cannot be opened: "
                   "those snapshots are unavailable", false});
  const bool map_files = kernel_knows(f, kCapCheckpointRestore) ? (has(f, kCapCheckpointRestore) || admin) : admin;
  if (!map_files)
    out.push_back({kernel_knows(f, kCapCheckpointRestore) ? "CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN)"
                                                          : "CAP_SYS_ADMIN (this kernel has no CAP_CHECKPOINT_RESTORE)",
                   "/proc/PID/map_files cannot be opened: a library is read by its path in the container instead, "
                   "so one deleted or replaced since it was mapped cannot be read", false});
  if (!has(f, CAP_DAC_OVERRIDE))
    out.push_back({"CAP_DAC_OVERRIDE",
                   "memory cgroups delegated to other users get no usage-threshold or PSI trigger (BPF events "
                   "still arrive)", false});
  if (!has(f, CAP_SYSLOG))
    out.push_back({"CAP_SYSLOG",
                   "where kernel.dmesg_restrict is set, the kernel's own OOM reports are not read: a kill without a "
                   "snapshot is recorded without the container's charge as the kernel saw it", false});
  if (kernel_before(f, 5, 11) && !f.memlock_unlimited && !has(f, CAP_SYS_RESOURCE))
    out.push_back({"CAP_SYS_RESOURCE (kernels before 5.11, unless RLIMIT_MEMLOCK is unlimited)",
                   "the BPF maps are charged to RLIMIT_MEMLOCK, which cannot be raised: loading them may fail", false});
  return out;
}

std::string needed_capabilities(const PrivilegeFacts& f) {
  std::string s = kernel_knows(f, kCapBpf) ? "CAP_BPF CAP_PERFMON" : "CAP_SYS_ADMIN";
  s += " CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_DAC_OVERRIDE CAP_SYSLOG";
  if (kernel_knows(f, kCapCheckpointRestore)) s += " CAP_CHECKPOINT_RESTORE";
  if (kernel_before(f, 5, 11) && !f.memlock_unlimited) s += " CAP_SYS_RESOURCE";
  return s;
}

PrivilegeFacts current_privilege_facts() {
  PrivilegeFacts f;
  std::string status;
  if (read_text_file("/proc/self/status", status)) {
    const auto at = status.find("\nCapEff:");
    if (at != std::string::npos) f.effective = std::strtoull(status.c_str() + at + 8, nullptr, 16);
  }
  std::string last;
  if (read_text_file("/proc/sys/kernel/cap_last_cap", last)) f.cap_last_cap = std::atoi(last.c_str());
  utsname u{};
  if (uname(&u) == 0) std::sscanf(u.release, "%d.%d", &f.kernel_major, &f.kernel_minor);
  rlimit r{};
  f.memlock_unlimited = getrlimit(RLIMIT_MEMLOCK, &r) == 0 && r.rlim_cur == RLIM_INFINITY;
  return f;
}

}  // namespace oomsnap

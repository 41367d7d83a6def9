#include "agent/ops/self_confinement.h"

#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "base/seccomp_filter.h"
#include "base/text.h"
#include "core/proc_info.h"

namespace oomsnap {
namespace {

constexpr std::string_view kOtherProcesses = "tracing or writing other processes";
constexpr std::string_view kMounts = "mounts and namespaces";
constexpr std::string_view kHandles = "files by handle, outside every mount namespace";
constexpr std::string_view kKernel = "the kernel, its modules, clock and host name";
constexpr std::string_view kKeys = "keyrings";
constexpr std::string_view kNewObjects = "kernel objects it only creates at start or never";

// A field of /proc/self/status ("Threads", "Seccomp_filters"), or "?".
std::string status_field(const std::string& status, const std::string& name) {
  const std::string key = "\n" + name + ":";
  size_t at = status.find(key);
  if (at == std::string::npos) return "?";
  at = status.find_first_not_of(" \t", at + key.size());
  return at == std::string::npos ? "?" : status.substr(at, status.find('\n', at) - at);
}

// Whether this kernel takes seccomp filters with an errno action; why not.
bool filters_available(std::string& why) {
  if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
    why = "this kernel has no seccomp (CONFIG_SECCOMP): " + errno_text(errno);
    return false;
  }
  uint32_t action = SECCOMP_RET_ERRNO;
  if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
    why = "seccomp filters are not available here (CONFIG_SECCOMP_FILTER, Linux 4.14): " + errno_text(errno);
    return false;
  }
  return true;
}

}  // namespace

const std::vector<DeniedSyscall>& agent_denied_syscalls() {
  // process_vm_readv stays: the capture process, which inherits this filter,
  // reads targets with it. chroot, capset, prctl, setrlimit, seccomp and
  // landlock stay too: the capture process confines itself with them.
  static const std::vector<DeniedSyscall> denied = {
      {"ptrace", kOtherProcesses},          {"process_vm_writev", kOtherProcesses},
      {"process_madvise", kOtherProcesses}, {"pidfd_getfd", kOtherProcesses},
      {"kcmp", kOtherProcesses},            {"mount", kMounts},
      {"umount2", kMounts},                 {"pivot_root", kMounts},
      {"move_mount", kMounts},              {"open_tree", kMounts},
      {"fsopen", kMounts},                  {"fsconfig", kMounts},
      {"fsmount", kMounts},                 {"fspick", kMounts},
      {"mount_setattr", kMounts},           {"setns", kMounts},
      {"unshare", kMounts},                 {"open_by_handle_at", kHandles},
      {"name_to_handle_at", kHandles},      {"kexec_load", kKernel},
      {"kexec_file_load", kKernel},         {"init_module", kKernel},
      {"finit_module", kKernel},            {"delete_module", kKernel},
      {"reboot", kKernel},                  {"swapon", kKernel},
      {"swapoff", kKernel},                 {"acct", kKernel},
      {"iopl", kKernel},                    {"ioperm", kKernel},
      {"quotactl", kKernel},
      {"quotactl_fd", kKernel},             {"lookup_dcookie", kKernel},
      {"uselib", kKernel},                  {"vhangup", kKernel},
      {"settimeofday", kKernel},            {"clock_settime", kKernel},
      {"clock_adjtime", kKernel},           {"adjtimex", kKernel},
      {"sethostname", kKernel},             {"setdomainname", kKernel},
      {"keyctl", kKeys},                    {"add_key", kKeys},
      {"request_key", kKeys},               {"perf_event_open", kNewObjects},
      {"userfaultfd", kNewObjects},         {"fanotify_init", kNewObjects},
      // io_uring runs its operations where this filter does not look.
      {"io_uring_setup", kNewObjects},      {"io_uring_enter", kNewObjects},
      {"io_uring_register", kNewObjects},
  };
  return denied;
}

bool confine_agent(Confinement& out, std::string& why) {
  out = Confinement{};
  if (!filters_available(out.summary)) {
    out.supported = false;
    return true;
  }
  SeccompFilter filter(SCMP_ACT_ALLOW);
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  std::vector<std::string> groups;
  size_t denied = 0;
  for (const DeniedSyscall& d : agent_denied_syscalls()) {
    const int nr = seccomp_syscall_resolve_name(std::string(d.name).c_str());
    if (nr < 0) {  // unknown to this libseccomp, or not a system call on this architecture
      out.unknown.emplace_back(d.name);
      continue;
    }
    filter.add(eperm, nr);
    ++denied;
    if (groups.empty() || groups.back() != d.group) groups.emplace_back(d.group);
  }
  // bpf(2): the command is its first argument, compared as 64 bits, so a
  // command with high bits set (which the kernel would truncate) is refused too.
  filter.add(eperm, SCMP_SYS(bpf), {SCMP_A0(SCMP_CMP_LT, kFirstAllowedBpfCommand)});
  filter.add(eperm, SCMP_SYS(bpf), {SCMP_A0(SCMP_CMP_GT, kLastAllowedBpfCommand)});
  // syslog(2): reading the kernel's log (its OOM reports, where /dev/kmsg is
  // out of reach) and its size; never clearing it or touching the console.
  filter.add(eperm, SCMP_SYS(syslog), {SCMP_A0(SCMP_CMP_LT, kSyslogReadAll)});
  for (scmp_datum_t action = kSyslogReadAll + 1; action < kSyslogSizeBuffer; ++action)
    filter.add(eperm, SCMP_SYS(syslog), {SCMP_A0(SCMP_CMP_EQ, action)});
  filter.add(eperm, SCMP_SYS(syslog), {SCMP_A0(SCMP_CMP_GT, kSyslogSizeBuffer)});
  // New processes and threads, never in new namespaces (one rule per flag:
  // any one of them refuses the call).
  for (scmp_datum_t ns : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                          CLONE_NEWCGROUP})
    filter.add(eperm, SCMP_SYS(clone), {SCMP_A0(SCMP_CMP_MASKED_EQ, ns, ns)});
  filter.add(SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3));
  if (!filter.load(why)) {
    why = "the agent's own seccomp filter: " + why;
    return false;
  }
  std::string status;
  read_text_file("/proc/self/status", status);
  status.insert(0, "\n");
  out.summary = "seccomp deny-list loaded on all " + status_field(status, "Threads") + " threads (" +
                status_field(status, "Seccomp_filters") + " filter(s) in place; the capture process inherits it): " +
                std::to_string(denied) + " system calls answer EPERM (" + join(groups, ", ") +
                "); bpf(2) keeps map lookups, updates and deletes only; syslog(2) reads the log and its size only; "
                "clone(2) makes no namespace; clone3 answers ENOSYS (glibc falls back to clone)";
  if (!out.unknown.empty()) out.summary += "; unknown to this libseccomp, left out: " + join(out.unknown, ", ");
  return true;
}

}  // namespace oomsnap

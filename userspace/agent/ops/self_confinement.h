// What the agent denies itself once its BPF programs are attached (issue
// #28): a seccomp deny-list on every thread, inherited by the capture
// process it spawns. A compromised agent keeps what its work needs (reading
// BPF maps and ring buffers, /proc and cgroupfs, spawning the capture
// process, writing records, serving HTTP, sd_notify) and loses what it never
// uses after start: tracing or writing other processes, mounts, namespaces,
// loading BPF programs or kernel modules, kexec, keyrings, io_uring.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "base/syslog_actions.h"

namespace oomsnap {

struct DeniedSyscall {
  std::string_view name;   // as libseccomp names it
  std::string_view group;  // why the agent has no use for it
};

// The system calls that answer EPERM after start, whatever their arguments.
// bpf(2) and clone(2) are limited by argument instead (see below), clone3
// answers ENOSYS (its flags are out of seccomp's reach; glibc then uses clone).
const std::vector<DeniedSyscall>& agent_denied_syscalls();

// bpf(2) commands the agent still makes after start: the map lookups, updates
// and deletes of BpfEventSource (the ring buffers are read through mmap).
// Every other command (BPF_PROG_LOAD, BPF_MAP_CREATE, links, pins, ...)
// answers EPERM.
inline constexpr unsigned kFirstAllowedBpfCommand = 1;  // BPF_MAP_LOOKUP_ELEM
inline constexpr unsigned kLastAllowedBpfCommand = 4;   // BPF_MAP_GET_NEXT_KEY

// syslog(2): the actions of base/syslog_actions.h only; every other action
// (clearing the log, the console's level) answers EPERM.

struct Confinement {
  bool supported = true;  // false: this kernel has no seccomp filters (nothing loaded)
  std::string summary;    // what was loaded, or why nothing was, for the log
  std::vector<std::string> unknown;  // names libseccomp does not know here (left out)
};

// Loads the deny-list on every thread of this process. false + why when the
// kernel has seccomp filters but the filter could not be loaded; true with
// supported = false when the kernel has none.
bool confine_agent(Confinement& out, std::string& why);

}  // namespace oomsnap

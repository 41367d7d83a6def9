// A seccomp filter built rule by rule (libseccomp) and loaded on every thread
// of the process at once (TSYNC): a thread started before the load, such as a
// worker or a server thread, is confined as well. Shared by the capture
// process's allow-list (capture/sandbox_policy.cpp) and the agent's deny-list
// (agent/ops/self_confinement.cpp).
#pragma once
#include <seccomp.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace oomsnap {

class SeccompFilter {
 public:
  // default_action: what a system call no rule matches gets (SCMP_ACT_*).
  explicit SeccompFilter(uint32_t default_action);
  ~SeccompFilter();
  SeccompFilter(const SeccompFilter&) = delete;
  SeccompFilter& operator=(const SeccompFilter&) = delete;

  // A rule; conditions on the arguments all hold (SCMP_A0(...), ...). The
  // first rule libseccomp refuses is kept, naming the system call, and load()
  // reports it: a filter missing a rule is never loaded.
  // For a process that set no_new_privs itself and whose filter already in
  // place refuses prctl: load() then skips libseccomp's own prctl for it.
  void no_new_privs_already_set();
  void add(uint32_t action, int syscall, std::initializer_list<scmp_arg_cmp> args = {});
  // Loads it (setting no_new_privs first, as an unprivileged load needs).
  // false + why (the first refused rule, or the kernel's answer) on failure.
  bool load(std::string& why);

 private:
  scmp_filter_ctx ctx_ = nullptr;
  std::string error_;
};

// libseccomp's name for `syscall` on this architecture, or "syscall N".
std::string syscall_name(int syscall);

}  // namespace oomsnap

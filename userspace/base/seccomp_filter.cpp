#include "base/seccomp_filter.h"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace oomsnap {

SeccompFilter::SeccompFilter(uint32_t default_action) : ctx_(seccomp_init(default_action)) {
  if (!ctx_) {
    error_ = "seccomp_init failed";
    return;
  }
  if (int rc = seccomp_attr_set(ctx_, SCMP_FLTATR_CTL_TSYNC, 1); rc != 0)
    error_ = std::string("seccomp: cannot ask for every thread (TSYNC): ") + std::strerror(-rc);
}

SeccompFilter::~SeccompFilter() {
  if (ctx_) seccomp_release(ctx_);
}

void SeccompFilter::no_new_privs_already_set() {
  if (!error_.empty()) return;
  if (int rc = seccomp_attr_set(ctx_, SCMP_FLTATR_CTL_NNP, 0); rc != 0)
    error_ = std::string("seccomp: cannot leave no_new_privs to the caller: ") + std::strerror(-rc);
}

void SeccompFilter::add(uint32_t action, int syscall, std::initializer_list<scmp_arg_cmp> args) {
  if (!error_.empty()) return;
  const std::vector<scmp_arg_cmp> conditions(args);
  const int rc = seccomp_rule_add_array(ctx_, action, syscall, static_cast<unsigned>(conditions.size()),
                                        conditions.empty() ? nullptr : conditions.data());
  if (rc != 0) error_ = "seccomp rule for " + syscall_name(syscall) + " refused: " + std::strerror(-rc);
}

bool SeccompFilter::load(std::string& why) {
  if (error_.empty()) {
    if (int rc = seccomp_load(ctx_); rc != 0) error_ = std::string("seccomp filter not loaded: ") + std::strerror(-rc);
  }
  if (error_.empty()) return true;
  why = error_;
  return false;
}

std::string syscall_name(int syscall) {
  char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, syscall);
  std::string s = name ? name : "syscall " + std::to_string(syscall);
  std::free(name);
  return s;
}

}  // namespace oomsnap

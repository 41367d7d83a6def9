// The start-up capability check: which capability is missing and what it
// costs, on kernels with and without CAP_BPF / CAP_CHECKPOINT_RESTORE.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <unistd.h>

#include "agent/ops/privileges.h"

using namespace oomsnap;

namespace {

constexpr int kCapBpf = 39, kCapPerfmon = 38, kCapCheckpointRestore = 40;

uint64_t caps(std::initializer_list<int> list) {
  uint64_t m = 0;
  for (int c : list) m |= uint64_t{1} << c;
  return m;
}

// What the systemd unit and the DaemonSet grant (deploy/): nothing missing.
const uint64_t kDeployed = caps({kCapBpf, kCapPerfmon, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE,
                                 kCapCheckpointRestore, CAP_SYSLOG});

PrivilegeFacts facts(uint64_t effective, int last = 40, int major = 6, int minor = 18) {
  PrivilegeFacts f;
  f.effective = effective;
  f.cap_last_cap = last;
  f.kernel_major = major;
  f.kernel_minor = minor;
  return f;
}

std::string names(const std::vector<MissingPrivilege>& v) {
  std::string s;
  for (const auto& m : v) s += m.capabilities + (m.fatal ? "!" : "") + ";";
  return s;
}

}  // namespace

TEST(Privileges, TheDeployedSetLacksNothing) {
  EXPECT_EQ(names(missing_privileges(facts(kDeployed))), "");
  EXPECT_EQ(names(missing_privileges(facts(~uint64_t{0}))), "");  // full root
}

TEST(Privileges, NoBpfCapabilityIsFatalAndNamed) {
  auto m = missing_privileges(facts(kDeployed & ~caps({kCapPerfmon})));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_TRUE(m[0].fatal);
  EXPECT_EQ(m[0].capabilities, "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)");
  EXPECT_NE(m[0].consequence.find("OOM kills"), std::string::npos);
  // CAP_SYS_ADMIN stands in for both.
  EXPECT_EQ(names(missing_privileges(facts((kDeployed & ~caps({kCapBpf, kCapPerfmon})) | caps({CAP_SYS_ADMIN})))), "");
}

TEST(Privileges, EachReadingCapabilityIsNamedWithItsCost) {
  auto m = missing_privileges(facts(kDeployed & ~caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH})));
  EXPECT_EQ(names(m), "CAP_SYS_PTRACE;CAP_DAC_READ_SEARCH;");
  EXPECT_NE(m[0].consequence.find("snapshots fail"), std::string::npos);
  EXPECT_EQ(names(missing_privileges(facts(kDeployed & ~caps({kCapCheckpointRestore})))),
            "CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN);");
  EXPECT_EQ(names(missing_privileges(facts(kDeployed & ~caps({CAP_DAC_OVERRIDE})))), "CAP_DAC_OVERRIDE;");
  EXPECT_EQ(names(missing_privileges(facts(0))),
            "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)!;CAP_SYS_PTRACE;CAP_DAC_READ_SEARCH;"
            "CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN);CAP_DAC_OVERRIDE;CAP_SYSLOG;");
  m = missing_privileges(facts(kDeployed & ~caps({CAP_SYSLOG})));
  ASSERT_EQ(names(m), "CAP_SYSLOG;");  // not fatal: the kernel's OOM reports only
  EXPECT_NE(m[0].consequence.find("kernel's own OOM reports"), std::string::npos);
}

TEST(Privileges, OlderKernelsNeedSysAdminAndMemlock) {
  // 5.4: no CAP_BPF (cap_last_cap 37), maps charged to RLIMIT_MEMLOCK.
  const uint64_t old_set = caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE, CAP_SYSLOG});
  EXPECT_EQ(names(missing_privileges(facts(old_set, 37, 5, 4))),
            "CAP_SYS_ADMIN (this kernel has no CAP_BPF)!;CAP_SYS_ADMIN (this kernel has no CAP_CHECKPOINT_RESTORE);"
            "CAP_SYS_RESOURCE (kernels before 5.11, unless RLIMIT_MEMLOCK is unlimited);");
  EXPECT_EQ(names(missing_privileges(facts(old_set | caps({CAP_SYS_ADMIN, CAP_SYS_RESOURCE}), 37, 5, 4))), "");
  auto f = facts(old_set | caps({CAP_SYS_ADMIN}), 37, 5, 4);
  f.memlock_unlimited = true;  // LimitMEMLOCK=infinity
  EXPECT_EQ(names(missing_privileges(f)), "");
  // 5.10 has CAP_BPF (5.8) and CAP_CHECKPOINT_RESTORE (5.9) but still memlock.
  EXPECT_EQ(names(missing_privileges(facts(kDeployed, 40, 5, 10))),
            "CAP_SYS_RESOURCE (kernels before 5.11, unless RLIMIT_MEMLOCK is unlimited);");
  EXPECT_EQ(needed_capabilities(facts(0, 37, 5, 4)),
            "CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_DAC_OVERRIDE CAP_SYSLOG CAP_SYS_RESOURCE");
}

TEST(Privileges, ThisProcessFactsAreRead) {
  const PrivilegeFacts f = current_privilege_facts();
  EXPECT_GE(f.cap_last_cap, 37);
  EXPECT_GE(f.kernel_major, 5);
  if (geteuid() == 0) {
    EXPECT_NE(f.effective, 0u);
  }
}

// SeccompFilter: a rule libseccomp refuses keeps the filter from loading and
// is named; a loaded filter holds on threads started before it (TSYNC).
// Each case runs in a child process: a filter cannot be taken off again.
#include "base/seccomp_filter.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "in_child.h"

using namespace oomsnap;
using oomsnap_test::in_child;

TEST(SeccompFilter, ARefusedRuleIsNamedAndNothingIsLoaded) {
  const std::string report = in_child([] {
    SeccompFilter f(SCMP_ACT_ALLOW);
    f.add(SCMP_ACT_ERRNO(EPERM), SCMP_SYS(getppid));
    // An argument index beyond the six a system call has.
    f.add(SCMP_ACT_ERRNO(EPERM), SCMP_SYS(getpgid), {scmp_arg_cmp{7, SCMP_CMP_EQ, 0, 0}});
    std::string why;
    if (f.load(why)) return std::string("loaded a filter with a refused rule");
    if (why.find("getpgid") == std::string::npos) return "the refused rule is not named: " + why;
    // Neither rule reached the kernel.
    if (syscall(SYS_getppid) < 0) return std::string("getppid refused: a filter was loaded after all");
    return std::string();
  });
  EXPECT_EQ(report, "");
}

TEST(SeccompFilter, HoldsOnAThreadStartedBeforeTheLoad) {
  const std::string report = in_child([] {
    std::mutex m;
    std::condition_variable cv;
    bool loaded = false;
    long rc = 0;
    int err = 0;
    std::thread early([&] {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return loaded; });
      rc = syscall(SYS_getppid);
      err = errno;
    });
    SeccompFilter f(SCMP_ACT_ALLOW);
    f.add(SCMP_ACT_ERRNO(EPERM), SCMP_SYS(getppid));
    std::string why;
    const bool ok = f.load(why);
    {
      std::lock_guard lock(m);
      loaded = true;
    }
    cv.notify_one();
    early.join();
    if (!ok) return "not loaded: " + why;
    if (rc != -1 || err != EPERM)
      return "getppid on the earlier thread: " + std::to_string(rc) + ", errno " + std::to_string(err);
    return std::string();
  });
  EXPECT_EQ(report, "");
}

TEST(SeccompFilter, NamesSystemCallsByTheirNumber) {
  EXPECT_EQ(syscall_name(SCMP_SYS(ptrace)), "ptrace");
  EXPECT_EQ(syscall_name(99999), "syscall 99999");
}

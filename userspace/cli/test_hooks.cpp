#include "cli/test_hooks.h"

#include <algorithm>
#include <cstdlib>
#include <string>

// Set by userspace/CMakeLists.txt for each executable; a build that forgets it
// must not fall back to either variant silently.
#ifndef OOMSNAP_TEST_HOOKS
#error "OOMSNAP_TEST_HOOKS must be 0 (oomsnap) or 1 (oomsnap-test-hooks)"
#endif

namespace oomsnap {

#if OOMSNAP_TEST_HOOKS

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

TestHooks read_test_hooks() {
  TestHooks hooks;
  hooks.built_in = true;
  if (const std::string stall = env("OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2"); !stall.empty())
    hooks.agent.stall_on_sigusr2 = std::chrono::seconds(std::clamp(std::atoi(stall.c_str()), 0, 60));
  hooks.agent.capture_helper = env("OOMSNAP_CAPTURE_HELPER");
  hooks.agent.capture_in_process = env("OOMSNAP_TEST_CAPTURE_IN_PROCESS") == "1";
  return hooks;
}

#else

// The shipped binary: no hook can be switched on, and no hook's name is in it
// (tests/build/test_hooks_build_test.cpp checks both).
TestHooks read_test_hooks() { return {}; }

#endif

}  // namespace oomsnap

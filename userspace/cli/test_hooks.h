// The test hooks of `oomsnap watch` (AgentTestHooks, agent/agent.h), read from
// the environment only in the test executable. test_hooks.cpp is compiled
// twice, not into the cli library: with OOMSNAP_TEST_HOOKS=0 into `oomsnap`,
// which then holds neither the code that reads them nor their names, and with
// OOMSNAP_TEST_HOOKS=1 into `oomsnap-test-hooks`, which the integration tests
// and tools/bench-agent.sh run (userspace/CMakeLists.txt).
#pragma once
#include "agent/agent.h"

namespace oomsnap {

struct TestHooks {
  bool built_in = false;  // this executable reads them (oomsnap-test-hooks)
  AgentTestHooks agent;   // what the environment asked for; all off in `oomsnap`
};

// `oomsnap`: all off, whatever the environment holds. `oomsnap-test-hooks`:
// $OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2=N (0..60 s), $OOMSNAP_CAPTURE_HELPER=PATH,
// $OOMSNAP_TEST_CAPTURE_IN_PROCESS=1, $OOMSNAP_TEST_CONFINEMENT_PROBE_PID=PID.
TestHooks read_test_hooks();

}  // namespace oomsnap

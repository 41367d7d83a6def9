// `oomsnap watch [--config FILE] [--bpf-mode auto|raw_tp|tracepoint] [--log-level LEVEL]
//                [--http-listen HOST:PORT]`
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "cli/test_hooks.h"

namespace oomsnap {

// Runs the agent until SIGTERM/SIGINT. Exit status: 0 clean stop, 2 bad
// arguments or configuration, 1 the agent cannot run here (privileges, no
// memory cgroup, BPF refused, unwritable storage). --help goes to out; usage
// errors and the agent's log to err. hooks: read_test_hooks() (none in the
// shipped binary).
int run_watch_command(const std::vector<std::string>& args, const TestHooks& hooks, std::ostream& out,
                      std::ostream& err);

}  // namespace oomsnap

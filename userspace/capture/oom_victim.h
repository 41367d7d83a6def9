// The capture process offers itself as the first victim of an OOM kill.
// It shares the agent's memory cgroup (the DaemonSet's and the unit's limit)
// and may hold hundreds of MiB reading a hostile target, where the agent holds
// little: when that cgroup runs out, the kernel must take the capture process
// (the agent then reports the capture as killed), never the agent.
#pragma once
#include <string>

namespace oomsnap {

// /proc/self/oom_score_adj := 1000 (the highest; raising it needs no
// privilege). Call before the seccomp filter, which allows no such open.
bool become_first_oom_victim(std::string& why);

}  // namespace oomsnap

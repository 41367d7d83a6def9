// The collection step of an incident, run on the agent's worker thread: pick
// the process the kernel would kill in the container, check it is still the
// same process in the same cgroup, capture its heap through the one-shot
// capture path (in the sandboxed capture process), and check again.
#pragma once
#include <sys/types.h>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "agent/incident.h"
#include "capture/capture.h"

namespace oomsnap {

// Every pid in the container's subtree (its own cgroup.procs and its
// descendants'): on v1 and v2 a container's processes may sit in child cgroups.
std::vector<pid_t> container_pids(const CgroupFs& fs, const std::string& memcg);

// The memory cgroup of a live process, relative to the mount; nullopt when it
// has exited or its cgroup is outside the mount's root.
std::optional<std::string> memcg_of_pid(const CgroupFs& fs, pid_t pid);

// True when `path` is `ancestor` or below it.
bool memcg_within(const std::string& path, const std::string& ancestor);

// The process the kernel's OOM killer would pick in the incident's container
// (badness scaled by its limit; oom_score_adj -1000 never). nullopt with
// inc.outcome = kNoVictim and the reason when there is none.
std::optional<VictimCandidate> choose_victim(Incident& inc, const CgroupFs& fs);

// Checks the victim is still the scored process in the container, captures
// it with `capture`, and checks again: fills inc.victim, inc.capture,
// inc.outcome, inc.reason and the collection timestamps. A capture process
// that failed (killed, died, over a cap) gives outcome kFailed with its
// reason. Never throws for target-side trouble.
void capture_victim(Incident& inc, const VictimCandidate& victim, const CgroupFs& fs, const CaptureOptions& options,
                    const CaptureFn& capture);

// choose_victim + capture_victim.
void collect_incident(Incident& inc, const CgroupFs& fs, const CaptureOptions& options, const CaptureFn& capture);

}  // namespace oomsnap

// The collection step of an incident, run on the agent's worker thread: pick
// the process the kernel would kill in the container, check it is still the
// same process in the same cgroup, capture its heap through the one-shot
// capture path (in the sandboxed capture process), and check again.
#pragma once
#include <sys/types.h>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroup/cgroup.h"
#include "agent/incident/incident.h"
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

// Every process of the incident's container the kernel's OOM killer could
// pick, in its order (badness scaled by the container's limit; oom_score_adj
// -1000 never). Empty, with inc.outcome = kNoVictim and the reason, when none.
std::vector<VictimCandidate> rank_container(Incident& inc, const CgroupFs& fs);

// The first of rank_container: the process the kernel would kill.
std::optional<VictimCandidate> choose_victim(Incident& inc, const CgroupFs& fs);

// Checks the victim is still the scored process in the container, captures
// it with `capture`, and checks again: fills inc.victim, inc.capture,
// inc.outcome, inc.reason and the collection timestamps. A capture process
// that failed (killed, died, over a cap) gives outcome kFailed with its
// reason. Never throws for target-side trouble.
void capture_victim(Incident& inc, const VictimCandidate& victim, const CgroupFs& fs, const CaptureOptions& options,
                    const CaptureFn& capture);

// At most this many of the container's other processes are tried per
// incident (each try is a capture process), and one is tried only while this
// much of the incident's budget is left.
inline constexpr size_t kMaxOtherAttempts = 16;
inline constexpr MonoNs kMinOtherBudgetNs = 100'000'000;

// The victim (capture_victim), then up to max_processes - 1 more processes of
// the container in the kernel's order, each checked and captured the same
// way, skipping those no collector recognises (counted in
// inc.others_without_runtime), all within options.budget and
// options.max_read_bytes together: inc.other_processes.
void collect_incident(Incident& inc, const CgroupFs& fs, const CaptureOptions& options, const CaptureFn& capture,
                      size_t max_processes = 1);

}  // namespace oomsnap

#include "agent/collect.h"

#include <algorithm>

#include "agent/victim.h"
#include "capture/capture.h"
#include "core/proc_info.h"

namespace oomsnap {

std::vector<pid_t> container_pids(const CgroupFs& fs, const std::string& memcg) {
  std::vector<pid_t> pids = cgroup_pids(fs, memcg);
  for (const auto& node : list_memcgs(fs, memcg)) {
    if (node.rel_path == memcg) continue;
    auto more = cgroup_pids(fs, node.rel_path);
    pids.insert(pids.end(), more.begin(), more.end());
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

std::optional<std::string> memcg_of_pid(const CgroupFs& fs, pid_t pid) {
  std::string text;
  if (!read_text_file("/proc/" + std::to_string(pid) + "/cgroup", text)) return std::nullopt;
  auto path = memcg_path_of(text, fs.version);
  if (!path) return std::nullopt;
  return to_mount_relative(fs, *path);
}

bool memcg_within(const std::string& path, const std::string& ancestor) {
  if (ancestor == "/" || path == ancestor) return true;
  return path.size() > ancestor.size() && path.compare(0, ancestor.size(), ancestor) == 0 &&
         path[ancestor.size()] == '/';
}

std::optional<VictimCandidate> choose_victim(Incident& inc, const CgroupFs& fs) {
  const auto pids = container_pids(fs, inc.container.cgroup_path);
  // The kernel scales oom_score_adj by the limit of the OOM-ing cgroup.
  const uint64_t limit = inc.container.stats.limit_bytes.value_or(0);
  auto victim = pick_victim(read_candidates(pids), limit);
  if (!victim) {
    inc.outcome = CollectionOutcome::kNoVictim;
    inc.reason = pids.empty() ? "the container has no processes"
                              : "no process the OOM killer could pick (exited, no memory, or oom_score_adj -1000)";
  }
  return victim;
}

void collect_incident(Incident& inc, const CgroupFs& fs, const CaptureOptions& options, const CaptureFn& capture) {
  if (auto victim = choose_victim(inc, fs)) capture_victim(inc, *victim, fs, options, capture);
}

void capture_victim(Incident& inc, const VictimCandidate& chosen, const CgroupFs& fs, const CaptureOptions& options,
                    const CaptureFn& capture) {
  const std::string& container = inc.container.cgroup_path;
  inc.victim = chosen;
  const VictimCandidate* victim = &chosen;
  const pid_t pid = victim->pid;
  const std::string who = "victim pid " + std::to_string(pid) + " (" + victim->comm + ")";

  // Before: still the process that was scored, still in the container.
  // A zombie (e.g. just OOM-killed) still has its /proc/PID/stat, but its
  // memory is being torn down and its cgroup reads as the root.
  auto before = read_identity(pid);
  if (!before || before->start_time_ticks != victim->start_time_ticks || before->exited()) {
    inc.outcome = CollectionOutcome::kVictimGone;
    inc.reason = who + " exited before collection started";
    return;
  }
  auto cg_before = memcg_of_pid(fs, pid);
  if (!cg_before || !memcg_within(*cg_before, container)) {
    inc.outcome = CollectionOutcome::kVictimGone;
    inc.reason = who + " left the container before collection started" +
                 (cg_before ? " (now in " + *cg_before + ")" : "");
    return;
  }

  inc.timeline.collection_start = monotonic_now_ns();
  std::string error;
  auto rec = capture(pid, options, error);
  inc.timeline.snapshot_complete = monotonic_now_ns();
  if (!rec) {
    inc.outcome = CollectionOutcome::kVictimGone;
    inc.reason = who + " exited before collection: " + error;
    return;
  }
  if (rec->identity.start_time_ticks != victim->start_time_ticks) {
    inc.outcome = CollectionOutcome::kDiscarded;
    inc.reason = "pid " + std::to_string(pid) + " was reused by another process before collection";
    return;
  }

  // After: a different process under the same pid, or a move to another
  // cgroup, means the snapshot may not describe the container's victim.
  auto after = read_identity(pid);
  if (after && after->exited()) after.reset();  // exited: its cgroup no longer says anything
  if (after && after->start_time_ticks != victim->start_time_ticks) {
    inc.outcome = CollectionOutcome::kDiscarded;
    inc.reason = "pid " + std::to_string(pid) + " was reused by another process during collection";
    return;
  }
  if (after) {
    auto cg_after = memcg_of_pid(fs, pid);
    if (cg_after && !memcg_within(*cg_after, container)) {
      inc.outcome = CollectionOutcome::kDiscarded;
      inc.reason = who + " moved to cgroup " + *cg_after + " during collection";
      return;
    }
  } else {
    inc.reason = who + " exited during or right after collection; the snapshot status says how much was read";
  }
  if (!rec->process_failure.empty()) {
    inc.outcome = CollectionOutcome::kFailed;
    inc.reason = "capture of " + who + " failed: " + rec->process_failure;
  } else {
    inc.outcome = CollectionOutcome::kCollected;
  }
  inc.capture = std::move(rec);
}

}  // namespace oomsnap

#include "agent/incident/collect.h"

#include <algorithm>

#include "agent/incident/victim.h"
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
  return path.size() > ancestor.size() && path.starts_with(ancestor) &&
         path[ancestor.size()] == '/';
}

namespace {

// One process's capture, checked before and after: the same process (pid +
// start time) in the container, or a reason why its snapshot is not kept.
struct CandidateCapture {
  std::optional<CaptureRecord> capture;
  CollectionOutcome outcome = CollectionOutcome::kNotAttempted;
  std::string reason;
  MonoNs start = 0, end = 0;
};

CandidateCapture capture_candidate(const VictimCandidate& who_c, const std::string& role, const std::string& container,
                                   const CgroupFs& fs, const CaptureOptions& options, const CaptureFn& capture) {
  CandidateCapture r;
  const pid_t pid = who_c.pid;
  const std::string who = role + " pid " + std::to_string(pid) + " (" + who_c.comm + ")";

  // Before: still the process that was scored, still in the container.
  // A zombie (e.g. just OOM-killed) still has its /proc/PID/stat, but its
  // memory is being torn down and its cgroup reads as the root.
  auto before = read_identity(pid);
  if (!before || before->start_time_ticks != who_c.start_time_ticks || before->exited()) {
    r.outcome = CollectionOutcome::kVictimGone;
    r.reason = who + " exited before collection started";
    return r;
  }
  auto cg_before = memcg_of_pid(fs, pid);
  if (!cg_before || !memcg_within(*cg_before, container)) {
    r.outcome = CollectionOutcome::kVictimGone;
    r.reason = who + " left the container before collection started" + (cg_before ? " (now in " + *cg_before + ")" : "");
    return r;
  }

  r.start = monotonic_now_ns();
  std::string error;
  auto rec = capture(pid, options, error);
  r.end = monotonic_now_ns();
  if (!rec) {
    r.outcome = CollectionOutcome::kVictimGone;
    r.reason = who + " exited before collection: " + error;
    return r;
  }
  if (rec->identity.start_time_ticks != who_c.start_time_ticks) {
    r.outcome = CollectionOutcome::kDiscarded;
    r.reason = "pid " + std::to_string(pid) + " was reused by another process before collection";
    return r;
  }

  // After: a different process under the same pid, or a move to another
  // cgroup, means the snapshot may not describe the container's process.
  auto after = read_identity(pid);
  if (after && after->exited()) after.reset();  // exited: its cgroup no longer says anything
  if (after && after->start_time_ticks != who_c.start_time_ticks) {
    r.outcome = CollectionOutcome::kDiscarded;
    r.reason = "pid " + std::to_string(pid) + " was reused by another process during collection";
    return r;
  }
  if (after) {
    auto cg_after = memcg_of_pid(fs, pid);
    if (cg_after && !memcg_within(*cg_after, container)) {
      r.outcome = CollectionOutcome::kDiscarded;
      r.reason = who + " moved to cgroup " + *cg_after + " during collection";
      return r;
    }
  } else {
    r.reason = who + " exited during or right after collection; the snapshot status says how much was read";
  }
  if (!rec->process_failure.empty()) {
    r.outcome = CollectionOutcome::kFailed;
    r.reason = "capture of " + who + " failed: " + rec->process_failure;
  } else {
    r.outcome = CollectionOutcome::kCollected;
  }
  r.capture = std::move(rec);
  return r;
}

// The candidates not in `listed`, their memory summed: a field is summed
// only while every one of them has it (an exited one has none).
IncidentContainer::Unlisted sum_unlisted(const std::vector<VictimCandidate>& all, const std::vector<VictimCandidate>& listed) {
  IncidentContainer::Unlisted u;
  bool first = true;
  for (const VictimCandidate& c : all) {
    if (std::any_of(listed.begin(), listed.end(), [&c](const VictimCandidate& l) { return l.pid == c.pid; })) continue;
    if (!c.memory.rss_bytes) continue;  // exited before its /proc reads
    ++u.count;
    for (const auto& f : kProcessMemoryFields) {
      auto& sum = u.memory.*f.member;
      const auto& v = c.memory.*f.member;
      if (first) sum = v;
      else if (sum && v) *sum += *v;
      else sum.reset();
    }
    first = false;
  }
  return u;
}

bool no_runtime(const CandidateCapture& c) {
  return c.outcome == CollectionOutcome::kCollected && c.capture && c.capture->result.language == "unknown";
}

}  // namespace

std::vector<VictimCandidate> rank_container(Incident& inc, const CgroupFs& fs) {
  const auto pids = container_pids(fs, inc.container.cgroup_path);
  auto scan = read_candidates(pids);
  auto& candidates = scan.candidates;
  inc.container.tasks_total = candidates.size();
  inc.container.tasks_cut = std::move(scan.cut);
  inc.container.tasks = largest_tasks(candidates, kMaxRecordedTasks);
  inc.container.unlisted_tasks = sum_unlisted(candidates, inc.container.tasks);
  // The kernel scales oom_score_adj by the limit of the OOM-ing cgroup.
  const uint64_t limit = inc.container.stats.limit_bytes.value_or(0);
  auto ranked = rank_victims(std::move(candidates), limit);
  if (ranked.empty()) {
    inc.outcome = CollectionOutcome::kNoVictim;
    inc.reason = pids.empty() ? "the container has no processes"
                              : "no process the OOM killer could pick (exited, no memory, or oom_score_adj -1000)";
    if (!inc.container.tasks_cut.empty()) inc.reason += "; " + inc.container.tasks_cut;
  }
  return ranked;
}

std::optional<VictimCandidate> choose_victim(Incident& inc, const CgroupFs& fs) {
  auto ranked = rank_container(inc, fs);
  if (ranked.empty()) return std::nullopt;
  return std::move(ranked.front());
}

void collect_incident(Incident& inc, const CgroupFs& fs, const CaptureOptions& options, const CaptureFn& capture,
                      size_t max_processes) {
  // The container's charge by kind as the capture starts, before the
  // capture's own reads move anything.
  inc.container.memory_stat = read_memory_stat(fs, inc.container.cgroup_path);
  auto ranked = rank_container(inc, fs);
  if (ranked.empty()) return;
  capture_victim(inc, ranked.front(), fs, options, capture);
  if (max_processes <= 1 || ranked.size() < 2) return;

  // The others share what the victim left of the budget, in time and bytes.
  const MonoNs t0 = inc.timeline.collection_start ? inc.timeline.collection_start : monotonic_now_ns();
  const auto budget_ns = static_cast<MonoNs>(std::chrono::nanoseconds(options.budget).count());
  uint64_t bytes_left = options.max_read_bytes;
  if (inc.capture) bytes_left -= std::min<uint64_t>(bytes_left, inc.capture->result.snapshot.bytes_read);
  size_t tried = 0;
  for (size_t i = 1; i < ranked.size() && inc.other_processes.size() + 1 < max_processes; ++i) {
    if (tried == kMaxOtherAttempts) {
      inc.others_reason = "stopped after " + std::to_string(tried) + " processes tried";
      break;
    }
    const MonoNs spent = monotonic_now_ns() - t0;
    const MonoNs left = spent < budget_ns ? budget_ns - spent : 0;
    if (left < kMinOtherBudgetNs || bytes_left == 0) {
      inc.others_reason = "the incident's capture budget was spent";
      break;
    }
    CaptureOptions o = options;
    o.budget = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(left));
    o.max_read_bytes = bytes_left;
    ++tried;
    auto c = capture_candidate(ranked[i], "process", inc.container.cgroup_path, fs, o, capture);
    if (no_runtime(c)) {
      ++inc.others_without_runtime;
      continue;
    }
    if (c.capture) bytes_left -= std::min<uint64_t>(bytes_left, c.capture->result.snapshot.bytes_read);
    OtherProcess other;
    other.process = std::move(ranked[i]);
    other.capture = std::move(c.capture);
    other.outcome = c.outcome;
    other.reason = std::move(c.reason);
    inc.other_processes.push_back(std::move(other));
  }
}

void capture_victim(Incident& inc, const VictimCandidate& chosen, const CgroupFs& fs, const CaptureOptions& options,
                    const CaptureFn& capture) {
  inc.victim = chosen;
  auto c = capture_candidate(chosen, "victim", inc.container.cgroup_path, fs, options, capture);
  inc.timeline.collection_start = c.start;
  inc.timeline.snapshot_complete = c.end;
  inc.outcome = c.outcome;
  inc.reason = std::move(c.reason);
  inc.capture = std::move(c.capture);
}

}  // namespace oomsnap

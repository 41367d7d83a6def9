#include "agent/incident/last_gasp_attach.h"

#include <algorithm>

namespace oomsnap {

namespace {

// A kill's SIGKILL is delivered as the victim next runs: at once, or after
// the reclaim or fault it was in. The walk begins then.
constexpr MonoNs kBeforeKillNs = 1'000'000'000;   // mark_victim's and the walk's clocks, read on two CPUs
constexpr MonoNs kAfterKillNs = 30'000'000'000;

bool complete(const std::optional<CaptureRecord>& c) {
  return c && c->result.snapshot.status == SnapshotStatus::kComplete;
}

VictimCandidate process_of(const CaptureRecord& r) {
  VictimCandidate v;
  v.pid = r.identity.pid;
  v.start_time_ticks = r.identity.start_time_ticks;
  v.comm = r.identity.comm;
  v.memory = r.process_memory;
  return v;
}

}  // namespace

bool last_gasp_of_kill(const Incident& inc, const LastGaspDecoded& d) {
  if (!inc.oom_kill || !inc.oom_kill->killed_pid(d.pid)) return false;
  const MonoNs kill = inc.oom_kill->kernel_ns;
  return d.walk_start_ns + kBeforeKillNs >= kill && d.walk_start_ns <= kill + kAfterKillNs;
}

std::string attach_last_gasp(Incident& inc, LastGaspDecoded d, size_t max_others) {
  // /proc was gone before the decode: the memory the kernel saw at the kill.
  if (!d.record.process_memory.rss_bytes) {
    for (const KilledProcess& k : inc.oom_kill->killed)
      if (k.pid == d.pid) d.record.process_memory.rss_bytes = k.rss_bytes;
    d.record.process_memory.status =
        "rss only: as the kernel saw it at the kill (the process was gone before /proc could be read)";
  }
  const SnapshotStatus status = d.record.result.snapshot.status;
  const std::string what = std::string("last gasp of ") + std::to_string(d.pid) + " (" + to_string(status) + ")";
  if (d.pid == inc.oom_kill->pid && (!inc.victim || inc.victim->pid == d.pid)) {
    if (complete(inc.capture)) return what + " not used: the snapshot from before the kill is complete";
    const std::string before =
        !inc.victim ? (inc.reason.empty() ? "" : "; no snapshot before the kill: " + inc.reason)
                    : "; the snapshot before the kill was " +
                          std::string(inc.capture ? to_string(inc.capture->result.snapshot.status) : "not taken") +
                          (inc.reason.empty() ? "" : ": " + inc.reason);
    if (!inc.victim) inc.victim = process_of(d.record);  // else the pre-kill view (score, memory) stays
    inc.capture = std::move(d.record);
    inc.outcome = CollectionOutcome::kCollected;
    inc.reason = "snapshot read by the last gasp, in the victim at its kill" + before;
    inc.timeline.collection_start = d.walk_start_ns;
    inc.timeline.snapshot_complete = d.walk_end_ns;
    inc.oom_kill->matches_victim = true;
    return what + " is the record's snapshot";
  }
  auto other = std::find_if(inc.other_processes.begin(), inc.other_processes.end(),
                            [&](const OtherProcess& o) { return o.process.pid == d.pid; });
  if (other != inc.other_processes.end() && complete(other->capture))
    return what + " not used: the snapshot of it from before the kill is complete";
  if (other == inc.other_processes.end()) {
    if (inc.other_processes.size() >= max_others)
      return what + " not used: other_processes holds " + std::to_string(max_others) + " already";
    other = inc.other_processes.insert(inc.other_processes.end(), OtherProcess{});
  }
  other->process = process_of(d.record);
  other->capture = std::move(d.record);
  other->outcome = CollectionOutcome::kCollected;
  other->reason = "snapshot read by the last gasp, in the process at its kill";
  return what + " is in other_processes";
}

}  // namespace oomsnap

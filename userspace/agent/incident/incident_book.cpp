#include "agent/incident/incident_book.h"

#include <algorithm>

#include "agent/incident/collect.h"

namespace oomsnap {
namespace {

MonoNs distance(MonoNs a, MonoNs b) { return a > b ? a - b : b - a; }

}  // namespace

Incident& IncidentBook::open_collection(Incident inc, MonoNs window_end) {
  const uint64_t id = inc.id;
  Open& o = open_[id];
  o.inc = std::move(inc);
  o.collecting = true;
  o.window_end = window_end;
  return o.inc;
}

Incident& IncidentBook::open_kernel(Incident inc, MonoNs due) {
  const uint64_t id = inc.id;
  Open& o = open_[id];
  o.inc = std::move(inc);
  o.due = due;
  return o.inc;
}

bool IncidentBook::merge_trigger(const std::string& memcg, const SeenTrigger& seen) {
  bool merged = false;
  for (auto& [id, o] : open_) {
    Incident& inc = o.inc;
    // Kernel records (a kill without a snapshot, an exit) are not episodes.
    if (inc.container.cgroup_path != memcg || inc.trigger.type == "oom_kill" || inc.trigger.type == "process_exit")
      continue;
    merged = true;
    ++inc.merged_triggers;
    note_seen_trigger(inc.triggers_seen, seen);
  }
  return merged;
}

bool IncidentBook::collected(Incident done, MonoNs now) {
  auto it = open_.find(done.id);
  if (it == open_.end()) return false;
  Open& o = it->second;
  // The worker had a copy: what the loop added since is the book's.
  done.merged_triggers = o.inc.merged_triggers;
  done.triggers_seen = std::move(o.inc.triggers_seen);
  if (o.inc.oom_kill) {
    done.oom_kill = std::move(o.inc.oom_kill);
    done.timeline.oom_kill = o.inc.timeline.oom_kill;
  }
  if (o.inc.exit) {
    done.exit = o.inc.exit;
    done.timeline.exit = o.inc.timeline.exit;
  }
  if (done.oom_kill) done.oom_kill->matches_victim = done.victim && done.oom_kill->killed_pid(done.victim->pid);
  o.inc = std::move(done);
  o.collecting = false;
  if (o.inc.exit)
    o.due = now;
  else if (o.inc.oom_kill)
    o.due = now + kExitWaitNs;
  else
    o.due = std::max(now, o.window_end);
  return true;
}

IncidentBook::KillMatch IncidentBook::oom_kill(const OomKillInfo& k, MonoNs now) {
  KillMatch m;
  const bool killed_before = oom_killed_recently(k.pid, k.kernel_ns);
  note_oom_killed(k.pid, k.kernel_ns);
  // A further mark of an OOM event already recorded (a group kill's members,
  // the chosen victim marked again): the same event, the same record.
  for (auto& [id, o] : open_) {
    Incident& inc = o.inc;
    if (!inc.oom_kill || inc.oom_kill->invoker != k.invoker || !memcg_within(k.memcg, inc.container.cgroup_path))
      continue;
    if (distance(k.kernel_ns, inc.oom_kill->kernel_ns) > kOomEventWindowNs) continue;
    m.kind = KillMatch::kSameEvent;
    m.id = id;
    m.added = inc.oom_kill->add_killed({k.pid, k.comm, k.rss_bytes, k.pid_source});
    if (m.added && !o.collecting && inc.victim && inc.victim->pid == k.pid) inc.oom_kill->matches_victim = true;
    return m;
  }
  if (killed_before) {
    m.kind = KillMatch::kMarkedAgain;
    return m;
  }
  // An open incident of a container that holds the killed process: the
  // latest one whose snapshot is of the killed process, else the latest one
  // (a container collected twice before its kill keeps the kill with the
  // snapshot of its victim, not with a later collection that found it dying).
  Open* match = nullptr;
  bool match_has_victim = false;
  for (auto& [id, o] : open_) {
    if (o.inc.oom_kill || k.kernel_ns > o.window_end) continue;
    if (!memcg_within(k.memcg, o.inc.container.cgroup_path)) continue;
    const bool has_victim = !o.collecting && o.inc.capture && o.inc.victim && o.inc.victim->pid == k.pid;
    const bool later = match && o.inc.timeline.decided > match->inc.timeline.decided;
    if (!match || (has_victim && !match_has_victim) || (has_victim == match_has_victim && later)) {
      match = &o;
      match_has_victim = has_victim;
    }
  }
  if (!match) return m;
  Incident& inc = match->inc;
  inc.oom_kill = k;
  inc.timeline.oom_kill = k.kernel_ns;
  m.kind = KillMatch::kAttached;
  m.id = inc.id;
  m.collecting = match->collecting;
  if (!match->collecting) {
    inc.oom_kill->matches_victim = inc.victim && inc.oom_kill->killed_pid(inc.victim->pid);
    match->due = now + kExitWaitNs;
  }
  return m;
}

IncidentBook::ExitMatch IncidentBook::exit(const ExitInfo& x, MonoNs now) {
  ExitMatch m;
  for (auto& [id, o] : open_) {
    Incident& inc = o.inc;
    if (inc.exit) continue;
    const bool killed = inc.oom_kill && inc.oom_kill->pid == x.pid;
    const bool victim = inc.victim && inc.victim->pid == x.pid;
    if (!killed && !victim) continue;
    inc.exit = x;
    inc.timeline.exit = x.kernel_ns;
    m.id = id;
    m.collecting = o.collecting;
    if (o.collecting) return m;  // due when collected
    // The rest of a group kill is marked right after the first mark, while
    // the victim may already be exiting on another CPU: the record waits out
    // a short part of the event's window (the marks come in one call).
    const bool in_event = inc.oom_kill && x.kernel_ns < inc.oom_kill->kernel_ns + kOomEventWindowNs;
    o.due = in_event ? now + kGroupKillTailNs : now;
    return m;
  }
  return m;
}

void IncidentBook::note_oom_killed(pid_t pid, MonoNs at) {
  // Bounded: entries older than the window go first; past the cap, the oldest.
  for (auto it = oom_killed_.begin(); it != oom_killed_.end();)
    it = at > it->second + kOomKilledKeepNs ? oom_killed_.erase(it) : std::next(it);
  if (oom_killed_.size() >= kMaxOomKilled && !oom_killed_.count(pid)) {
    auto oldest = std::min_element(oom_killed_.begin(), oom_killed_.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
    oom_killed_.erase(oldest);
  }
  oom_killed_[pid] = at;
}

bool IncidentBook::oom_killed_recently(pid_t pid, MonoNs exit_at) const {
  auto it = oom_killed_.find(pid);
  return it != oom_killed_.end() && exit_at >= it->second && exit_at - it->second <= kOomKilledKeepNs;
}

std::vector<uint64_t> IncidentBook::due(MonoNs now) const {
  std::vector<uint64_t> ids;
  for (const auto& [id, o] : open_)
    if (!o.collecting && o.due <= now) ids.push_back(id);
  return ids;
}

std::optional<MonoNs> IncidentBook::next_due() const {
  std::optional<MonoNs> next;
  for (const auto& [id, o] : open_)
    if (!o.collecting && (!next || o.due < *next)) next = o.due;
  return next;
}

std::optional<Incident> IncidentBook::take(uint64_t id) {
  auto it = open_.find(id);
  if (it == open_.end()) return std::nullopt;
  Incident inc = std::move(it->second.inc);
  open_.erase(it);
  return inc;
}

std::vector<uint64_t> IncidentBook::close_all(MonoNs now, const std::string& reason) {
  std::vector<uint64_t> ids;
  for (auto& [id, o] : open_) {
    if (o.collecting) {
      o.inc.reason = reason;
      o.collecting = false;
    }
    o.due = now;
    ids.push_back(id);
  }
  return ids;
}

Incident* IncidentBook::find(uint64_t id) {
  auto it = open_.find(id);
  return it == open_.end() ? nullptr : &it->second.inc;
}

bool IncidentBook::group_kill_counter_rose(const std::map<std::string, uint64_t>& before,
                                           const std::map<std::string, uint64_t>& now) {
  auto b = before.find("oom_group_kill"), a = now.find("oom_group_kill");
  return b != before.end() && a != now.end() && a->second > b->second;
}

}  // namespace oomsnap

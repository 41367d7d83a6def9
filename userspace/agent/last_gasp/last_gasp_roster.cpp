#include "agent/last_gasp/last_gasp_roster.h"

#include <algorithm>
#include <set>

namespace oomsnap {

size_t LastGaspRoster::count(State s) const {
  return static_cast<size_t>(
      std::count_if(known_.begin(), known_.end(), [s](const auto& kv) { return kv.second.state == s; }));
}

LastGaspRoster::Changes LastGaspRoster::scan(const std::vector<RosterProcess>& live, bool complete) {
  Changes c;
  std::map<pid_t, const RosterProcess*> now;
  for (const RosterProcess& p : live) now.emplace(p.pid, &p);
  // Gone, or another process under the same pid: forgotten (disarmed if armed).
  for (auto it = known_.begin(); it != known_.end();) {
    auto seen = now.find(it->first);
    const bool gone = seen == now.end() ? complete : !(*seen->second == it->second.process);
    if (!gone) {
      ++it;
      continue;
    }
    if (it->second.state == State::kArmed) c.to_disarm.push_back(it->first);
    it = known_.erase(it);
  }
  size_t planning = count(State::kPlanning);
  for (const auto& [pid, p] : now) {
    if (known_.count(pid)) continue;
    if (planning >= limits_.max_planning || known_.size() >= limits_.max_known) {
      ++c.deferred;
      continue;
    }
    known_.emplace(pid, Entry{*p, State::kPlanning});
    c.to_plan.push_back(*p);
    ++planning;
  }
  return c;
}

bool LastGaspRoster::planned(const RosterProcess& p, bool go) {
  auto it = known_.find(p.pid);
  if (it == known_.end() || !(it->second.process == p) || it->second.state != State::kPlanning) return false;
  const bool arm = go && armed() < limits_.max_armed;
  it->second.state = arm ? State::kArmed : State::kNotArmed;
  return arm;
}

}  // namespace oomsnap

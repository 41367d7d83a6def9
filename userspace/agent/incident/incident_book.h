// The agent's open incidents, and the rules that say which one a kernel event
// belongs to: an OOM kill to the container's collection whose snapshot is of
// the killed process (else its latest), a further mark of the same OOM event
// (a group kill) to the record that has the event, an exit to the incident of
// its victim or killed process, a trigger to its container's open episode.
// Pure: events and the time go in, what is due comes out; the agent keeps the
// loop, the one timer (next_due), the reads of /proc and cgroups, the
// logging and the sinks.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/incident/incident.h"

namespace oomsnap {

class IncidentBook {
 public:
  // How long a record waits for the exit of a process the kernel chose.
  static constexpr MonoNs kExitWaitNs = 1'000'000'000;
  // After an exit inside an OOM event's window, the rest of a group kill's
  // marks may still come (the victim exits on another CPU while the killer
  // marks the others): the record waits this long.
  static constexpr MonoNs kGroupKillTailNs = 200'000'000;
  // Processes killed in an OOM event are remembered this long (at most
  // kMaxOomKilled): their exits belong to that event's record.
  static constexpr MonoNs kOomKilledKeepNs = 30'000'000'000;
  static constexpr size_t kMaxOomKilled = 4096;

  // A collection decided for a container: open (collecting) until the
  // worker's result, then until window_end for the kill.
  Incident& open_collection(Incident inc, MonoNs window_end);
  // A kernel event that is its own record (an OOM kill without a snapshot,
  // an exit by signal), due at `due`.
  Incident& open_kernel(Incident inc, MonoNs due);

  // A trigger for `memcg` while one of its collections is open belongs to
  // that incident's timeline (counted, and listed up to kMaxSeenTriggers):
  // true. False when no collection of that container is open.
  bool merge_trigger(const std::string& memcg, const SeenTrigger& seen);

  // The worker's result for an open collection. What arrived while it ran
  // (the kill, the exit, the triggers merged) stays. It is then due at once
  // with its exit, kExitWaitNs after its kill, else at its window's end.
  // False when the incident is no longer open.
  bool collected(Incident done, MonoNs now);

  // An OOM kill's first mark, k.memcg the killed process's memory cgroup.
  struct KillMatch {
    enum Kind {
      kSameEvent,  // a further mark of an event an open incident has (its `killed` list)
      kAttached,   // the first mark, attached to an open collection of its container
      kNone,       // no open incident takes it: the agent opens one of its own
      // A process killed in an OOM event within kOomKilledKeepNs, marked
      // again after its event's record was written: the kernel marks a
      // victim still exiting (its memory not yet freed) instead of killing
      // another when the memcg is still over its limit. Not a new kill.
      kMarkedAgain,
    } kind = kNone;
    uint64_t id = 0;
    bool added = false;       // kSameEvent: the process was not yet in `killed`
    bool collecting = false;  // kAttached: the collection is still running
  };
  KillMatch oom_kill(const OomKillInfo& k, MonoNs now);

  // An exit of an open incident's victim or killed process.
  struct ExitMatch {
    uint64_t id = 0;  // 0: none (then perhaps an exit record of its own)
    bool collecting = false;
  };
  ExitMatch exit(const ExitInfo& x, MonoNs now);

  // Whether `pid` was killed in an OOM event at most kOomKilledKeepNs
  // before `exit_at` (its exit is part of that event's record).
  bool oom_killed_recently(pid_t pid, MonoNs exit_at) const;

  // Incidents due at `now` (not collecting, due time reached), in id order.
  std::vector<uint64_t> due(MonoNs now) const;
  // The earliest due time of any incident not collecting; nullopt: none.
  std::optional<MonoNs> next_due() const;
  // Removes an incident for its record; nullopt when it is not open.
  std::optional<Incident> take(uint64_t id);
  // Every open incident, due now (the agent is stopping): a collection not
  // yet run gets `reason`.
  std::vector<uint64_t> close_all(MonoNs now, const std::string& reason);

  Incident* find(uint64_t id);
  size_t size() const { return open_.size(); }

  // The group-kill re-check at the record: the memcg's oom_group_kill
  // counter (v2) rose between the decision and now.
  static bool group_kill_counter_rose(const std::map<std::string, uint64_t>& before,
                                      const std::map<std::string, uint64_t>& now);

 private:
  struct Open {
    Incident inc;
    bool collecting = false;
    MonoNs window_end = 0;  // an OOM kill in the container until then belongs to it
    MonoNs due = 0;         // when its record is written (not while collecting)
  };
  void note_oom_killed(pid_t pid, MonoNs at);

  std::map<uint64_t, Open> open_;
  std::map<pid_t, MonoNs> oom_killed_;
};

}  // namespace oomsnap

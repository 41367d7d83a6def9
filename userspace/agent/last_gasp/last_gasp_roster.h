// Which processes of the watched containers the last gasp is armed for, and
// which are still to be looked at. Pure: the agent lists the processes
// (LastGaspWatch, off the loop), a capture process plans each new one (is it
// a Go program, where are its heap profile's globals), the source arms it.
//
// A process is looked at once, however its plan ends: a program that is not
// Go is not planned again at every scan. It is known by its pid, its start
// time and its comm, so a reused pid and an exec (a shell entrypoint that
// execs the server keeps its pid and start time, not its comm) are new
// processes. Bounded: at most max_known processes are remembered and at
// most max_planning plans are in flight (the new processes past either wait
// for a later scan); at most max_armed are armed (the BPF map holds 8192; a
// Go program planned past it is not armed).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace oomsnap {

struct RosterProcess {
  pid_t pid = 0;
  uint64_t start_time_ticks = 0;
  std::string comm;
  bool operator==(const RosterProcess&) const = default;
};

struct RosterLimits {
  size_t max_known = 16384;
  size_t max_armed = 4096;
  size_t max_planning = 16;
};

class LastGaspRoster {
 public:
  explicit LastGaspRoster(RosterLimits limits = {}) : limits_(limits) {}

  struct Changes {
    std::vector<RosterProcess> to_plan;  // new: plan them, then report with planned()
    std::vector<pid_t> to_disarm;        // armed processes gone (or their pid reused, or exec'd)
    size_t deferred = 0;                 // new ones left for a later scan (a limit)
  };
  // One scan's processes. `complete`: the list holds every process of the
  // watched containers, so one missing from it is gone; a list cut short
  // (a scan limit) forgets nothing.
  Changes scan(const std::vector<RosterProcess>& live, bool complete);
  // A plan's end: true when the process is to be armed now (it was a Go
  // program, it is still the one planned, and there is room).
  bool planned(const RosterProcess& p, bool go);
  size_t armed() const { return count(State::kArmed); }
  size_t planning() const { return count(State::kPlanning); }
  size_t known() const { return known_.size(); }

 private:
  enum class State { kPlanning, kArmed, kNotArmed };
  struct Entry {
    RosterProcess process;
    State state = State::kPlanning;
  };
  size_t count(State s) const;

  RosterLimits limits_;
  std::map<pid_t, Entry> known_;
};

}  // namespace oomsnap

// The per-container bound on records of kernel events a container can cause
// at will (issue #12: exits by a signal; issue #28: OOM kills): a container
// that kills its own processes, or forks allocators into its own tiny limit,
// in a loop must not fill the record store, push other tenants' records out
// of its rotation, or fill the sink queue. The agent keeps one limiter per
// kind of record.
//
// At most `limit` records per container per window (60 s: "per minute").
// Windows are fixed, starting at a container's first event after the
// previous window ended, so a container's first event always gets its record.
// Nothing is lost silently: the events not recorded (by this limit, or by a
// kernel-side one: the event's `suppressed`) are carried into the container's
// next record, with the kernel time of the first one held back (the span).
// A window that ended with events still unreported gives one more record —
// its last held-back event, carrying the rest — when take_due() is called
// (the agent does so on its rescan timer; at shutdown it logs what is owed
// instead). That record opens the next window, so no window ever holds more
// than `limit` records.
//
// Memory: one entry per container with events in its current window; an
// entry goes when its window ends with nothing owed (take_due) or the
// container goes (forget). Not thread-safe: the agent's event loop owns it.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroup/cgroup.h"
#include "agent/incident/policy.h"
#include "oomsnap_events.h"

namespace oomsnap {

// An event the limiter held back, to be written later.
struct HeldEvent {
  oomsnap_event event{};
  std::string memcg;  // the process's memcg
  // The container the record is of (its limited ancestor, or memcg itself),
  // found when the event came: a record owed when the container goes is
  // written after the agent has forgotten it.
  std::string container;
  // The record's container as the agent's last rescan saw it: a record owed
  // when the container goes is written after its files are gone.
  MemcgStats last_seen;
};

// Events of a container not in any record since its previous record.
struct SuppressedEvents {
  uint64_t total = 0;      // all of them
  uint64_t in_kernel = 0;  // of which the BPF rate limit never sent
  // The kernel time (event.ktime_ns) of the first one this limiter held
  // back; 0 when it held none back (in_kernel ones carry no time).
  MonoNs first_ns = 0;
};

class ContainerRecordLimiter {
 public:
  explicit ContainerRecordLimiter(std::chrono::nanoseconds window = std::chrono::seconds(60))
      : window_ns_(window.count()) {}

  struct Verdict {
    bool write = false;           // write this event's record now
    SuppressedEvents suppressed;  // when writing: what the record carries
  };
  // An event of `container` at `now` (the event's `suppressed` = events the
  // kernel did not send before it). At most `limit` (>= 1) writes per window.
  Verdict admit(const std::string& container, const HeldEvent& event, MonoNs now, uint64_t limit);
  // Events of `container` that will have no record of their own and are not
  // suppressed by this limiter (e.g. a kernel-suppressed count that came with
  // an exit folded into an incident): carried into the next record.
  void add_suppressed(const std::string& container, uint64_t in_kernel);

  struct Due {
    std::string container;
    HeldEvent event;              // the last event held back
    SuppressedEvents suppressed;  // the others not recorded, for its record
  };
  // Containers whose window has ended (every container with `all`, e.g. at
  // shutdown) and owe a record: the record to write. Entries with nothing
  // owed and an ended window are removed.
  std::vector<Due> take_due(MonoNs now, bool all = false);
  // The container is gone: what it still owes, if anything; its entry goes.
  std::optional<Due> forget(const std::string& container);

  size_t containers() const { return state_.size(); }

 private:
  struct State {
    MonoNs window_start = 0;
    uint64_t written = 0;           // records in the current window
    SuppressedEvents pending;       // not recorded since the last record
    std::optional<HeldEvent> held;  // the last event held back (counted in pending.total)
  };
  bool window_ended(const State& s, MonoNs now) const { return now - s.window_start >= window_ns_; }
  static std::optional<Due> owed(const std::string& container, State& s);

  uint64_t window_ns_;
  std::map<std::string, State> state_;
};

}  // namespace oomsnap

// The per-container bound on exit records (issue #12): a container that kills
// its own processes in a loop must not fill the record store and push other
// tenants' OOM records out of its rotation.
//
// BPF already sends at most one exit per memcg per exit_min_interval, each
// with the count it suppressed before it; this bounds what is written: at most
// `limit` exit records per container per window (60 s: "per minute"). Windows
// are fixed, starting at a container's first exit after the previous window
// ended. Nothing is lost silently: the exits not recorded (by the kernel's
// limit or this one) are carried into the container's next exit record, and a
// window that ended with exits still unreported gives one more record — its
// last suppressed exit, carrying the rest — when take_due() is called (the
// agent does so on its rescan timer; at shutdown it logs what is owed
// instead). That record opens the next window, so no window ever holds more
// than `limit` records.
//
// Memory: one entry per container with exits in its current window; an entry
// goes when its window ends with nothing owed (take_due) or the container
// goes (forget). Not thread-safe: the agent's event loop owns it.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/incident/policy.h"
#include "oomsnap_events.h"

namespace oomsnap {

// An exit the limiter held back, to be written later.
struct HeldExit {
  oomsnap_event event{};
  std::string memcg;  // the exiting process's memcg (the record's container)
};

// Exits of a container not in any record since its previous exit record.
struct SuppressedExits {
  uint64_t total = 0;      // all of them
  uint64_t in_kernel = 0;  // of which the BPF rate limit never sent
};

class ExitRecordLimiter {
 public:
  explicit ExitRecordLimiter(std::chrono::nanoseconds window = std::chrono::seconds(60)) : window_ns_(window.count()) {}

  struct Verdict {
    bool write = false;          // write this exit's record now
    SuppressedExits suppressed;  // when writing: what the record carries
  };
  // An exit of `container` at `now` (the event's `suppressed` = exits the
  // kernel did not send before it). At most `limit` (>= 1) writes per window.
  Verdict admit(const std::string& container, const HeldExit& exit, MonoNs now, uint64_t limit);
  // Exits of `container` that will have no record of their own and are not
  // suppressed by this limiter (e.g. a kernel-suppressed count that came with
  // an exit folded into an incident): carried into the next record.
  void add_suppressed(const std::string& container, uint64_t in_kernel);

  struct Due {
    std::string container;
    HeldExit exit;                // the last exit held back
    SuppressedExits suppressed;   // the others not recorded, for its record
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
    SuppressedExits pending;        // not recorded since the last record
    std::optional<HeldExit> held;   // the last exit held back (counted in pending.total)
  };
  bool window_ended(const State& s, MonoNs now) const { return now - s.window_start >= window_ns_; }
  static std::optional<Due> owed(const std::string& container, State& s);

  uint64_t window_ns_;
  std::map<std::string, State> state_;
};

}  // namespace oomsnap

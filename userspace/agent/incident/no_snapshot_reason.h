// Why an OOM kill came without a snapshot of its container, said truthfully
// from what the agent knew at the kill: a pure function, so every branch is
// unit-tested without a kernel.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "agent/incident/incident.h"
#include "agent/incident/policy.h"

namespace oomsnap {

// How the container's last collection ended (kept per container by the agent).
struct LastCollection {
  uint64_t incident = 0;
  MonoNs at = 0;
  CollectionOutcome outcome = CollectionOutcome::kNotAttempted;
  std::string reason;
  bool with_kill = false;  // an OOM kill joined its record (this kill is a later one)
};

struct NoSnapshotFacts {
  MonoNs now = 0;
  std::optional<Deferral> deferred;      // a candidate waiting, and why
  bool in_batch = false;                 // a candidate in the open batch window
  std::optional<MonoNs> interval_until;  // the end of the container's own interval, if within one
  MonoNs budget_free_at = 0;             // when the node budget admits a collection
  unsigned max_per_minute = 0;           // config, for the message
  std::optional<LastCollection> last;    // the container's last collection
  std::optional<OfferResult> last_offer; // what the policy said to its last trigger
  int64_t interval_tracing_s = 0;        // config, for the message
  int64_t oom_kill_window_ms = 0;
  int threshold_percent = 0;
};

std::string no_snapshot_reason(const NoSnapshotFacts& f);

}  // namespace oomsnap

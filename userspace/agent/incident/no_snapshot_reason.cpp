#include "agent/incident/no_snapshot_reason.h"

namespace oomsnap {
namespace {

std::string secs(MonoNs ns) { return std::to_string(ns / 1'000'000'000ull) + " s"; }

}  // namespace

std::string no_snapshot_reason(const NoSnapshotFacts& f) {
  const std::string lead = "no snapshot of this container before the kill: ";
  const bool within = f.interval_until && f.now < *f.interval_until;
  const std::string interval = "IntervalTracing " + std::to_string(f.interval_tracing_s) + " s, per container";
  if (f.deferred == Deferral::kBudget) {
    return lead + "it was a candidate, deferred by the node's capture budget (NodeMaxCapturesPerMinute " +
           std::to_string(f.max_per_minute) + "; " +
           (f.budget_free_at > f.now ? secs(f.budget_free_at - f.now) + " left" : "freeing") + ")";
  }
  if (f.deferred == Deferral::kBelowThreshold)
    return lead + "it was a candidate, but read below ThresholdPercent (" + std::to_string(f.threshold_percent) +
           "%) of the limit when judged; it was being re-read until back above";
  if (f.deferred) {
    return lead + "it was a candidate, deferred within its own interval since its last snapshot (" + interval + "; " +
           (within ? secs(*f.interval_until - f.now) + " left" : "ending") + ")";
  }
  if (f.in_batch) return lead + "it was a candidate, and the kill came within the batch window before the decision";
  if (f.last) {
    const LastCollection& l = *f.last;
    const std::string when = "incident " + std::to_string(l.incident) + ", " + secs(f.now > l.at ? f.now - l.at : 0) + " before";
    const std::string since = within ? "; the container was within its interval since (" + interval + ")" : "";
    if (l.outcome == CollectionOutcome::kCollected && l.with_kill)
      return lead + "its last snapshot (" + when + ") went with an earlier kill, in that incident's record" + since;
    if (l.outcome == CollectionOutcome::kCollected)
      return lead + "its last snapshot (" + when + ") was recorded without a kill (OomKillWindow " +
             std::to_string(f.oom_kill_window_ms / 1000) + " s)" + since;
    return lead + "its last collection (" + when + ") ended " + to_string(l.outcome) +
           (l.reason.empty() ? "" : ": " + l.reason);
  }
  if (f.last_offer == OfferResult::kBelowThreshold)
    return lead + "no candidate: its triggers found usage below ThresholdPercent (" +
           std::to_string(f.threshold_percent) + "%) of the limit";
  return lead + "no candidate: no trigger for this container reached the agent before the kill";
}

}  // namespace oomsnap

// Every reason an OOM kill can come without a snapshot, from the facts the
// agent had at the kill.
#include <gtest/gtest.h>

#include "agent/incident/no_snapshot_reason.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kSec = 1'000'000'000ull;

NoSnapshotFacts base() {
  NoSnapshotFacts f;
  f.now = 1000 * kSec;
  f.interval_tracing_s = 300;
  f.oom_kill_window_ms = 60000;
  f.threshold_percent = 90;
  return f;
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST(NoSnapshotReason, DeferredWithinItsIntervalSaysHowLongIsLeft) {
  auto f = base();
  f.deferred = Deferral::kInterval;
  f.interval_until = f.now + 42 * kSec;
  auto r = no_snapshot_reason(f);
  EXPECT_TRUE(has(r, "deferred within its own interval since its last snapshot (IntervalTracing 300 s, per "
                     "container; 42 s left)"))
      << r;
}

TEST(NoSnapshotReason, DeferredByTheNodeBudget) {
  auto f = base();
  f.deferred = Deferral::kBudget;
  f.max_per_minute = 6;
  f.budget_free_at = f.now + 17 * kSec;
  auto r = no_snapshot_reason(f);
  EXPECT_TRUE(has(r, "deferred by the node's capture budget (NodeMaxCapturesPerMinute 6; 17 s left)")) << r;
}

TEST(NoSnapshotReason, ReadBelowTheThresholdWhenJudged) {
  auto f = base();
  f.deferred = Deferral::kBelowThreshold;
  auto r = no_snapshot_reason(f);
  EXPECT_TRUE(has(r, "read below ThresholdPercent (90%) of the limit when judged; it was being re-read")) << r;
}

TEST(NoSnapshotReason, KillWithinTheBatchWindow) {
  auto f = base();
  f.in_batch = true;
  EXPECT_TRUE(has(no_snapshot_reason(f), "within the batch window"));
}

TEST(NoSnapshotReason, LastCollectionFailedNamesItsReason) {
  auto f = base();
  f.last = LastCollection{7, f.now - 12 * kSec, CollectionOutcome::kFailed, "capture process died: SIGSEGV"};
  auto r = no_snapshot_reason(f);
  EXPECT_TRUE(has(r, "its last collection (incident 7, 12 s before) ended failed: capture process died: SIGSEGV")) << r;
}

TEST(NoSnapshotReason, LastSnapshotRecordedWithoutAKill) {
  auto f = base();
  f.last = LastCollection{3, f.now - 90 * kSec, CollectionOutcome::kCollected, ""};
  auto r = no_snapshot_reason(f);
  EXPECT_TRUE(has(r, "its last snapshot (incident 3, 90 s before) was recorded without a kill (OomKillWindow 60 s)"))
      << r;
  EXPECT_FALSE(has(r, "interval")) << r;
  f.interval_until = f.now + kSec;
  EXPECT_TRUE(has(no_snapshot_reason(f), "within its interval since (IntervalTracing 300 s, per container)"));
}

// Its last snapshot's record carried a kill (this one is a later kill, e.g.
// of the restarted process): that record is where the snapshot is.
TEST(NoSnapshotReason, LastSnapshotWentWithAnEarlierKill) {
  auto f = base();
  f.last = LastCollection{3, f.now - 20 * kSec, CollectionOutcome::kCollected, "", true};
  f.interval_until = f.now + kSec;
  auto r = no_snapshot_reason(f);
  EXPECT_TRUE(has(r, "its last snapshot (incident 3, 20 s before) went with an earlier kill, in that incident's "
                     "record; the container was within its interval since"))
      << r;
  EXPECT_FALSE(has(r, "without a kill")) << r;
}

TEST(NoSnapshotReason, NoCandidate) {
  auto f = base();
  auto r = no_snapshot_reason(f);
  EXPECT_TRUE(has(r, "no candidate: no trigger for this container reached the agent")) << r;
  EXPECT_FALSE(has(r, "interval")) << r;
  f.budget_free_at = f.now + kSec;  // a spent node budget is not the reason when it never was a candidate
  EXPECT_FALSE(has(no_snapshot_reason(f), "budget"));
  f.last_offer = OfferResult::kBelowThreshold;
  EXPECT_TRUE(has(no_snapshot_reason(f), "below ThresholdPercent (90%)"));
}

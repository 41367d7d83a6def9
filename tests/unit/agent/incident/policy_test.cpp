// The collection policy on a fake clock: thresholds, unlimited containers,
// batching by ratio, the per-container interval, the node-wide budget and
// deferral.
#include <gtest/gtest.h>

#include <map>

#include "agent/incident/policy.h"
#include "policy_fakes.h"

using namespace oomsnap;
using namespace oomsnap::policy_fakes;

namespace {

// The container stats a re-read would see now.
struct FakeCgroups {
  std::map<std::string, MemcgStats> now;
  Policy::Reread reread() {
    return [this](const std::string& m) { return now.count(m) ? now[m] : MemcgStats{}; };
  }
};

}  // namespace

TEST(Policy, UnlimitedAndBelowThresholdAreNeverCandidates) {
  Policy p(opts());
  EXPECT_EQ(p.offer("/free", trig("memcg_pressure", 1), stats(100 << 20, std::nullopt), 1), OfferResult::kUnlimited);
  EXPECT_EQ(p.offer("/low", trig("threshold", 1), stats(89, 100), 1), OfferResult::kBelowThreshold);
  EXPECT_FALSE(p.next_deadline());
  EXPECT_EQ(p.offer("/at", trig("threshold", 1), stats(90, 100), 1), OfferResult::kOpenedBatch);
  EXPECT_TRUE(p.next_deadline());
}

// A batch is decided on re-read figures, closest to its limit first; within
// the node budget every candidate of the batch is collected.
TEST(Policy, BatchCollectsClosestToTheLimitFirst) {
  Policy p(opts());
  FakeCgroups cg;
  EXPECT_EQ(p.offer("/a", trig("threshold", 0), stats(92, 100), 0), OfferResult::kOpenedBatch);
  EXPECT_EQ(p.offer("/b", trig("memcg_pressure", 50 * kMs), stats(91, 100), 50 * kMs), OfferResult::kJoinedBatch);
  EXPECT_EQ(p.offer("/a", trig("memcg_pressure", 60 * kMs), stats(93, 100), 60 * kMs), OfferResult::kJoinedBatch);
  ASSERT_EQ(*p.next_deadline(), 200 * kMs);
  // Before the deadline nothing happens.
  EXPECT_TRUE(p.on_deadline(100 * kMs, cg.reread()).collect.empty());
  // At the deadline the re-read figures decide: b has overtaken a.
  cg.now["/a"] = stats(93, 100);
  cg.now["/b"] = stats(98, 100);
  Decision d = p.on_deadline(200 * kMs, cg.reread());
  EXPECT_EQ(names(d), (std::vector<std::string>{"/b", "/a"}));
  EXPECT_DOUBLE_EQ(d.collect[0].ratio, 0.98);
  EXPECT_EQ(d.collect[0].trigger.type, "memcg_pressure");
  EXPECT_TRUE(d.dropped.empty());
  EXPECT_EQ(p.deferred_count(), 0u);
  EXPECT_FALSE(p.next_deadline());
}

TEST(Policy, MergedTriggersKeepTheFirst) {
  Policy p(opts());
  FakeCgroups cg;
  cg.now["/a"] = stats(95, 100);
  p.offer("/a", trig("threshold", 5), stats(95, 100), 5);
  p.offer("/a", trig("memcg_pressure", 7), stats(95, 100), 7);
  p.offer("/a", trig("psi", 9), stats(95, 100), 9);
  Decision d = p.on_deadline(kSec, cg.reread());
  ASSERT_EQ(d.collect.size(), 1u);
  EXPECT_EQ(d.collect[0].trigger.type, "threshold");
  EXPECT_EQ(d.collect[0].merged, 2u);
  ASSERT_EQ(d.collect[0].seen.size(), 3u);  // the timeline keeps all of them, in order
  EXPECT_EQ(d.collect[0].seen[1].type, "memcg_pressure");
  EXPECT_EQ(d.collect[0].seen[2].kernel_ns, 9u);
}

TEST(Policy, RecheckDropsContainersThatRecoveredOrLostTheirLimit) {
  Policy p(opts());
  FakeCgroups cg;
  p.offer("/a", trig("threshold", 0), stats(95, 100), 0);
  p.offer("/b", trig("threshold", 0), stats(95, 100), 0);
  cg.now["/a"] = stats(50, 100);
  cg.now["/b"] = stats(95, std::nullopt);
  Decision d = p.on_deadline(kSec, cg.reread());
  EXPECT_TRUE(d.collect.empty());
  ASSERT_EQ(d.dropped.size(), 2u);
  EXPECT_NE(d.dropped[0].second.find("below the 90% threshold"), std::string::npos);
  EXPECT_NE(d.dropped[1].second.find("no finite limit"), std::string::npos);
  EXPECT_EQ(p.budget_free_at(kSec), kSec);  // nothing collected, nothing spent
  EXPECT_FALSE(p.interval_until("/a", kSec));
}

// A container that reads below the threshold when its batch is judged (a Go
// runtime returning pages just then) is re-read every 100 ms, silently, and
// collected as soon as it is back above: the trigger that found it above may
// not come again. The guest's group-kill phase lost its snapshot this way: a
// poll found 90%, the re-check 89.1%, and nothing asked again until reclaim
// at the limit, 250 ms before the kill. One that stays below is let go after
// 10 s, with its reason.
TEST(Policy, ACandidateReadBelowAtItsRecheckIsReReadUntilBackAbove) {
  Policy p(opts());
  FakeCgroups cg;
  p.offer("/a", trig("threshold", 0), stats(90, 100), 0);
  p.offer("/b", trig("threshold", 0), stats(90, 100), 0);
  cg.now["/a"] = stats(89, 100);
  cg.now["/b"] = stats(89, 100);
  Decision d = p.on_deadline(200 * kMs, cg.reread());
  EXPECT_TRUE(d.collect.empty());
  ASSERT_EQ(d.dropped.size(), 2u);
  EXPECT_NE(d.dropped[0].second.find("below the 90% threshold; re-read every 100 ms for 10 s"), std::string::npos)
      << d.dropped[0].second;
  EXPECT_EQ(p.deferral("/a"), Deferral::kBelowThreshold);
  EXPECT_FALSE(p.deferred_by_budget("/a"));
  ASSERT_TRUE(p.next_deadline());
  EXPECT_EQ(*p.next_deadline(), 300 * kMs);
  // Still below: re-read again, nothing said.
  d = p.on_deadline(300 * kMs, cg.reread());
  EXPECT_TRUE(d.collect.empty());
  EXPECT_TRUE(d.dropped.empty());
  // A trigger meanwhile joins the waiting candidate.
  EXPECT_EQ(p.offer("/a", trig("memcg_pressure", 350 * kMs), stats(91, 100), 350 * kMs), OfferResult::kDeferred);
  // Back above: collected at the next re-read, as the first trigger's incident.
  cg.now["/a"] = stats(91, 100);
  d = p.on_deadline(400 * kMs, cg.reread());
  ASSERT_EQ(names(d), std::vector<std::string>{"/a"});
  EXPECT_EQ(d.collect[0].trigger.type, "threshold");
  EXPECT_EQ(d.collect[0].merged, 1u);
  EXPECT_FALSE(p.is_deferred("/a"));
  // /b stays below: re-read until its 10 s are over, then let go.
  MonoNs t = 400 * kMs;
  for (; p.is_deferred("/b") && t < 20 * kSec; t = *p.next_deadline()) {
    d = p.on_deadline(*p.next_deadline(), cg.reread());
    EXPECT_TRUE(d.collect.empty());
    if (!d.dropped.empty()) {
      EXPECT_NE(d.dropped[0].second.find("still below the 90% threshold after 10 s of re-reads"), std::string::npos)
          << d.dropped[0].second;
    }
    if (!p.next_deadline()) break;
  }
  EXPECT_FALSE(p.is_deferred("/b"));
  EXPECT_FALSE(p.next_deadline());
  EXPECT_GE(t, 10 * kSec);
  EXPECT_LT(t, 10 * kSec + 400 * kMs);
}

// The interval is per container: a collected container's triggers wait for
// its own interval to end, while another container is collected at once.
// (Before: a node-wide cooldown of 300 s left every other container without
// a snapshot after one incident.)
TEST(Policy, IntervalIsPerContainer) {
  Policy p(opts(90, std::chrono::seconds(10)));
  FakeCgroups cg;
  cg.now["/a"] = stats(92, 100);
  cg.now["/b"] = stats(97, 100);
  p.offer("/b", trig("threshold", 0), cg.now["/b"], 0);
  EXPECT_EQ(names(p.on_deadline(200 * kMs, cg.reread())), std::vector<std::string>{"/b"});
  ASSERT_TRUE(p.interval_until("/b", 5 * kSec));
  EXPECT_EQ(*p.interval_until("/b", 5 * kSec), 200 * kMs + 10 * kSec);
  // /b within its interval: deferred, never collected early.
  EXPECT_EQ(p.offer("/b", trig("memcg_pressure", 3 * kSec), cg.now["/b"], 3 * kSec), OfferResult::kDeferred);
  EXPECT_TRUE(p.is_deferred("/b"));
  EXPECT_FALSE(p.deferred_by_budget("/b"));
  // /a, 5 s later: collected right away.
  EXPECT_EQ(p.offer("/a", trig("threshold", 5 * kSec), cg.now["/a"], 5 * kSec), OfferResult::kOpenedBatch);
  EXPECT_EQ(names(p.on_deadline(5 * kSec + 200 * kMs, cg.reread())), std::vector<std::string>{"/a"});
  // /b is re-checked when its interval ends, and collected again.
  ASSERT_EQ(*p.next_deadline(), 200 * kMs + 10 * kSec);
  EXPECT_TRUE(p.on_deadline(9 * kSec, cg.reread()).collect.empty());
  Decision again = p.on_deadline(200 * kMs + 10 * kSec, cg.reread());
  ASSERT_EQ(names(again), std::vector<std::string>{"/b"});
  EXPECT_EQ(again.collect[0].trigger.type, "memcg_pressure");
  EXPECT_EQ(p.deferred_count(), 0u);
}

// The node budget: 10 containers crossing at once with 3 captures a minute:
// the 3 closest to their limits now, the others deferred in ratio order and
// re-checked when the budget frees (60 s after the first capture).
TEST(Policy, NodeBudgetTakesTheClosestFirstAndDefersTheRest) {
  Policy p(opts(90, std::chrono::seconds(300), std::chrono::milliseconds(200), 3));
  FakeCgroups cg;
  for (int i = 0; i < 10; ++i) {
    const std::string m = "/c" + std::to_string(i);
    cg.now[m] = stats(90 + static_cast<uint64_t>(i), 100);  // /c9 closest to its limit
    p.offer(m, trig("threshold", static_cast<MonoNs>(i) * kMs), cg.now[m], static_cast<MonoNs>(i) * kMs);
  }
  Decision d = p.on_deadline(kSec, cg.reread());
  EXPECT_EQ(names(d), (std::vector<std::string>{"/c9", "/c8", "/c7"}));
  EXPECT_EQ(d.dropped.size(), 7u);
  EXPECT_NE(d.dropped[0].second.find("NodeMaxCapturesPerMinute 3"), std::string::npos) << d.dropped[0].second;
  EXPECT_EQ(p.deferred_count(), 7u);
  EXPECT_TRUE(p.deferred_by_budget("/c0"));
  EXPECT_EQ(p.budget_free_at(2 * kSec), 61 * kSec);
  // A new trigger of a deferred container waits with it (no new batch).
  EXPECT_EQ(p.offer("/c6", trig("psi", 2 * kSec), cg.now["/c6"], 2 * kSec), OfferResult::kDeferred);
  ASSERT_EQ(*p.next_deadline(), 61 * kSec);
  EXPECT_TRUE(p.on_deadline(30 * kSec, cg.reread()).collect.empty());
  // A minute on: the next three by ratio; /c3 has since recovered.
  cg.now["/c3"] = stats(40, 100);
  Decision next = p.on_deadline(61 * kSec, cg.reread());
  EXPECT_EQ(names(next), (std::vector<std::string>{"/c6", "/c5", "/c4"}));
  EXPECT_EQ(next.collect[0].seen.size(), 2u);  // its deferred trigger is on its timeline
  EXPECT_EQ(p.deferred_count(), 4u);           // /c2, /c1, /c0 wait; /c3 is re-read below the threshold
  EXPECT_TRUE(p.deferred_by_budget("/c2"));
  EXPECT_EQ(p.deferral("/c3"), Deferral::kBelowThreshold);
}

// IntervalTracing = 0: a container may be collected again at once, still
// within the node budget.
TEST(Policy, ZeroIntervalIsBoundedByTheBudget) {
  Policy p(opts(90, std::chrono::seconds(0), std::chrono::milliseconds(200), 2));
  FakeCgroups cg;
  cg.now["/a"] = stats(92, 100);
  for (int round = 0; round < 3; ++round) {
    const MonoNs t = static_cast<MonoNs>(round) * kSec;
    p.offer("/a", trig("threshold", t), cg.now["/a"], t);
    Decision d = p.on_deadline(t + 200 * kMs, cg.reread());
    EXPECT_EQ(d.collect.size(), round < 2 ? 1u : 0u) << round;
  }
  EXPECT_TRUE(p.deferred_by_budget("/a"));
  EXPECT_EQ(*p.next_deadline(), 60 * kSec + 200 * kMs);
}

TEST(Policy, ForgetRemovesPendingCandidates) {
  Policy p(opts());
  p.offer("/gone", trig("threshold", 0), stats(99, 100), 0);
  p.forget("/gone");
  EXPECT_FALSE(p.next_deadline());
}

// A forecast trigger (the limit nearer than a capture's time at the current
// rate) makes a candidate below the threshold, down to the forecast's floor;
// any other trigger there still does not. The decision names the rule.
TEST(Policy, AForecastMakesACandidateBelowTheThresholdDownToItsFloor) {
  PolicyOptions o = opts();
  o.forecast_floor_percent = 50;
  Policy p(o);
  FakeCgroups cg;
  EXPECT_EQ(p.offer("/low", trig("forecast", 0), stats(49, 100), 0), OfferResult::kBelowThreshold);
  EXPECT_EQ(p.offer("/a", trig("memcg_pressure", 0), stats(70, 100), 0), OfferResult::kBelowThreshold);
  EXPECT_EQ(p.offer("/a", trig("forecast", 0), stats(70, 100), 0), OfferResult::kOpenedBatch);
  EXPECT_EQ(p.offer("/b", trig("threshold", 0), stats(95, 100), 0), OfferResult::kJoinedBatch);
  cg.now["/a"] = stats(75, 100);  // still below the threshold at the re-check: the floor is its bar
  cg.now["/b"] = stats(95, 100);
  Decision d = p.on_deadline(200 * kMs, cg.reread());
  ASSERT_EQ(d.collect.size(), 2u) << (d.dropped.empty() ? "" : d.dropped[0].second);
  for (const Candidate& c : d.collect) EXPECT_EQ(c.rule, c.memcg == "/a" ? "forecast" : "threshold") << c.memcg;

  // Below the floor at its re-check, a forecast candidate is watched like any other, naming its bar.
  EXPECT_EQ(p.offer("/c", trig("forecast", 300 * kMs), stats(60, 100), 300 * kMs), OfferResult::kOpenedBatch);
  cg.now["/c"] = stats(40, 100);
  d = p.on_deadline(500 * kMs, cg.reread());
  EXPECT_TRUE(d.collect.empty());
  ASSERT_EQ(d.dropped.size(), 1u);
  EXPECT_NE(d.dropped[0].second.find("below the 50% forecast floor"), std::string::npos) << d.dropped[0].second;
  EXPECT_TRUE(std::find(known_triggers().begin(), known_triggers().end(), "forecast") != known_triggers().end());

  // A floor set above the threshold never makes a forecast's bar higher than the threshold's.
  o.forecast_floor_percent = 95;
  Policy q(o);
  EXPECT_EQ(q.offer("/d", trig("forecast", 0), stats(92, 100), 0), OfferResult::kOpenedBatch);
}

// A forecast's figure is one read mid-climb: it is not a trend sample. With
// the re-check of a container parked since, the two would read as growth far
// steeper than any, and rank parked containers by where their climbs were
// sampled rather than by how close they are. A threshold's figure is one.
TEST(Policy, AForecastsFigureIsNotATrendSample) {
  PolicyOptions o = opts();
  o.batch_window = std::chrono::seconds(5);
  Policy forecast(o), threshold(o);
  FakeCgroups cg;
  EXPECT_EQ(forecast.offer("/a", trig("forecast", 0), stats(55, 100), 0), OfferResult::kOpenedBatch);
  EXPECT_EQ(threshold.offer("/a", trig("threshold", 0), stats(90, 100), 0), OfferResult::kOpenedBatch);
  cg.now["/a"] = stats(93, 100);
  Decision a = forecast.on_deadline(5000 * kMs, cg.reread());
  Decision b = threshold.on_deadline(5000 * kMs, cg.reread());
  ASSERT_EQ(a.collect.size(), 1u);
  ASSERT_EQ(b.collect.size(), 1u);
  EXPECT_EQ(a.collect[0].growth.kind, GrowthKind::kUnknown);  // the re-check's figure alone
  EXPECT_EQ(b.collect[0].growth.kind, GrowthKind::kGrowing);  // 90 % then 93 %, 5 s apart
}

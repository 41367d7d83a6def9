// The collection policy on a fake clock: thresholds, unlimited containers,
// batching by ratio, node-wide cooldown, deferral and fairness.
#include <gtest/gtest.h>

#include <map>

#include "agent/policy.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kMs = 1'000'000;
constexpr MonoNs kSec = 1'000'000'000;

MemcgStats stats(uint64_t usage, std::optional<uint64_t> limit) {
  MemcgStats s;
  s.usage_bytes = usage;
  s.limit_bytes = limit;
  return s;
}

Trigger trig(const char* type, MonoNs at) {
  Trigger t;
  t.type = type;
  t.kernel_ns = at;
  t.received_ns = at;
  return t;
}

PolicyOptions opts(int threshold = 90, std::chrono::nanoseconds cooldown = std::chrono::seconds(300),
                   std::chrono::nanoseconds window = std::chrono::milliseconds(200)) {
  PolicyOptions o;
  o.threshold_percent = threshold;
  o.cooldown = cooldown;
  o.batch_window = window;
  return o;
}

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

TEST(Policy, BatchPicksHighestRatioAfterReread) {
  Policy p(opts());
  FakeCgroups cg;
  EXPECT_EQ(p.offer("/a", trig("threshold", 0), stats(92, 100), 0), OfferResult::kOpenedBatch);
  EXPECT_EQ(p.offer("/b", trig("memcg_pressure", 50 * kMs), stats(91, 100), 50 * kMs), OfferResult::kJoinedBatch);
  EXPECT_EQ(p.offer("/a", trig("memcg_pressure", 60 * kMs), stats(93, 100), 60 * kMs), OfferResult::kJoinedBatch);
  ASSERT_EQ(*p.next_deadline(), 200 * kMs);
  // Before the deadline nothing happens.
  EXPECT_FALSE(p.on_deadline(100 * kMs, cg.reread()).collect);
  // At the deadline the re-read figures decide: b has overtaken a.
  cg.now["/a"] = stats(93, 100);
  cg.now["/b"] = stats(98, 100);
  Decision d = p.on_deadline(200 * kMs, cg.reread());
  ASSERT_TRUE(d.collect);
  EXPECT_EQ(d.collect->memcg, "/b");
  EXPECT_DOUBLE_EQ(d.collect->ratio, 0.98);
  EXPECT_EQ(d.collect->trigger.type, "memcg_pressure");
  ASSERT_EQ(d.dropped.size(), 1u);
  EXPECT_EQ(d.dropped[0].first, "/a");
  EXPECT_EQ(p.deferred_count(), 1u);
}

TEST(Policy, MergedTriggersKeepTheFirst) {
  Policy p(opts());
  FakeCgroups cg;
  cg.now["/a"] = stats(95, 100);
  p.offer("/a", trig("threshold", 5), stats(95, 100), 5);
  p.offer("/a", trig("memcg_pressure", 7), stats(95, 100), 7);
  p.offer("/a", trig("psi", 9), stats(95, 100), 9);
  Decision d = p.on_deadline(kSec, cg.reread());
  ASSERT_TRUE(d.collect);
  EXPECT_EQ(d.collect->trigger.type, "threshold");
  EXPECT_EQ(d.collect->merged, 2u);
  ASSERT_EQ(d.collect->seen.size(), 3u);  // the timeline keeps all of them, in order
  EXPECT_EQ(d.collect->seen[1].type, "memcg_pressure");
  EXPECT_EQ(d.collect->seen[2].kernel_ns, 9u);
}

TEST(Policy, RecheckDropsContainersThatRecoveredOrLostTheirLimit) {
  Policy p(opts());
  FakeCgroups cg;
  p.offer("/a", trig("threshold", 0), stats(95, 100), 0);
  p.offer("/b", trig("threshold", 0), stats(95, 100), 0);
  cg.now["/a"] = stats(50, 100);
  cg.now["/b"] = stats(95, std::nullopt);
  Decision d = p.on_deadline(kSec, cg.reread());
  EXPECT_FALSE(d.collect);
  ASSERT_EQ(d.dropped.size(), 2u);
  EXPECT_NE(d.dropped[0].second.find("below the 90% threshold"), std::string::npos);
  EXPECT_NE(d.dropped[1].second.find("no finite limit"), std::string::npos);
  EXPECT_FALSE(p.in_cooldown(kSec));  // nothing collected, no cooldown
}

TEST(Policy, CooldownDefersThenCollectsTheOther) {
  Policy p(opts(90, std::chrono::seconds(10)));
  FakeCgroups cg;
  cg.now["/a"] = stats(92, 100);
  cg.now["/b"] = stats(97, 100);
  p.offer("/a", trig("threshold", 0), cg.now["/a"], 0);
  p.offer("/b", trig("threshold", 0), cg.now["/b"], 0);
  Decision first = p.on_deadline(200 * kMs, cg.reread());
  ASSERT_TRUE(first.collect);
  EXPECT_EQ(first.collect->memcg, "/b");
  EXPECT_TRUE(p.in_cooldown(5 * kSec));
  // Triggers during the cooldown are deferred, never collected early.
  EXPECT_EQ(p.offer("/b", trig("memcg_pressure", 3 * kSec), cg.now["/b"], 3 * kSec), OfferResult::kDeferred);
  ASSERT_EQ(*p.next_deadline(), 200 * kMs + 10 * kSec);
  EXPECT_FALSE(p.on_deadline(9 * kSec, cg.reread()).collect);
  // After the cooldown: /b has the higher ratio, but /a has not been
  // collected yet and goes first.
  Decision second = p.on_deadline(200 * kMs + 10 * kSec, cg.reread());
  ASSERT_TRUE(second.collect);
  EXPECT_EQ(second.collect->memcg, "/a");
  EXPECT_EQ(p.deferred_count(), 1u);  // /b waits for the next cooldown end
}

TEST(Policy, ZeroCooldownStillOneCollectionPerDecision) {
  Policy p(opts(90, std::chrono::seconds(0)));
  FakeCgroups cg;
  cg.now["/a"] = stats(92, 100);
  cg.now["/b"] = stats(97, 100);
  p.offer("/a", trig("threshold", 0), cg.now["/a"], 0);
  p.offer("/b", trig("threshold", 0), cg.now["/b"], 0);
  Decision d1 = p.on_deadline(kSec, cg.reread());
  ASSERT_TRUE(d1.collect);
  EXPECT_EQ(d1.collect->memcg, "/b");
  ASSERT_TRUE(p.next_deadline());
  Decision d2 = p.on_deadline(kSec, cg.reread());
  ASSERT_TRUE(d2.collect);
  EXPECT_EQ(d2.collect->memcg, "/a");
  EXPECT_FALSE(p.next_deadline());
}

TEST(Policy, ForgetRemovesPendingCandidates) {
  Policy p(opts());
  p.offer("/gone", trig("threshold", 0), stats(99, 100), 0);
  p.forget("/gone");
  EXPECT_FALSE(p.next_deadline());
}

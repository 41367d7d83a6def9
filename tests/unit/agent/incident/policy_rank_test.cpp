// Ranking by growth and sharing the node budget between tenants (issue #28
// item 6), on a fake clock: containers parked at 99 % must not starve a
// leak rising through 92 %, and one pod's containers must not take every
// slot while another pod's candidate waits.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <optional>

#include "agent/incident/policy.h"
#include "agent/incident/policy_rank.h"
#include "policy_fakes.h"

using namespace oomsnap;
using namespace oomsnap::policy_fakes;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kLimit = 1000 * kMiB;

MemcgStats stats(uint64_t usage) { return policy_fakes::stats(usage, kLimit); }

PolicyOptions budget(unsigned per_minute, std::chrono::nanoseconds interval = std::chrono::seconds(300),
                     std::chrono::nanoseconds window = std::chrono::milliseconds(200)) {
  return opts(90, interval, window, per_minute);
}

// A container cgroup of a Kubernetes pod (cgroupfs driver), as container_of reads it.
std::string in_pod(int pod, int container) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "/kubepods/burstable/pod%08x-0000-4000-8000-000000000000/%064x", pod, container);
  return buf;
}

// Containers whose usage follows a function of time; the policy is driven
// the way the agent drives it: triggers offered, on_deadline() at the
// deadlines it names.
struct Node {
  Policy policy;
  std::map<std::string, std::function<uint64_t(MonoNs)>> usage;
  std::map<std::string, MonoNs> collected;  // first collection time of each container
  MonoNs now = 0;

  explicit Node(PolicyOptions o) : policy(o) {}
  void offer(const std::string& m, const char* type) { policy.offer(m, trig(type, now), stats(usage[m](now)), now); }
  void run_deadlines() {
    while (auto d = policy.next_deadline()) {
      if (*d > now) return;
      Decision dec = policy.on_deadline(now, [this](const std::string& m) { return stats(usage[m](now)); });
      for (const auto& c : dec.collect) collected.emplace(c.memcg, now);
    }
  }
};

}  // namespace

// The case: 30 containers parked at 99 % under constant reclaim (a
// trigger each second), never collected before, with the default 6 captures
// a minute; a real leak crosses 90 % five seconds in and rises 1 MiB/s
// towards its 1000 MiB limit (at it after 100 s). It is collected within the
// minute of its crossing, before its limit (ranked by usage ratio alone, it
// would wait behind every parked container: 5 minutes).
TEST(PolicyRank, RisingContainerBeatsThirtyParkedOnesWithinTheMinute) {
  Node node(budget(6));
  const std::string rising = "/tenants/leak";
  const MonoNs crossed = 5 * kSec;
  node.usage[rising] = [&](MonoNs t) {
    return t < crossed ? 890 * kMiB : 900 * kMiB + (t - crossed) / kSec * kMiB + 1;
  };
  std::vector<std::string> parked;
  for (int i = 0; i < 30; ++i) {
    parked.push_back("/tenants/parked" + std::to_string(i));
    node.usage[parked.back()] = [](MonoNs) { return 990 * kMiB; };
  }
  for (node.now = 0; node.now <= 120 * kSec; node.now += 100 * kMs) {
    if (node.now % kSec == 0)
      for (const auto& m : parked) node.offer(m, "memcg_pressure");
    if (node.now == crossed) node.offer(rising, "threshold");  // the v1 threshold fires once
    node.run_deadlines();
  }
  ASSERT_TRUE(node.collected.count(rising));
  EXPECT_LE(node.collected[rising], crossed + 60 * kSec);
  EXPECT_LT(node.usage[rising](node.collected[rising]), kLimit);
  // The parked containers still get their snapshots, within the budget.
  size_t parked_collected = 0;
  for (const auto& m : parked) parked_collected += node.collected.count(m);
  EXPECT_GE(parked_collected, 6u);
  EXPECT_LE(parked_collected + 1, 3 * 6u);  // 3 budget windows in 120 s
}

// A container over the threshold and rising fast goes first, before one
// closer to its limit rising slowly and before a parked one at 99 %.
TEST(PolicyRank, SoonestToTheLimitGoesFirst) {
  // A 2 s batch window: the batch's own re-read gives the trend.
  Policy p(budget(1, std::chrono::seconds(300), std::chrono::seconds(2)));
  std::map<std::string, uint64_t> at0 = {{"/fast", 900 * kMiB}, {"/slow", 950 * kMiB}, {"/parked", 990 * kMiB}};
  std::map<std::string, uint64_t> at2 = {{"/fast", 930 * kMiB}, {"/slow", 952 * kMiB}, {"/parked", 990 * kMiB}};
  for (const auto& [m, u] : at0) p.offer(m, trig("threshold", 0), stats(u), 0);
  Decision d = p.on_deadline(2 * kSec, [&](const std::string& m) { return stats(at2[m]); });
  ASSERT_EQ(names(d), std::vector<std::string>{"/fast"});  // 70 MiB at 15 MiB/s: under 5 s
  EXPECT_EQ(d.collect[0].growth.kind, GrowthKind::kGrowing);
  EXPECT_NEAR(d.collect[0].growth.seconds_to_limit, 70.0 / 15.0, 0.01);
  // Deferred in rank order: /slow (48 MiB at 1 MiB/s) is growing; /parked is steady.
  ASSERT_EQ(d.dropped.size(), 2u);
  EXPECT_EQ(d.dropped[0].first, "/slow");
  EXPECT_NE(d.dropped[1].second.find("growth steady"), std::string::npos) << d.dropped[1].second;
}

// Without a trend (one sample each, as when all cross in one batch window)
// the order is the usage ratio, as before.
TEST(PolicyRank, WithoutATrendTheRatioDecides) {
  std::vector<Candidate> cs(3);
  cs[0].memcg = "/a", cs[0].ratio = 0.93;
  cs[1].memcg = "/b", cs[1].ratio = 0.99;
  cs[2].memcg = "/c", cs[2].ratio = 0.95;
  rank_candidates(cs);
  EXPECT_EQ(cs[0].memcg, "/b");
  EXPECT_EQ(cs[1].memcg, "/c");
  EXPECT_EQ(cs[2].memcg, "/a");
  // A container whose growth is unknown goes before one known to be
  // steady; one collected recently and not growing goes last.
  cs[0].growth.kind = GrowthKind::kSteady;            // /b
  cs[1].growth.kind = GrowthKind::kUnknown;           // /c
  cs[2].collected_recently = true;                    // /a
  cs[2].growth.kind = GrowthKind::kUnknown;
  rank_candidates(cs);
  EXPECT_EQ(cs[0].memcg, "/c");
  EXPECT_EQ(cs[1].memcg, "/b");
  EXPECT_EQ(cs[2].memcg, "/a");
  // Collected recently but growing: it does not wait.
  cs[2].growth.kind = GrowthKind::kGrowing;
  cs[2].growth.seconds_to_limit = 300;
  rank_candidates(cs);
  EXPECT_EQ(cs[0].memcg, "/a");
}

// A container already captured and not growing waits: when its interval
// ends it goes behind a container not yet captured, even one further from
// its limit.
TEST(PolicyRank, CollectedRecentlyAndSteadyWaits) {
  Policy p(budget(1, std::chrono::seconds(10)));
  std::map<std::string, uint64_t> now = {{"/old", 990 * kMiB}, {"/new", 950 * kMiB}};
  auto reread = [&](const std::string& m) { return stats(now[m]); };
  p.offer("/old", trig("threshold", 0), stats(now["/old"]), 0);
  ASSERT_EQ(names(p.on_deadline(200 * kMs, reread)), std::vector<std::string>{"/old"});
  const MonoNs later = 70 * kSec;  // out of its interval and of the budget window
  // Both are known to be steady (samples 2 s apart, in one long batch
  // nobody closed early): only their history tells them apart.
  p.offer("/new", trig("psi", later - 2 * kSec), stats(now["/new"]), later - 2 * kSec);
  p.offer("/old", trig("memcg_pressure", later), stats(now["/old"]), later);
  p.offer("/new", trig("threshold", later), stats(now["/new"]), later);
  Decision d = p.on_deadline(later + 200 * kMs, reread);
  EXPECT_EQ(names(d), std::vector<std::string>{"/new"});
  EXPECT_TRUE(p.deferred_by_budget("/old"));
  ASSERT_EQ(d.dropped.size(), 1u);
  EXPECT_NE(d.dropped[0].second.find("growth steady"), std::string::npos) << d.dropped[0].second;
}

// One pod's ten containers at 99 % and another pod's one container at
// 95 %, crossing together with a budget of 6: the other pod's container is
// in the first decision (by ratio alone it would wait a minute behind five
// of the first pod's).
TEST(PolicyRank, BudgetIsSharedBetweenPods) {
  Policy p(budget(6));
  std::map<std::string, uint64_t> now;
  for (int i = 0; i < 10; ++i) now[in_pod(1, i)] = 990 * kMiB;
  now[in_pod(2, 0)] = 950 * kMiB;
  for (const auto& [m, u] : now) p.offer(m, trig("threshold", 0), stats(u), 0);
  Decision d = p.on_deadline(200 * kMs, [&](const std::string& m) { return stats(now[m]); });
  ASSERT_EQ(d.collect.size(), 6u);
  ASSERT_GE(d.collect.size(), 2u);
  EXPECT_EQ(d.collect[1].memcg, in_pod(2, 0));  // round-robin: pod 1's best, then pod 2's
  EXPECT_EQ(d.collect[1].tenant, tenant_of(in_pod(2, 0)));
  EXPECT_NE(tenant_of(in_pod(1, 3)), tenant_of(in_pod(2, 0)));
  EXPECT_EQ(tenant_of(in_pod(1, 3)), tenant_of(in_pod(1, 4)));
  EXPECT_EQ(tenant_of("/system.slice/x.service"), "/system.slice/x.service");  // no pod: its own tenant
}

// A pod that keeps the budget full (ten containers at 99 %, collected as
// the budget frees) cannot hold every slot: another pod's container that
// arrives meanwhile gets the next free slot, ahead of the first pod's
// deferred containers (which rank higher by ratio). Alone, a pod may use
// the whole budget.
TEST(PolicyRank, OnePodCannotHoldEverySlot) {
  Node node(budget(3));
  for (int i = 0; i < 10; ++i) node.usage[in_pod(1, i)] = [](MonoNs) { return 990 * kMiB; };
  node.usage[in_pod(2, 0)] = [](MonoNs) { return 950 * kMiB; };
  for (int i = 0; i < 10; ++i) node.offer(in_pod(1, i), "threshold");
  node.now = 200 * kMs;
  node.run_deadlines();
  EXPECT_EQ(node.collected.size(), 3u);  // alone: the whole budget
  node.now = 30 * kSec;
  node.offer(in_pod(2, 0), "threshold");
  EXPECT_FALSE(node.collected.count(in_pod(2, 0)));
  for (node.now = 30 * kSec; node.now <= 61 * kSec; node.now += 100 * kMs) node.run_deadlines();
  ASSERT_TRUE(node.collected.count(in_pod(2, 0)));
  EXPECT_EQ(node.collected[in_pod(2, 0)], 60 * kSec + 200 * kMs);  // the first slot that freed
  EXPECT_EQ(node.collected.size(), 6u);  // with two of pod 1's
}

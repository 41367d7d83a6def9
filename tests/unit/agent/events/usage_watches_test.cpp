#include "agent/events/usage_watches.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>

using oomsnap::ScannedMemcg;
using oomsnap::UsageWatch;
using oomsnap::usage_watches;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

}  // namespace

TEST(UsageWatches, EveryCgroupBelowALimitPointsAtItsNearestLimitedAncestor) {
  // /kubepods (no limit) / pod (1000 MiB) / ctr (500 MiB) / sub (none), and a
  // pod-level child without its own limit.
  const std::vector<ScannedMemcg> scanned = {
      {"/kubepods", 1, std::nullopt},
      {"/kubepods/pod", 2, 1000 * kMiB},
      {"/kubepods/pod/ctr", 3, 500 * kMiB},
      {"/kubepods/pod/ctr/sub", 4, std::nullopt},
      {"/kubepods/pod/pause", 5, std::nullopt},
  };
  auto w = usage_watches(scanned, "/kubepods", 90, 8);
  ASSERT_EQ(w.size(), 4u) << "the unlimited /kubepods is no one's container";
  EXPECT_EQ(w[0], (UsageWatch{2, 2, 0, 900 * kMiB, 880 * kMiB}));
  EXPECT_EQ(w[1], (UsageWatch{3, 3, 0, 450 * kMiB, 440 * kMiB}));
  EXPECT_EQ(w[2], (UsageWatch{4, 3, 1, 450 * kMiB, 440 * kMiB}));
  EXPECT_EQ(w[3], (UsageWatch{5, 2, 1, 900 * kMiB, 880 * kMiB}));
}

TEST(UsageWatches, TheScopeBoundsTheClimbAndWhatIsWatched) {
  const std::vector<ScannedMemcg> scanned = {
      {"/", 1, 4096 * kMiB},      // outside the scope: neither watched nor anyone's container
      {"/scope", 2, std::nullopt},
      {"/scope/box", 3, std::nullopt},
      {"/other", 4, 100 * kMiB},  // outside the scope
  };
  EXPECT_TRUE(usage_watches(scanned, "/scope", 90, 8).empty());
}

TEST(UsageWatches, TooDeepBelowTheLimitIsLeftOutAndCounted) {
  std::vector<ScannedMemcg> scanned = {{"/c", 1, 100 * kMiB}};
  std::string p = "/c";
  for (uint64_t i = 0; i < 10; ++i) {
    p += "/d";
    scanned.push_back({p, 10 + i, std::nullopt});
  }
  size_t too_deep = 0;
  auto w = usage_watches(scanned, "/", 90, 8, &too_deep);
  EXPECT_EQ(w.size(), 9u) << "the container and 8 levels below it";
  EXPECT_EQ(too_deep, 2u);
  for (const auto& x : w) EXPECT_LE(x.hops, 8u);
}

TEST(UsageWatches, CgroupsWithoutAnInodeAreLeftOut) {
  // stat failed (gone between the listing and the read): nothing to key on.
  const std::vector<ScannedMemcg> scanned = {{"/c", 0, 100 * kMiB}, {"/c/x", 7, std::nullopt}};
  EXPECT_TRUE(usage_watches(scanned, "/", 90, 8).empty());
}

TEST(UsageWatches, ThresholdAndRearmLevelsNeverOverflow) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(oomsnap::threshold_of(max, 100), max);
  EXPECT_EQ(oomsnap::threshold_of(1000, 90), 900u);
  EXPECT_EQ(oomsnap::threshold_of(999, 90), 899u);
  EXPECT_EQ(oomsnap::threshold_of(1000, 150), 1000u) << "clamped at 100 %";
  EXPECT_EQ(oomsnap::rearm_of(1000, 90), 880u) << "2 % of the limit below";
  EXPECT_EQ(oomsnap::rearm_of(1000, 1), 0u) << "never below zero";
}

TEST(NearestLimited, ClimbsToTheFirstLimitWithinTheScopeAndCountsTheLevels) {
  using oomsnap::nearest_limited;
  const std::set<std::string> limited = {"/", "/k/pod", "/k/pod/ctr"};
  auto has = [&](const std::string& p) { return limited.count(p) > 0; };
  auto up = nearest_limited("/k/pod/ctr/a/b", "/k", has);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->path, "/k/pod/ctr");
  EXPECT_EQ(up->hops, 2u);
  up = nearest_limited("/k/pod/pause", "/k", has);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->path, "/k/pod");
  EXPECT_EQ(up->hops, 1u);
  up = nearest_limited("/k/pod", "/k", has);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->hops, 0u) << "a limited cgroup is its own container";
  EXPECT_FALSE(nearest_limited("/k/other", "/k", has)) << "the limit on / is above the scope";
  EXPECT_FALSE(nearest_limited("/elsewhere/pod/ctr", "/k", has)) << "outside the scope";
  up = nearest_limited("/x/y", "/", has);
  ASSERT_TRUE(up) << "with the whole tree in scope, / is the last container";
  EXPECT_EQ(up->path, "/");
  EXPECT_EQ(up->hops, 2u);
}

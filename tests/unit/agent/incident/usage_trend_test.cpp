// The growth estimator on a fake clock: a single sample says nothing, a
// steady container with noise is steady, a shrinking one is not heading for
// its limit, a rising one has a finite time to its limit, and one outlier
// does not make a steady container look like a leak.
#include <gtest/gtest.h>

#include <cmath>

#include "agent/incident/usage_trend.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kMs = 1'000'000;
constexpr MonoNs kSec = 1'000'000'000;
constexpr uint64_t kLimit = 1000ull << 20;  // 1000 MiB: 1 % is 10 MiB
constexpr uint64_t kMiB = 1 << 20;

}  // namespace

TEST(UsageTrend, SingleSampleIsUnknown) {
  UsageTrend t;
  t.add(10 * kSec, 990 * kMiB);
  Growth g = t.growth(10 * kSec, 990 * kMiB, kLimit);
  EXPECT_EQ(g.kind, GrowthKind::kUnknown);
  EXPECT_TRUE(std::isinf(g.seconds_to_limit));
  // Nothing at all is unknown too.
  EXPECT_EQ(UsageTrend{}.growth(kSec, 990 * kMiB, kLimit).kind, GrowthKind::kUnknown);
}

// Sub-second jitter is not a rate: a burst of triggers within one second
// (900 MiB to 950 MiB in 300 ms would read as 10 GiB a minute) stays unknown.
TEST(UsageTrend, SamplesCloserThanTheMinimumSpanGiveNoRate) {
  UsageTrend t;
  t.add(0, 900 * kMiB);
  t.add(600 * kMs, 920 * kMiB);
  EXPECT_EQ(t.growth(900 * kMs, 950 * kMiB, kLimit).kind, GrowthKind::kUnknown);
  EXPECT_EQ(t.growth(1100 * kMs, 950 * kMiB, kLimit).kind, GrowthKind::kGrowing);
}

TEST(UsageTrend, RisingContainerHasAFiniteTimeToItsLimit) {
  UsageTrend t;
  // 900 MiB rising 2 MiB/s (12 % of the limit a minute).
  for (MonoNs s = 0; s <= 10; ++s) t.add(s * kSec, 900 * kMiB + s * 2 * kMiB);
  Growth g = t.growth(10 * kSec, 920 * kMiB, kLimit);
  ASSERT_EQ(g.kind, GrowthKind::kGrowing);
  EXPECT_NEAR(g.bytes_per_second, 2.0 * kMiB, 1.0);
  EXPECT_NEAR(g.seconds_to_limit, 40.0, 0.01);  // 80 MiB of headroom at 2 MiB/s
  // At or over the limit and still rising: no time left.
  EXPECT_EQ(t.growth(10 * kSec, kLimit + kMiB, kLimit).seconds_to_limit, 0.0);
}

// A steady container whose usage jitters by ±4 MiB every second, with one
// 60 MiB spike: Theil-Sen reads it as steady (a first-to-last difference
// ending on the spike, or a least-squares fit, would read growth).
TEST(UsageTrend, NoiseAndOneOutlierLeaveASteadyContainerSteady) {
  UsageTrend t;
  for (MonoNs s = 0; s < 30; ++s) {
    uint64_t usage = 990 * kMiB + ((s % 2) ? 4 * kMiB : 0) - ((s % 3) ? 0 : 4 * kMiB);
    t.add(s * kSec, usage);
  }
  Growth g = t.growth(30 * kSec, 1050 * kMiB, kLimit);  // the spike is the current figure
  EXPECT_EQ(g.kind, GrowthKind::kSteady) << g.bytes_per_second;
  EXPECT_TRUE(std::isinf(g.seconds_to_limit));
}

TEST(UsageTrend, ShrinkingContainerIsSteady) {
  UsageTrend t;
  for (MonoNs s = 0; s <= 20; s += 2) t.add(s * kSec, 980 * kMiB - s * 3 * kMiB);
  Growth g = t.growth(20 * kSec, 920 * kMiB, kLimit);
  EXPECT_EQ(g.kind, GrowthKind::kSteady);
  EXPECT_LT(g.bytes_per_second, 0);
  EXPECT_TRUE(std::isinf(g.seconds_to_limit));
}

// Growth under 1 % of the limit a minute is noise, not a leak.
TEST(UsageTrend, SlowCreepUnderTheFloorIsSteady) {
  UsageTrend t;
  t.add(0, 900 * kMiB);
  // 5 MiB in 60 s: 0.5 % of the limit a minute.
  EXPECT_EQ(t.growth(60 * kSec, 905 * kMiB, kLimit).kind, GrowthKind::kSteady);
  // 15 MiB in 60 s: 1.5 %.
  EXPECT_EQ(t.growth(60 * kSec, 915 * kMiB, kLimit).kind, GrowthKind::kGrowing);
}

// A container that triggers many times a second keeps samples spread over
// the window (not only its last 16 triggers, 8 s of them), and samples older
// than the window are forgotten.
TEST(UsageTrend, BurstsKeepTheWindowAndOldSamplesAge) {
  UsageTrend t;
  // 1 MiB/s for 50 s, then a 10 s pause (a leak between two GC cycles).
  auto usage = [](MonoNs ms) { return 900 * kMiB + std::min<MonoNs>(ms / 1000, 50) * kMiB; };
  for (MonoNs ms = 0; ms <= 60'000; ms += 100) t.add(ms * kMs, usage(ms));
  EXPECT_LE(t.size(), kTrendMaxSamples);
  // The rate is read over the whole minute, not over the pause alone.
  Growth g = t.growth(60 * kSec, usage(60'000), kLimit);
  ASSERT_EQ(g.kind, GrowthKind::kGrowing) << g.bytes_per_second;
  EXPECT_GT(g.bytes_per_second, 0.5 * kMiB);
  EXPECT_LE(g.bytes_per_second, 1.0 * kMiB);
  EXPECT_FALSE(t.stale(60 * kSec));
  EXPECT_TRUE(t.stale(60 * kSec + kTrendWindow + 1));
  // Long after: the old samples say nothing about now.
  EXPECT_EQ(t.growth(60 * kSec + kTrendWindow + 10 * kSec, 960 * kMiB, kLimit).kind, GrowthKind::kUnknown);
}

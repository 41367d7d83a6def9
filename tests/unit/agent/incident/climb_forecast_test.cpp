// The predictive trigger's arithmetic on a fake clock: a climb toward the
// limit fires once, when the time left at its rate falls under the expected
// capture time plus the margin; a steady container, one that steps up once
// and stays, one below the floor, or one too few samples old never does.
#include <gtest/gtest.h>

#include <cmath>

#include "agent/incident/capture_cost.h"
#include "agent/incident/climb_forecast.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kMs = 1'000'000;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kLimit = 1024 * kMiB;

// Samples every `every` from `from` bytes climbing `mib_per_s`, until `until`
// bytes; returns the first forecast (and the usage it fired at) or nullopt.
struct Fired {
  Forecast forecast;
  uint64_t usage = 0;
  int fires = 0;
};
Fired climb(ClimbForecast& f, uint64_t from, double mib_per_s, uint64_t until, MonoNs every, double capture_s,
            ForecastOptions o = {}) {
  Fired r;
  for (MonoNs t = 0;; t += every) {
    const uint64_t usage = from + static_cast<uint64_t>(mib_per_s * kMiB * (static_cast<double>(t) / 1e9));
    if (usage > until) break;
    f.add(t, usage);
    if (auto x = f.due(kLimit, capture_s, o)) {
      if (!r.fires) {
        r.forecast = *x;
        r.usage = usage;
      }
      ++r.fires;
    }
  }
  return r;
}

}  // namespace

// 500 MiB/s into 1 GiB, a capture of 0.3 s and the 0.2 s margin: the limit
// must be at most 0.5 s (250 MiB) away when it fires, and it fires once.
TEST(ClimbForecast, AFastClimbFiresOnceWhenTheLimitIsNearerThanTheCapture) {
  ClimbForecast f;
  Fired r = climb(f, 300 * kMiB, 500, kLimit, 25 * kMs, 0.3);
  ASSERT_EQ(r.fires, 1);
  EXPECT_NEAR(r.forecast.bytes_per_second, 500.0 * kMiB, 5.0 * kMiB);
  EXPECT_NEAR(r.forecast.needed_seconds, 0.5, 1e-9);
  EXPECT_LE(r.forecast.seconds_to_limit, 0.5);
  EXPECT_GT(r.forecast.seconds_to_limit, 0.45);  // not late: within one 25 ms sample of the point
  EXPECT_GE(r.usage, kLimit - 250 * kMiB);
  EXPECT_LT(r.usage, kLimit - 230 * kMiB);
}

// The same climb with a slow reader fires earlier; a fast one only near the
// limit, and never for a climb that stops short of the point.
TEST(ClimbForecast, TheExpectedCaptureTimeMovesThePoint) {
  ClimbForecast slow, fast, short_climb;
  Fired s = climb(slow, 300 * kMiB, 500, kLimit, 25 * kMs, 1.0);
  Fired q = climb(fast, 300 * kMiB, 500, kLimit, 25 * kMs, 0.02);
  ASSERT_EQ(s.fires, 1);
  ASSERT_EQ(q.fires, 1);
  EXPECT_LT(s.usage, q.usage);
  EXPECT_GE(s.usage, kLimit - 600 * kMiB);  // 1.2 s at 500 MiB/s
  EXPECT_GE(q.usage, kLimit - 110 * kMiB);  // 0.22 s
  EXPECT_EQ(climb(short_climb, 300 * kMiB, 500, 800 * kMiB, 25 * kMs, 0.02).fires, 0);
}

// A slow climb (10 MiB/s) is the threshold's business: it never comes within
// a capture's time of the limit until it is at it.
TEST(ClimbForecast, ASlowClimbDoesNotFireAwayFromTheLimit) {
  ClimbForecast f;
  Fired r = climb(f, 600 * kMiB, 10, 1015 * kMiB, 100 * kMs, 0.3);
  EXPECT_EQ(r.fires, 0);
}

// Steady at 80 % with read noise, or shrinking: no rate, no forecast.
TEST(ClimbForecast, SteadyOrShrinkingNeverFires) {
  ClimbForecast steady, shrinking;
  for (int i = 0; i < 200; ++i) {
    const MonoNs t = static_cast<MonoNs>(i) * 25 * kMs;
    steady.add(t, 820 * kMiB + (i % 3) * kMiB - (i % 5) * kMiB / 2);
    shrinking.add(t, 1000 * kMiB - static_cast<uint64_t>(i) * kMiB);
    EXPECT_FALSE(steady.due(kLimit, 2.0, {})) << i;
    EXPECT_FALSE(shrinking.due(kLimit, 2.0, {})) << i;
  }
  EXPECT_FALSE(steady.rate());
}

// A JVM committing 200 MiB at once and staying there: for a moment the
// median slope is steep, but the newest step is flat, so nothing fires.
TEST(ClimbForecast, AStepUpThatStaysFlatDoesNotFire) {
  ClimbForecast f;
  int fires = 0;
  for (int i = 0; i < 40; ++i) {
    const uint64_t usage = i < 4 ? 600 * kMiB : 800 * kMiB;
    f.add(static_cast<MonoNs>(i) * 25 * kMs, usage);
    fires += f.due(kLimit, 2.0, {}).has_value();
  }
  EXPECT_EQ(fires, 0);
  // The step itself (the newest step climbs) would have: this is the guard.
  ClimbForecast g;
  for (int i = 0; i < 4; ++i) g.add(static_cast<MonoNs>(i) * 25 * kMs, 600 * kMiB + static_cast<uint64_t>(i) * 60 * kMiB);
  EXPECT_TRUE(g.rate());
}

// Two samples, or pairs closer than 20 ms, say nothing.
TEST(ClimbForecast, TooFewOrTooCloseSamplesGiveNoRate) {
  ClimbForecast two, close;
  two.add(0, 800 * kMiB);
  two.add(50 * kMs, 900 * kMiB);
  EXPECT_FALSE(two.rate());
  EXPECT_FALSE(two.due(kLimit, 5.0, {}));
  for (int i = 0; i < 5; ++i) close.add(static_cast<MonoNs>(i) * 4 * kMs, 800 * kMiB + static_cast<uint64_t>(i) * 10 * kMiB);
  EXPECT_FALSE(close.rate());
}

// Below the floor nothing fires, however fast; once a climb fired, the next
// fires only after usage fell below the floor.
TEST(ClimbForecast, TheFloorGatesAndRearms) {
  ForecastOptions o;
  o.floor_percent = 50;
  ClimbForecast f;
  // 2 GiB/s but only to 45 %: below the floor.
  EXPECT_EQ(climb(f, 0, 2048, 460 * kMiB, 10 * kMs, 5.0, o).fires, 0);
  ClimbForecast g;
  EXPECT_EQ(climb(g, 520 * kMiB, 500, 1000 * kMiB, 25 * kMs, 5.0, o).fires, 1);
  // Still above the floor and climbing again: no second trigger.
  for (int i = 0; i < 10; ++i) g.add(2 * 1'000'000'000ull + static_cast<MonoNs>(i) * 25 * kMs, 900 * kMiB + static_cast<uint64_t>(i) * 10 * kMiB);
  EXPECT_FALSE(g.due(kLimit, 5.0, o));
  // Down below the floor, then a new climb: it fires again.
  g.add(3 * 1'000'000'000ull, 100 * kMiB);
  EXPECT_FALSE(g.due(kLimit, 5.0, o));
  int again = 0;
  for (int i = 1; i < 40; ++i) {
    g.add(4 * 1'000'000'000ull + static_cast<MonoNs>(i) * 25 * kMs, 500 * kMiB + static_cast<uint64_t>(i) * 12 * kMiB);
    again += g.due(kLimit, 5.0, o).has_value();
  }
  EXPECT_EQ(again, 1);
}

// Samples age out of the one-second window: an old climb does not make a
// container parked since look like it is climbing.
TEST(ClimbForecast, OldSamplesAgeOut) {
  ClimbForecast f;
  for (int i = 0; i < 5; ++i) f.add(static_cast<MonoNs>(i) * 25 * kMs, 500 * kMiB + static_cast<uint64_t>(i) * 50 * kMiB);
  EXPECT_TRUE(f.rate());
  f.add(5'000 * kMs, 700 * kMiB);
  EXPECT_EQ(f.size(), 1u);
  EXPECT_FALSE(f.rate());
  // And a sample from the past is ignored.
  f.add(1'000 * kMs, 100 * kMiB);
  EXPECT_EQ(f.size(), 1u);
}

TEST(CaptureCost, DefaultCoversAJvmWalkAndLearnedScalesWithUsage) {
  EXPECT_NEAR(default_capture_seconds(0), 0.1, 1e-9);
  EXPECT_NEAR(default_capture_seconds(kLimit), 0.45, 1e-9);
  EXPECT_NEAR(default_capture_seconds(1ull << 50), kMaxCaptureSeconds, 1e-9);
  CaptureCost c;
  EXPECT_NEAR(c.expected_seconds("/a", kLimit), 0.45, 1e-9);
  c.learn("/a", 0.06, 400 * kMiB);
  EXPECT_NEAR(c.expected_seconds("/a", 400 * kMiB), 0.06, 1e-9);
  EXPECT_NEAR(c.expected_seconds("/a", 200 * kMiB), 0.06, 1e-9);  // never shorter
  EXPECT_NEAR(c.expected_seconds("/a", 800 * kMiB), 0.12, 1e-9);  // twice the heap
  EXPECT_NEAR(c.expected_seconds("/b", kLimit), 0.45, 1e-9);      // another container: the default
  // A figure that is no time at all, negative or runaway is bounded or ignored.
  c.learn("/a", -1, kLimit);
  c.learn("/a", std::nan(""), kLimit);
  EXPECT_NEAR(c.expected_seconds("/a", 400 * kMiB), 0.06, 1e-9);
  c.learn("/a", 1e9, kLimit);
  EXPECT_NEAR(c.expected_seconds("/a", kLimit), kMaxCaptureSeconds, 1e-9);
  c.learn("/a", 0, kLimit);
  EXPECT_NEAR(c.expected_seconds("/a", kLimit), kMinCaptureSeconds, 1e-9);
  c.forget("/a");
  EXPECT_EQ(c.size(), 0u);
}

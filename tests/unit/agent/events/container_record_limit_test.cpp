// ContainerRecordLimiter: at most `limit` records per container per window,
// every event not recorded counted into the container's next record, a window
// that ends owing events gives one record, containers independent, state
// bounded; with exit records (the first kind it bounded) and with OOM kills
// (issue #28 item 4: a container forking allocators into a tiny limit is
// killed thousands of times a minute; its first kill is always recorded, the
// kills not recorded and their span are carried into its next record, and
// another container is unaffected). Time is passed in (a fake clock), so
// windows are exact here.
#include <gtest/gtest.h>

#include <cstring>

#include "agent/events/container_record_limit.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kSec = 1'000'000'000ull;
constexpr MonoNs kT0 = 1000 * kSec;

constexpr MonoNs kMs = 1'000'000ull;
constexpr uint64_t kKillsPerMinute = 5;  // the default MaxOomKillRecordsPerMinute

HeldEvent event_of(uint32_t type, uint32_t pid, MonoNs at, uint32_t kernel_suppressed, const std::string& memcg) {
  HeldEvent x;
  x.event.type = type;
  x.event.tgid = pid;
  x.event.ktime_ns = at;
  x.event.suppressed = kernel_suppressed;
  std::strncpy(x.event.comm, "sh", sizeof x.event.comm);
  x.memcg = memcg;
  return x;
}

HeldEvent exit_of(uint32_t pid, uint32_t kernel_suppressed = 0, const std::string& memcg = "/a") {
  HeldEvent x = event_of(OOMSNAP_EV_PROCESS_EXIT, pid, 0, kernel_suppressed, memcg);
  x.event.exit_code = 9;
  return x;
}

HeldEvent kill_of(uint32_t pid, MonoNs at, const std::string& memcg) {
  return event_of(OOMSNAP_EV_OOM_KILL, pid, at, 0, memcg);
}

}  // namespace

TEST(ContainerRecordLimiter, AtMostLimitPerWindowTheRestCountedIntoTheNext) {
  ContainerRecordLimiter lim;  // 60 s windows
  // 3 per window: the first three are written, the first with nothing before it.
  for (uint32_t i = 0; i < 3; ++i) {
    auto v = lim.admit("/a", exit_of(100 + i), kT0 + i * kSec, 3);
    EXPECT_TRUE(v.write) << i;
    EXPECT_EQ(v.suppressed.total, 0u) << i;
  }
  // 1000 more in the same window: none written.
  for (uint32_t i = 0; i < 1000; ++i) EXPECT_FALSE(lim.admit("/a", exit_of(200 + i), kT0 + 5 * kSec, 3).write);
  // Within the window nothing is due.
  EXPECT_TRUE(lim.take_due(kT0 + 59 * kSec).empty());
  // The next window's first exit carries the 1000 (and its own kernel count).
  auto v = lim.admit("/a", exit_of(5000, 7), kT0 + 61 * kSec, 3);
  ASSERT_TRUE(v.write);
  EXPECT_EQ(v.suppressed.total, 1007u);
  EXPECT_EQ(v.suppressed.in_kernel, 7u);
}

TEST(ContainerRecordLimiter, KernelSuppressedCountsAreCarried) {
  ContainerRecordLimiter lim;
  // Written exits carry the kernel's count of what came before them.
  auto v = lim.admit("/a", exit_of(1, 40), kT0, 2);
  ASSERT_TRUE(v.write);
  EXPECT_EQ(v.suppressed.total, 40u);
  EXPECT_EQ(v.suppressed.in_kernel, 40u);
  EXPECT_TRUE(lim.admit("/a", exit_of(2, 0), kT0 + kSec, 2).write);
  // Held back: the exit itself and its kernel count.
  EXPECT_FALSE(lim.admit("/a", exit_of(3, 50), kT0 + 2 * kSec, 2).write);
  EXPECT_FALSE(lim.admit("/a", exit_of(4, 60), kT0 + 3 * kSec, 2).write);
  // Folded exits' kernel counts too.
  lim.add_suppressed("/a", 5);
  auto due = lim.take_due(kT0 + 60 * kSec);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].container, "/a");
  EXPECT_EQ(due[0].event.event.tgid, 4u) << "the last exit held back is the record";
  // 3 and 4 (2) + 50 + 60 + 5 in the kernel, minus the record itself.
  EXPECT_EQ(due[0].suppressed.total, 2u + 50 + 60 + 5 - 1);
  EXPECT_EQ(due[0].suppressed.in_kernel, 50u + 60 + 5);
}

TEST(ContainerRecordLimiter, DueRecordOpensTheNextWindowSoNoWindowExceedsTheLimit) {
  ContainerRecordLimiter lim;
  EXPECT_TRUE(lim.admit("/a", exit_of(1), kT0, 2).write);
  EXPECT_TRUE(lim.admit("/a", exit_of(2), kT0, 2).write);
  EXPECT_FALSE(lim.admit("/a", exit_of(3), kT0 + kSec, 2).write);
  auto due = lim.take_due(kT0 + 60 * kSec);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].suppressed.total, 0u);
  // That record was the first of the window starting at +60 s: one more fits.
  EXPECT_TRUE(lim.admit("/a", exit_of(4), kT0 + 61 * kSec, 2).write);
  EXPECT_FALSE(lim.admit("/a", exit_of(5), kT0 + 62 * kSec, 2).write);
  // Nothing is due twice.
  EXPECT_TRUE(lim.take_due(kT0 + 100 * kSec).empty());
  ASSERT_EQ(lim.take_due(kT0 + 120 * kSec).size(), 1u);
}

TEST(ContainerRecordLimiter, ContainersAreIndependent) {
  ContainerRecordLimiter lim;
  EXPECT_TRUE(lim.admit("/flood", exit_of(1), kT0, 1).write);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_FALSE(lim.admit("/flood", exit_of(10 + i), kT0, 1).write);
  auto v = lim.admit("/quiet", exit_of(2), kT0, 1);
  EXPECT_TRUE(v.write) << "another container's flood does not use up this one's bound";
  EXPECT_EQ(v.suppressed.total, 0u);
}

TEST(ContainerRecordLimiter, StateIsDroppedWhenNothingIsOwedOrTheContainerGoes) {
  ContainerRecordLimiter lim;
  for (int c = 0; c < 100; ++c) lim.admit("/c" + std::to_string(c), exit_of(1), kT0, 5);
  EXPECT_EQ(lim.containers(), 100u);
  EXPECT_TRUE(lim.take_due(kT0 + 30 * kSec).empty());
  EXPECT_EQ(lim.containers(), 100u) << "windows still open";
  EXPECT_TRUE(lim.take_due(kT0 + 60 * kSec).empty());
  EXPECT_EQ(lim.containers(), 0u) << "ended windows with nothing owed are forgotten";

  lim.admit("/gone", exit_of(1), kT0, 1);
  lim.admit("/gone", exit_of(2, 3), kT0, 1);
  auto owed = lim.forget("/gone");
  ASSERT_TRUE(owed.has_value());
  EXPECT_EQ(owed->event.event.tgid, 2u);
  EXPECT_EQ(owed->suppressed.total, 3u);
  EXPECT_EQ(lim.containers(), 0u);
  EXPECT_FALSE(lim.forget("/gone").has_value());
}

TEST(ContainerRecordLimiter, ShutdownTakesEverythingOwed) {
  ContainerRecordLimiter lim;
  lim.admit("/a", exit_of(1), kT0, 1);
  lim.admit("/a", exit_of(2), kT0 + kSec, 1);
  lim.admit("/a", exit_of(3), kT0 + kSec, 1);
  auto due = lim.take_due(kT0 + 2 * kSec, /*all=*/true);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].suppressed.total + 1, 2u) << "exits 2 and 3";
}

TEST(OomKillRecordLimit, TenThousandKillsInAMinuteGiveAtMostTheLimitWithTheCountCarried) {
  ContainerRecordLimiter lim;
  size_t written = 0;
  uint64_t carried = 0;
  // 10,000 kills of one container within 50 s (one every 5 ms), with the
  // rescan timer's take_due every 2 s as the agent calls it.
  for (uint32_t i = 0; i < 10'000; ++i) {
    const MonoNs at = kT0 + i * 5 * kMs;
    auto v = lim.admit("/flood", kill_of(1000 + i, at, "/flood/job"), at, kKillsPerMinute);
    if (v.write) {
      ++written;
      carried += v.suppressed.total;
      if (i == 0) {
        EXPECT_EQ(v.suppressed.total, 0u) << "the first kill has nothing before it";
      }
    }
    if (at % (2 * kSec) == 0)
      for (auto& due : lim.take_due(at)) {
        ++written;
        carried += due.suppressed.total;
      }
  }
  EXPECT_EQ(written, kKillsPerMinute) << "records within the minute";
  EXPECT_EQ(carried, 0u) << "nothing is carried before the window ends";

  // The minute ends: one record, the last kill held back, carrying the rest
  // and the span from the first kill held back to it.
  auto due = lim.take_due(kT0 + 60 * kSec);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].container, "/flood");
  EXPECT_EQ(due[0].event.event.tgid, 1000u + 9'999) << "the last kill held back is the record";
  EXPECT_EQ(due[0].suppressed.total, 10'000u - kKillsPerMinute - 1);
  EXPECT_EQ(due[0].suppressed.first_ns, kT0 + kKillsPerMinute * 5 * kMs) << "the first kill held back";
  EXPECT_EQ(written + 1 + due[0].suppressed.total, 10'000u) << "every kill in a record or counted in one";
}

TEST(OomKillRecordLimit, AnotherContainerIsUnaffectedByTheFlood) {
  ContainerRecordLimiter lim;
  for (uint32_t i = 0; i < 10'000; ++i)
    lim.admit("/flood", kill_of(i, kT0 + i * kMs, "/flood"), kT0 + i * kMs, kKillsPerMinute);
  const MonoNs at = kT0 + 10 * kSec;
  auto v = lim.admit("/other", kill_of(77, at, "/other"), at, kKillsPerMinute);
  EXPECT_TRUE(v.write) << "another container's first kill gets its full record";
  EXPECT_EQ(v.suppressed.total, 0u);
  EXPECT_EQ(v.suppressed.first_ns, 0u);
}

TEST(OomKillRecordLimit, NextWindowsFirstKillCarriesTheCountAndTheSpan) {
  ContainerRecordLimiter lim;
  for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(lim.admit("/a", kill_of(i, kT0, "/a"), kT0, 3).write);
  EXPECT_FALSE(lim.admit("/a", kill_of(10, kT0 + 2 * kSec, "/a"), kT0 + 2 * kSec, 3).write);
  EXPECT_FALSE(lim.admit("/a", kill_of(11, kT0 + 9 * kSec, "/a"), kT0 + 9 * kSec, 3).write);
  // A kill after the window (before any take_due) is written and carries both.
  const MonoNs at = kT0 + 61 * kSec;
  auto v = lim.admit("/a", kill_of(12, at, "/a"), at, 3);
  ASSERT_TRUE(v.write);
  EXPECT_EQ(v.suppressed.total, 2u);
  EXPECT_EQ(v.suppressed.first_ns, kT0 + 2 * kSec);
  // Nothing left owed.
  EXPECT_TRUE(lim.take_due(kT0 + 200 * kSec).empty());
}

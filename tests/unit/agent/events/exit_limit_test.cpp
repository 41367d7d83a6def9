// ExitRecordLimiter: at most `limit` exit records per container per window,
// every exit not recorded counted into the container's next record, a window
// that ends owing exits gives one record, containers independent, state
// bounded. Time is passed in, so windows are exact here.
#include <gtest/gtest.h>

#include <cstring>

#include "agent/events/exit_limit.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kSec = 1'000'000'000ull;
constexpr MonoNs kT0 = 1000 * kSec;

HeldExit exit_of(uint32_t pid, uint32_t kernel_suppressed = 0, const std::string& memcg = "/a") {
  HeldExit x;
  x.event.type = OOMSNAP_EV_PROCESS_EXIT;
  x.event.tgid = pid;
  x.event.exit_code = 9;
  x.event.suppressed = kernel_suppressed;
  std::strncpy(x.event.comm, "sh", sizeof x.event.comm);
  x.memcg = memcg;
  return x;
}

}  // namespace

TEST(ExitRecordLimiter, AtMostLimitPerWindowTheRestCountedIntoTheNext) {
  ExitRecordLimiter lim;  // 60 s windows
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

TEST(ExitRecordLimiter, KernelSuppressedCountsAreCarried) {
  ExitRecordLimiter lim;
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
  EXPECT_EQ(due[0].exit.event.tgid, 4u) << "the last exit held back is the record";
  // 3 and 4 (2) + 50 + 60 + 5 in the kernel, minus the record itself.
  EXPECT_EQ(due[0].suppressed.total, 2u + 50 + 60 + 5 - 1);
  EXPECT_EQ(due[0].suppressed.in_kernel, 50u + 60 + 5);
}

TEST(ExitRecordLimiter, DueRecordOpensTheNextWindowSoNoWindowExceedsTheLimit) {
  ExitRecordLimiter lim;
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

TEST(ExitRecordLimiter, ContainersAreIndependent) {
  ExitRecordLimiter lim;
  EXPECT_TRUE(lim.admit("/flood", exit_of(1), kT0, 1).write);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_FALSE(lim.admit("/flood", exit_of(10 + i), kT0, 1).write);
  auto v = lim.admit("/quiet", exit_of(2), kT0, 1);
  EXPECT_TRUE(v.write) << "another container's flood does not use up this one's bound";
  EXPECT_EQ(v.suppressed.total, 0u);
}

TEST(ExitRecordLimiter, StateIsDroppedWhenNothingIsOwedOrTheContainerGoes) {
  ExitRecordLimiter lim;
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
  EXPECT_EQ(owed->exit.event.tgid, 2u);
  EXPECT_EQ(owed->suppressed.total, 3u);
  EXPECT_EQ(lim.containers(), 0u);
  EXPECT_FALSE(lim.forget("/gone").has_value());
}

TEST(ExitRecordLimiter, ShutdownTakesEverythingOwed) {
  ExitRecordLimiter lim;
  lim.admit("/a", exit_of(1), kT0, 1);
  lim.admit("/a", exit_of(2), kT0 + kSec, 1);
  lim.admit("/a", exit_of(3), kT0 + kSec, 1);
  auto due = lim.take_due(kT0 + 2 * kSec, /*all=*/true);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].suppressed.total + 1, 2u) << "exits 2 and 3";
}

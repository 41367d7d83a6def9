// Which processes the last gasp plans and arms, scan by scan: each process
// looked at once, a reused pid or an exec is a new process, the gone ones
// disarmed, every limit holding.
#include <gtest/gtest.h>

#include "agent/last_gasp/last_gasp_roster.h"

using namespace oomsnap;

namespace {

RosterProcess proc(pid_t pid, uint64_t start = 100, std::string comm = "server") {
  return RosterProcess{pid, start, std::move(comm)};
}

std::vector<pid_t> pids(const std::vector<RosterProcess>& ps) {
  std::vector<pid_t> out;
  for (const auto& p : ps) out.push_back(p.pid);
  return out;
}

}  // namespace

TEST(LastGaspRoster, EachProcessIsPlannedOnceHoweverItsPlanEnds) {
  LastGaspRoster r;
  auto c = r.scan({proc(10), proc(11)}, true);
  EXPECT_EQ(pids(c.to_plan), (std::vector<pid_t>{10, 11}));
  EXPECT_TRUE(r.scan({proc(10), proc(11)}, true).to_plan.empty()) << "planned again while its plan runs";
  EXPECT_TRUE(r.planned(proc(10), true));   // Go: armed
  EXPECT_FALSE(r.planned(proc(11), false)); // not Go
  EXPECT_EQ(r.armed(), 1u);
  c = r.scan({proc(10), proc(11)}, true);
  EXPECT_TRUE(c.to_plan.empty()) << "a process that is not Go is planned again";
  EXPECT_TRUE(c.to_disarm.empty());
}

TEST(LastGaspRoster, AGoneProcessIsDisarmedAndAReusedPidOrAnExecIsANewOne) {
  LastGaspRoster r;
  r.scan({proc(10), proc(11), proc(12)}, true);
  for (pid_t p : {10, 11, 12}) ASSERT_TRUE(r.planned(proc(p), true));
  // 10 gone, 11's pid reused (another start), 12 exec'd (same start, new comm).
  auto c = r.scan({proc(11, 200), proc(12, 100, "sh")}, true);
  EXPECT_EQ(c.to_disarm, (std::vector<pid_t>{10, 11, 12}));
  EXPECT_EQ(c.to_plan, (std::vector<RosterProcess>{proc(11, 200), proc(12, 100, "sh")}));
  EXPECT_EQ(r.armed(), 0u);
  // The old plan of 11 ending now arms nothing: it was of the process before.
  EXPECT_FALSE(r.planned(proc(11), true));
  EXPECT_TRUE(r.planned(proc(11, 200), true));
}

TEST(LastGaspRoster, AListCutShortForgetsNothing) {
  LastGaspRoster r;
  r.scan({proc(10), proc(11)}, true);
  ASSERT_TRUE(r.planned(proc(10), true));
  ASSERT_FALSE(r.planned(proc(11), false));
  auto c = r.scan({proc(12)}, false);
  EXPECT_TRUE(c.to_disarm.empty());
  EXPECT_EQ(pids(c.to_plan), (std::vector<pid_t>{12}));
  EXPECT_EQ(r.known(), 3u);
  EXPECT_EQ(r.armed(), 1u);
}

TEST(LastGaspRoster, PlansInFlightKnownAndArmedAreBounded) {
  LastGaspRoster r(RosterLimits{.max_known = 6, .max_armed = 2, .max_planning = 3});
  std::vector<RosterProcess> live;
  for (pid_t p = 1; p <= 10; ++p) live.push_back(proc(p));
  auto c = r.scan(live, true);
  EXPECT_EQ(pids(c.to_plan), (std::vector<pid_t>{1, 2, 3}));
  EXPECT_EQ(c.deferred, 7u);
  EXPECT_TRUE(r.planned(proc(1), true));
  EXPECT_TRUE(r.planned(proc(2), true));
  EXPECT_FALSE(r.planned(proc(3), true)) << "armed past max_armed";
  c = r.scan(live, true);
  EXPECT_EQ(pids(c.to_plan), (std::vector<pid_t>{4, 5, 6}));
  for (pid_t p : {4, 5, 6}) r.planned(proc(p), false);
  c = r.scan(live, true);
  EXPECT_TRUE(c.to_plan.empty()) << "known past max_known";
  EXPECT_EQ(c.deferred, 4u);
  EXPECT_EQ(r.known(), 6u);
}

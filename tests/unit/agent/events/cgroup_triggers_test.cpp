// The agent's v2 usage poll on a fake cgroup2 tree: v2 has no usage-threshold
// notification, so memory.current is polled against ThresholdPercent (more
// often the closer it is) and each upward crossing is a "threshold" trigger.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <spdlog/logger.h>

#include "agent/events/cgroup_triggers.h"
#include "temp_tree.h"

using namespace oomsnap;
using namespace std::chrono_literals;

namespace {

struct Seen {
  std::string memcg;
  Trigger trigger;
};

// Runs the loop until `n` triggers were seen or `limit` passed.
void run_until(boost::asio::io_context& io, const std::vector<Seen>& seen, size_t n, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (seen.size() < n && std::chrono::steady_clock::now() < end) {
    io.restart();
    io.run_for(20ms);
  }
}

// A fake v2 memcg: its memory.max and memory.current.
void memcg(const oomsnap_test::TempTree& t, const std::string& name, const char* max, const char* current) {
  t.write(name + "/memory.max", std::string(max) + "\n");
  t.write(name + "/memory.current", std::string(current) + "\n");
}

}  // namespace

TEST(CgroupTriggersV2, UsagePollReportsEachUpwardCrossing) {
  oomsnap_test::TempTree t;
  memcg(t, "box", "1000000", "500000");
  t.write("box/memory.high", "max\n");
  memcg(t, "free", "max", "999999999");  // unlimited: never polled against anything
  boost::asio::io_context io;
  std::vector<Seen> seen;
  CgroupTriggerOptions o;
  o.threshold_percent = 90;
  o.memory_events = false;
  o.psi = false;
  CgroupTriggers ct(io, CgroupFs{2, t.root}, o, [&](const std::string& m, Trigger tr) { seen.push_back({m, tr}); },
                    std::make_shared<spdlog::logger>("test"));
  EXPECT_TRUE(ct.rescan().empty());  // nothing known yet, nothing removed
  run_until(io, seen, 1, 300ms);
  EXPECT_TRUE(seen.empty());  // 50 %: below

  t.write("box/memory.current", "950000\n");
  run_until(io, seen, 1, 3000ms);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].memcg, "/box");
  EXPECT_EQ(seen[0].trigger.type, "threshold");
  EXPECT_EQ(seen[0].trigger.counters["threshold_bytes"], 900000);
  EXPECT_EQ(seen[0].trigger.counters["usage_bytes"], 950000);

  run_until(io, seen, 2, 300ms);
  EXPECT_EQ(seen.size(), 1u);  // still above: no repeat
  t.write("box/memory.current", "100000\n");
  run_until(io, seen, 2, 300ms);
  t.write("box/memory.current", "990000\n");
  run_until(io, seen, 2, 3000ms);
  ASSERT_EQ(seen.size(), 2u);  // the next upward crossing
  EXPECT_EQ(seen[1].trigger.counters["usage_bytes"], 990000);
}

TEST(CgroupTriggersV2, BlacklistedThresholdDoesNotPoll) {
  oomsnap_test::TempTree t;
  memcg(t, "box", "1000", "999");
  boost::asio::io_context io;
  std::vector<Seen> seen;
  CgroupTriggerOptions o;
  o.threshold = false;
  o.memory_events = false;
  o.psi = false;
  CgroupTriggers ct(io, CgroupFs{2, t.root}, o, [&](const std::string& m, Trigger tr) { seen.push_back({m, tr}); },
                    std::make_shared<spdlog::logger>("test"));
  EXPECT_TRUE(ct.rescan().empty());  // nothing known yet, nothing removed
  run_until(io, seen, 1, 300ms);
  EXPECT_TRUE(seen.empty());
}

// A removed cgroup is returned by the one rescan that finds it gone, and by
// no later one: the agent's every rescan must act on what it returns (one
// that dropped it lost a container's owed records).
TEST(CgroupTriggersV2, ARemovalIsReportedByOneRescanOnly) {
  oomsnap_test::TempTree t;
  memcg(t, "box", "max", "1000");
  memcg(t, "stays", "max", "1000");
  boost::asio::io_context io;
  CgroupTriggerOptions o;
  o.threshold = o.memory_events = o.psi = false;
  CgroupTriggers ct(io, CgroupFs{2, t.root}, o, [](const std::string&, Trigger) {},
                    std::make_shared<spdlog::logger>("test"));
  EXPECT_TRUE(ct.rescan().empty());
  std::filesystem::remove_all(t.root + "/box");
  const std::vector<std::string> gone = ct.rescan();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_NE(gone[0].find("box"), std::string::npos) << gone[0];
  EXPECT_TRUE(ct.rescan().empty());
}

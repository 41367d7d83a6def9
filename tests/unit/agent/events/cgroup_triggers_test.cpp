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

// The predictive trigger from the usage poll, on both cgroup versions (v1's
// threshold is an eventfd, so there the poll runs for the forecast alone):
// a container climbing 500 MiB/s toward 1 GiB with a 0.3 s capture expected
// gets one "forecast" trigger when its limit is ~0.5 s away, well before the
// 90 % threshold; one parked at 80 % gets none, nor a climb with "forecast"
// blacklisted.
namespace {

constexpr uint64_t kMiB = 1 << 20;

struct Climbing {
  oomsnap_test::TempTree t;
  int version;
  explicit Climbing(int v) : version(v) { set(512 * kMiB); }
  void set(uint64_t usage) {
    t.write(version == 1 ? "box/memory.limit_in_bytes" : "box/memory.max", std::to_string(1024 * kMiB) + "\n");
    t.write(version == 1 ? "box/memory.usage_in_bytes" : "box/memory.current", std::to_string(usage) + "\n");
  }
  // Runs the loop for `span`, usage = f(elapsed seconds) written every 5 ms.
  template <typename F>
  void run(boost::asio::io_context& io, std::chrono::milliseconds span, F usage_at) {
    const auto start = std::chrono::steady_clock::now();
    for (auto now = start; now - start < span; now = std::chrono::steady_clock::now()) {
      set(usage_at(std::chrono::duration<double>(now - start).count()));
      io.restart();
      io.run_for(5ms);
    }
  }
};

CgroupTriggerOptions forecast_only() {
  CgroupTriggerOptions o;
  o.threshold = o.memory_events = o.psi = false;
  o.capture_seconds = [](const std::string&, uint64_t) { return 0.3; };
  return o;
}

}  // namespace

class CgroupTriggersForecast : public ::testing::TestWithParam<int> {};

TEST_P(CgroupTriggersForecast, AFastClimbIsForecastOnceBeforeTheThreshold) {
  Climbing box(GetParam());
  boost::asio::io_context io;
  std::vector<Seen> seen;
  CgroupTriggers ct(io, CgroupFs{GetParam(), box.t.root}, forecast_only(),
                    [&](const std::string& m, Trigger tr) { seen.push_back({m, tr}); },
                    std::make_shared<spdlog::logger>("test"));
  EXPECT_TRUE(ct.rescan().empty());
  EXPECT_NE(ct.describe().find("usage polled for the forecast trigger (floor 50%)"), std::string::npos);
  box.run(io, 300ms, [](double) { return 512 * kMiB; });
  ASSERT_TRUE(seen.empty()) << seen[0].trigger.type;
  // 500 MiB/s from 50 %: at the limit after 1.02 s.
  box.run(io, 1100ms, [](double s) { return std::min<uint64_t>(1024 * kMiB, 512 * kMiB + static_cast<uint64_t>(s * 500 * kMiB)); });
  ASSERT_EQ(seen.size(), 1u);
  const Trigger& tr = seen[0].trigger;
  EXPECT_EQ(seen[0].memcg, "/box");
  EXPECT_EQ(tr.type, "forecast");
  const uint64_t usage = tr.counters["usage_bytes"];
  EXPECT_GE(usage, 600 * kMiB) << tr.counters.dump();
  EXPECT_LT(usage, 922 * kMiB) << tr.counters.dump();  // before the 90 % threshold
  EXPECT_EQ(tr.counters["limit_bytes"], 1024 * kMiB);
  EXPECT_NEAR(tr.counters["bytes_per_second"].get<double>(), 500.0 * kMiB, 200.0 * kMiB) << tr.counters.dump();
  EXPECT_LE(tr.counters["seconds_to_limit"].get<double>(), tr.counters["needed_seconds"].get<double>());
  EXPECT_NEAR(tr.counters["needed_seconds"].get<double>(), 0.5, 1e-9);
  EXPECT_NEAR(tr.counters["expected_capture_seconds"].get<double>(), 0.3, 1e-9);
}

TEST_P(CgroupTriggersForecast, ParkedNearTheLimitOrBlacklistedIsNeverForecast) {
  Climbing parked(GetParam()), blacklisted(GetParam());
  boost::asio::io_context io;
  std::vector<Seen> seen;
  CgroupTriggers a(io, CgroupFs{GetParam(), parked.t.root}, forecast_only(),
                   [&](const std::string& m, Trigger tr) { seen.push_back({m, tr}); },
                   std::make_shared<spdlog::logger>("test"));
  CgroupTriggerOptions off = forecast_only();
  off.forecast = false;
  CgroupTriggers b(io, CgroupFs{GetParam(), blacklisted.t.root}, off,
                   [&](const std::string& m, Trigger tr) { seen.push_back({m, tr}); },
                   std::make_shared<spdlog::logger>("test"));
  EXPECT_TRUE(a.rescan().empty());
  EXPECT_TRUE(b.rescan().empty());
  EXPECT_EQ(b.describe().find("forecast"), std::string::npos);
  int i = 0;
  parked.run(io, 1500ms, [&](double) { return 820 * kMiB + (++i % 7) * kMiB; });  // 80 %, with noise
  blacklisted.run(io, 1100ms, [](double s) { return std::min<uint64_t>(1024 * kMiB, 512 * kMiB + static_cast<uint64_t>(s * 500 * kMiB)); });
  EXPECT_TRUE(seen.empty()) << seen[0].memcg << " " << seen[0].trigger.counters.dump();
}

INSTANTIATE_TEST_SUITE_P(V1AndV2, CgroupTriggersForecast, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) { return "V" + std::to_string(i.param); });

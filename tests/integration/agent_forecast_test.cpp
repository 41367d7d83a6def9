// The forecast trigger end to end (issue #25 item 2): real memory cgroups
// below the test's own, real Go fixtures climbing in them, real OOM kills.
// With ThresholdPercent at 99 the fixed threshold leaves a 200 MB/s leak
// ~25 ms before its kill; the forecast sees the climb and collects it while
// the limit is still about half a second away. A climb that stops well short
// of the limit is never forecast.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "agent_process.h"

using namespace std::chrono_literals;
using nlohmann::json;
using namespace oomsnap_test;

namespace {

// A 512 MiB container below a scope of its own, and the agent watching the
// scope with ThresholdPercent 99 (the fixed threshold too late for a fast
// climb) plus `extra` config.
struct ForecastBox {
  struct RemovedDir {  // removed after the agent (declared before it) has stopped
    std::string path = temp_dir();
    ~RemovedDir() { std::filesystem::remove_all(path); }
  };
  TestMemcg scope{"scope"};
  TestMemcg box{scope, "box", 512 * kMiB};
  RemovedDir dir;
  AgentProcess agent;
  explicit ForecastBox(const std::string& extra)
      : agent(dir.path, config_for(scope, dir.path, extra + "\nThresholdPercent = 99")) {}
  // The record of a Go fixture leaking `mb_per_s` into the box until killed.
  json record_of_a_leak(double mb_per_s) {
    auto fixture = leaker(box, mb_per_s);
    return agent.next_record(90s);
  }
};

}  // namespace

TEST(AgentForecast, AFastClimbIsCollectedByTheForecastLongBeforeTheThreshold) {
  require_fixture();
  ForecastBox f("OomKillWindow = 60\nRunTracingToolTimeout = 5");
  AgentProcess& agent = f.agent;
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_NE(agent.log().find("usage polled for the forecast trigger (floor 50%)"), std::string::npos) << agent.log();

  json rec = f.record_of_a_leak(200);
  ASSERT_FALSE(rec.is_null()) << "no record; agent log:\n" << agent.log();
  const json& t = rec["trigger"];
  EXPECT_EQ(t["type"], "forecast") << rec.dump(2);
  EXPECT_EQ(t["rule"], "forecast") << t.dump(2);
  EXPECT_EQ(t["source"], "poll: at the current rate the limit is nearer than a capture's time");
  // What the poll saw: a climb near 200 MB/s, the limit within the expected
  // capture time (nothing learned yet: 0.1 s + 0.35 s/GiB) plus the 0.2 s margin.
  const json& c = t["counters"];
  // (The leak asked 200 MB/s; a loaded machine gets less out of the fixture.)
  EXPECT_GT(c["bytes_per_second"].get<double>(), 20e6) << c.dump(2);
  EXPECT_LT(c["bytes_per_second"].get<double>(), 300e6) << c.dump(2);
  EXPECT_NEAR(c["seconds_to_limit"].get<double>() * c["bytes_per_second"].get<double>(),
              static_cast<double>(512 * kMiB - c["usage_bytes"].get<uint64_t>()), 512.0 * kMiB / 100) << c.dump(2);
  EXPECT_GT(c["seconds_to_limit"].get<double>(), 0.0) << c.dump(2);
  EXPECT_LE(c["seconds_to_limit"].get<double>(), c["needed_seconds"].get<double>()) << c.dump(2);
  EXPECT_NEAR(c["expected_capture_seconds"].get<double>(), 0.1 + 0.35 * c["usage_bytes"].get<double>() / (1 << 30), 1e-6);
  EXPECT_EQ(t["seconds_to_limit"], c["seconds_to_limit"]);
  // Decided well below the 99 % threshold, with a complete snapshot of the leak.
  EXPECT_LT(rec["container"]["usage_bytes"].get<uint64_t>(), 512 * kMiB * 95 / 100) << rec["container"].dump(2);
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  const json& snap = rec["tracer_data"]["snapshot"];
  EXPECT_EQ(snap["status"], "complete") << snap.dump(2);
  ASSERT_FALSE(snap["entries"].empty());
  EXPECT_EQ(snap["entries"][0]["name"], "main.leakForever") << snap.dump(2);
  // And it was before the kill, with time to spare.
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["matches_victim"], true);
  EXPECT_GT(rec["oom_kill"]["lead_ms"].get<double>(), 100.0) << rec["oom_kill"].dump(2);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

// The expected capture time is learned: after a container's first collection,
// its next forecast expects what that one took (from the decision to the
// snapshot, BatchWindow included), scaled by usage, instead of the default
// 0.1 s + 0.35 s/GiB.
TEST(AgentForecast, TheNextForecastExpectsWhatTheLastCaptureTook) {
  require_fixture();
  ForecastBox f("OomKillWindow = 5\nIntervalTracing = 0\nRunTracingToolTimeout = 5");
  AgentProcess& agent = f.agent;
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const json first = f.record_of_a_leak(200);
  ASSERT_FALSE(first.is_null()) << agent.log();
  ASSERT_EQ(first["trigger"]["type"], "forecast") << first.dump(2);
  const json& c1 = first["trigger"]["counters"];
  EXPECT_NEAR(c1["expected_capture_seconds"].get<double>(), 0.1 + 0.35 * c1["usage_bytes"].get<double>() / (1 << 30),
              1e-6);
  const json& tl = first["timeline"];
  const double took = static_cast<double>(tl["snapshot_complete_ns"].get<uint64_t>() - tl["decided_ns"].get<uint64_t>()) / 1e9 +
                      0.002;  // BatchWindow
  const double usage1 = first["container"]["usage_bytes"];
  const json second = f.record_of_a_leak(200);
  ASSERT_FALSE(second.is_null()) << agent.log();
  ASSERT_EQ(second["trigger"]["type"], "forecast") << second.dump(2);
  const json& c2 = second["trigger"]["counters"];
  const double usage2 = c2["usage_bytes"];
  const double expected = std::max(0.02, took) * std::max(1.0, usage2 / usage1);
  EXPECT_NEAR(c2["expected_capture_seconds"].get<double>(), expected, 1e-6) << c2.dump(2) << "\nfirst took " << took;
  EXPECT_LT(c2["expected_capture_seconds"].get<double>(), c1["expected_capture_seconds"].get<double>()) << c2.dump(2);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

// 100 MB/s up to 300 MB in a 512 MiB box, then parked: at 59 % the limit is
// seconds away at that rate, and once parked there is no climb at all.
TEST(AgentForecast, AClimbThatStopsShortOfTheLimitIsNotForecast) {
  require_fixture();
  ForecastBox f("");
  AgentProcess& agent = f.agent;
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto fixture = leaker(f.box, 100, 300);
  json rec = agent.next_record(8s);
  EXPECT_TRUE(rec.is_null()) << rec.dump(2);
  EXPECT_GE(usage_of(f.box), 250 * kMiB);  // it did climb
  EXPECT_EQ(agent.log().find("forecast ("), std::string::npos) << agent.log();
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

// `oomsnap watch` end to end on this machine: real memory cgroups (v1 here)
// below the test's own memcg, real Go fixtures leaking into them, real OOM
// kills, the real BPF programs. The agent is scoped to one parent cgroup per
// test so nothing else on the machine reaches it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent_process.h"
#include "kernel_oom_report_lock.h"
#include "record_schema.h"

using namespace std::chrono_literals;
using nlohmann::json;
using namespace oomsnap_test;


// The headline: a Go program leaks in a 256 MiB container; the agent takes
// its heap snapshot on a kernel trigger before the OOM killer strikes, and
// the record ties the kill to the snapshot.
TEST(AgentEndToEnd, RealOomKillFollowsSnapshotOfLeakingGoProgram) {
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 256 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 5"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  auto fixture = leaker(box, 25);
  const pid_t victim = fixture->pid();
  json rec = agent.next_record(90s);
  ASSERT_FALSE(rec.is_null()) << "no record; agent log:\n" << agent.log();

  // The trigger came from the kernel: a v1 usage-threshold eventfd, the
  // threshold kept in BPF or the BPF memcg reclaim tracepoint.
  const std::string type = rec["trigger"]["type"];
  EXPECT_TRUE(type == "threshold" || type == "memcg_pressure") << rec.dump(2);
  const bool from_bpf = rec["trigger"]["source"].get<std::string>().rfind("bpf ", 0) == 0;
  EXPECT_EQ(rec["trigger"]["timestamp"], from_bpf ? "bpf_event" : "notification_read");
  EXPECT_GT(rec["trigger"]["kernel_ts_ns"].get<uint64_t>(), 0u);
  EXPECT_EQ(rec["container"]["cgroup_path"], box.rel_path());
  EXPECT_EQ(rec["container"]["cgroup_inode"], box.inode());
  EXPECT_EQ(rec["container"]["limit_bytes"], 256 * kMiB);
  EXPECT_GE(rec["container"]["usage_bytes"].get<uint64_t>(), 256 * kMiB * 90 / 100);
  EXPECT_EQ(rec["victim_pid"], victim);
  EXPECT_EQ(rec["comm"], "heapfixture");
  EXPECT_GT(rec["score"].get<int64_t>(), 0);
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  // Where the charge was as the capture started: the leak is anonymous memory.
  const json& stat = rec["container"]["memory_stat"];
  EXPECT_GE(stat.value("anon", uint64_t{0}), rec["container"]["usage_bytes"].get<uint64_t>() / 2) << stat.dump(2);
  for (const char* kind : {"file", "shmem", "kernel", "active_anon", "inactive_anon"})
    EXPECT_TRUE(stat.contains(kind)) << kind << "\n" << stat.dump(2);
  // The container's processes as the kernel's OOM report lists them.
  ASSERT_EQ(rec["container"]["tasks_total"], 1) << rec["container"].dump(2);
  EXPECT_EQ(rec["container"]["tasks"][0]["pid"], victim);
  EXPECT_GE(rec["container"]["tasks"][0]["rss_bytes"].get<uint64_t>(), stat.value("anon", uint64_t{0}) / 2);
  EXPECT_EQ(rec["container"]["tasks"][0]["oom_score_adj"], 0);

  // The snapshot: complete, the leaking function on top.
  const json& snap = rec["tracer_data"]["snapshot"];
  EXPECT_EQ(rec["tracer_data"]["language"], "go");
  EXPECT_EQ(snap["status"], "complete") << snap.dump(2);
  ASSERT_FALSE(snap["entries"].empty());
  EXPECT_EQ(snap["entries"][0]["name"], "main.leakForever") << snap.dump(2);

  // The kill that followed, and how much earlier the evidence was safe.
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["pid"], victim);
  EXPECT_EQ(rec["oom_kill"]["matches_victim"], true);
  EXPECT_GT(rec["oom_kill"]["lead_ms"].get<double>(), 0.0);
  // memory.stat again as the kill was taken in (the victim's pages may be
  // on their way out by then, so only that it was read).
  EXPECT_TRUE(rec["oom_kill"]["memory_stat"].contains("anon")) << rec["oom_kill"].dump(2);
  ASSERT_TRUE(rec.contains("exit"));
  EXPECT_EQ(rec["exit"]["signal"], SIGKILL);

  // Timeline in kernel-clock order.
  const json& tl = rec["timeline"];
  EXPECT_LE(tl["trigger_ns"].get<uint64_t>(), tl["decided_ns"].get<uint64_t>());
  EXPECT_LE(tl["decided_ns"].get<uint64_t>(), tl["collection_start_ns"].get<uint64_t>());
  EXPECT_LT(tl["collection_start_ns"].get<uint64_t>(), tl["snapshot_complete_ns"].get<uint64_t>());
  EXPECT_LT(tl["snapshot_complete_ns"].get<uint64_t>(), tl["oom_kill_ns"].get<uint64_t>());
  EXPECT_LE(tl["oom_kill_ns"].get<uint64_t>(), tl["exit_ns"].get<uint64_t>());
  // Every trigger seen for the container is in the record, the first one first;
  // the reclaim at the limit comes after the threshold crossing.
  ASSERT_FALSE(rec["triggers_seen"].empty());
  EXPECT_EQ(rec["triggers_seen"][0]["type"], type);
  EXPECT_EQ(rec["triggers_seen"][0]["kernel_ts_ns"], rec["trigger"]["kernel_ts_ns"]);
  bool reclaim_seen = false;
  for (const auto& s : rec["triggers_seen"]) reclaim_seen |= s["type"] == "memcg_pressure";
  EXPECT_TRUE(reclaim_seen) << rec["triggers_seen"].dump();
  EXPECT_EQ(rec["agent"]["bpf_ring_drops"], 0);
  EXPECT_FALSE(rec["node"].get<std::string>().empty());
  EXPECT_EQ(rec["time"].get<std::string>().size(), 24u);  // 2026-11-29T14:21:51.123Z

  // The LocalFile sink holds the same line.
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::string file = oomsnap_test::slurp(dir + "/records/oomsnap.jsonl");
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(json::parse(file.substr(0, file.find('\n'))), rec);
  std::filesystem::remove_all(dir);
}

// The usage threshold kept in BPF: a Go program climbing through 90 % of its
// container's limit is seen by the kernel-side check (rss_stat) as it
// crosses, beside the v1 eventfd, and the record's timeline names both.
TEST(AgentEndToEnd, UsageThresholdIsSeenInTheKernelAsTheContainerCrossesIt) {
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 256 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 2\nRunTracingToolTimeout = 5"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_NE(agent.log().find("usage thresholds: also checked in the kernel"), std::string::npos) << agent.log();
  auto fixture = leaker(box, 50, 240);  // holds at 240 MiB: no kill
  json rec = agent.next_record(60s);
  ASSERT_FALSE(rec.is_null()) << "no record; agent log:\n" << agent.log();
  EXPECT_EQ(rec["container"]["cgroup_path"], box.rel_path());
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  const std::string bpf_source = "bpf raw_tp: rss_stat: usage at or above the threshold";
  bool in_kernel = false;
  for (const auto& s : rec["triggers_seen"])
    in_kernel |= s["type"] == "threshold" && s.value("source", "") == bpf_source;
  EXPECT_TRUE(in_kernel) << rec["triggers_seen"].dump(2);
  if (rec["trigger"]["source"] == bpf_source) {
    EXPECT_EQ(rec["trigger"]["timestamp"], "bpf_event");
    EXPECT_EQ(rec["trigger"]["pid"], fixture->pid()) << "the charging process";
    // The threshold as the kernel compares it: in whole pages, rounded up.
    EXPECT_EQ(rec["trigger"]["counters"]["threshold_bytes"], (256 * kMiB * 90 / 100 + 4095) / 4096 * 4096);
    EXPECT_GE(rec["trigger"]["counters"]["usage_bytes"].get<uint64_t>(), 256 * kMiB * 90 / 100);
  }
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

// The same record for a CPython victim: a Python program leaking Leak
// instances (each holding a bytes payload) in a 256 MiB container; its type
// histogram is taken before the kill.
TEST(AgentEndToEnd, RealOomKillFollowsSnapshotOfLeakingPythonProgram) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 256 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 5"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  Process py({"/usr/bin/python3.11", std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/python/heapfixture.py",
              "--with-dict", "0", "--with-slots", "0", "--inner", "0", "--dicts", "0", "--lists", "0", "--blobs", "0",
              "--dict-blobs", "0", "--attr-blobs", "0", "--leak-mb-per-s", "25"},
             {}, box.dir());
  ASSERT_FALSE(py.read_line(30s).empty());
  json rec = agent.next_record(90s);
  ASSERT_FALSE(rec.is_null()) << "no record; agent log:\n" << agent.log();
  EXPECT_EQ(rec["victim_pid"], py.pid());
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  EXPECT_EQ(rec["tracer_data"]["language"], "python");
  const json& snap = rec["tracer_data"]["snapshot"];
  EXPECT_EQ(snap["status"], "complete") << snap.dump(2);
  EXPECT_EQ(snap["runtime_version"].get<std::string>().rfind("cpython3.11.", 0), 0u);
  ASSERT_FALSE(snap["entries"].empty());
  EXPECT_EQ(snap["entries"][0]["name"], "bytes") << snap.dump(2);  // the leaked payloads
  uint64_t leak_objects = 0;
  for (const auto& e : snap["entries"])
    if (e["name"] == "__main__.Leak") leak_objects = e["objects"];
  EXPECT_GT(leak_objects, 100u) << snap.dump(2);
  EXPECT_GE(snap["entries"][0]["bytes"].get<uint64_t>(), 150 * kMiB) << snap.dump(2);
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["matches_victim"], true);
  EXPECT_GT(rec["oom_kill"]["lead_ms"].get<double>(), 0.0);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

// And for a JVM: a Java program leaking byte[]-holding objects in a 256 MiB
// container (its -Xmx above the limit, so the kernel, not the JVM, ends it);
// its G1 class histogram is taken, without pausing it, before the kill.
TEST(AgentEndToEnd, RealOomKillFollowsSnapshotOfLeakingJavaProgram) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 256 * kMiB);
  const std::string dir = temp_dir();
  // G1 commits and touches memory in bursts (eden, survivor copies), so the
  // last 10 % go by in a few hundred ms: trigger earlier, as one would for JVMs.
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 5\nThresholdPercent = 60"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  Process java({"/usr/lib/jvm/java-17-openjdk-amd64/bin/java", "-XX:+UseG1GC", "-Xms64m", "-Xmx1g", "-XX:-UsePerfData",
                "-cp", std::string(OOMSNAP_FIXTURES) + "/java", "HeapFixture", "--markers", "1000", "--nodes", "1000",
                "--int-arrays", "0", "--long-arrays", "0", "--object-arrays", "0", "--humongous", "0", "--strings",
                "0", "--leak-mb-per-s", "10"},
               {}, box.dir());
  ASSERT_FALSE(java.read_line(60s).empty());
  json rec = agent.next_record(90s);
  ASSERT_FALSE(rec.is_null()) << "no record; agent log:\n" << agent.log();
  EXPECT_EQ(rec["victim_pid"], java.pid());
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  EXPECT_EQ(rec["tracer_data"]["language"], "java");
  const json& snap = rec["tracer_data"]["snapshot"];
  // A young collection may overlap the walk (it is then partial, saying so).
  EXPECT_TRUE(snap["status"] == "complete" || snap["status"] == "partial") << snap.dump(2);
  ASSERT_FALSE(snap["entries"].empty());
  // The leaked payloads on top (the 16-byte Leak holders are below the record's top 10).
  EXPECT_EQ(snap["entries"][0]["name"], "byte[]") << snap.dump(2);
  EXPECT_GT(snap["entries"][0]["objects"].get<uint64_t>(), 100u) << snap.dump(2);
  EXPECT_GE(snap["entries"][0]["bytes"].get<uint64_t>(), 50 * kMiB) << snap.dump(2);
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["matches_victim"], true);
  EXPECT_GT(rec["oom_kill"]["lead_ms"].get<double>(), 0.0);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

// Two containers over the threshold at once, one without a limit: both are
// collected, the higher ratio first, without waiting for each other (the
// interval is per container); the unlimited one never.
TEST(AgentEndToEnd, HigherRatioFirstBothCollectedUnlimitedNeverCandidate) {
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg a(scope, "a", 220 * kMiB);  // ~204 MiB used: ~93%
  TestMemcg b(scope, "b", 212 * kMiB);  // ~204 MiB used: ~96%
  TestMemcg unlimited(scope, "free");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir,
                                     "BatchWindow = 5\nOomKillWindow = 1\n[triggers]\nBlacklist = "
                                     "[\"process_exit\"]"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  // Both fill up within a second (a loaded machine may take longer: the
  // batch window is 5 s), so one decision sees both.
  auto fa = leaker(a, 400, 200);
  auto fb = leaker(b, 400, 200);
  auto fc = leaker(unlimited, 400, 200);

  json first = agent.next_record(30s);
  ASSERT_FALSE(first.is_null()) << agent.log();
  json second = agent.next_record(30s);
  ASSERT_FALSE(second.is_null()) << agent.log();
  // Both records close at the end of the same OomKillWindow, in either order:
  // the order of collection is what the ratio decides.
  if (first["timeline"]["collection_start_ns"].get<uint64_t>() > second["timeline"]["collection_start_ns"].get<uint64_t>())
    std::swap(first, second);
  EXPECT_EQ(first["container"]["cgroup_path"], b.rel_path()) << first.dump(2) << "\n" << agent.log();
  EXPECT_EQ(second["container"]["cgroup_path"], a.rel_path()) << second.dump(2);
  EXPECT_EQ(first["victim_pid"], fb->pid());
  EXPECT_EQ(second["victim_pid"], fa->pid());
  EXPECT_EQ(first["collection"]["status"], "collected");
  EXPECT_EQ(second["collection"]["status"], "collected");
  auto ratio = [](const json& r) {
    return r["container"]["usage_bytes"].get<double>() / r["container"]["limit_bytes"].get<double>();
  };
  EXPECT_GT(ratio(first), ratio(second));
  EXPECT_GE(ratio(second), 0.90);
  // No node-wide cooldown: both in one decision (before: the second only
  // IntervalTracing, 300 s by default, after the first).
  EXPECT_EQ(second["timeline"]["decided_ns"], first["timeline"]["decided_ns"]);
  // Neither is collected again within its own interval (300 s), and the
  // unlimited container holds as much memory but is never a candidate.
  EXPECT_GE(usage_of(unlimited), 200 * kMiB);
  EXPECT_TRUE(agent.next_record(3s).is_null());
  EXPECT_EQ(agent.log().find(unlimited.rel_path() + ":"), std::string::npos) << agent.log();
  EXPECT_EQ(agent.log().find("collecting in " + unlimited.rel_path()), std::string::npos);
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// The node budget, live: 10 containers cross the threshold within a second
// with NodeMaxCapturesPerMinute = 3. One decision collects the 3 closest to
// their limits; the other 7 are deferred by the budget (logged, no record),
// and re-checked when it frees: 60 s after the first capture the closest of
// them is collected.
TEST(AgentEndToEnd, NodeBudgetCollectsTheClosestAndDefersTheRest) {
  require_fixture();
  TestMemcg scope("scope");
  std::vector<std::unique_ptr<TestMemcg>> boxes;
  // ~204 MiB used in each: 97% down to 83% of the limits, 4 MiB (~2%) apart so
  // that the Go runtimes returning a little memory meanwhile cannot reorder them.
  auto limit = [](size_t i) { return (210 + 4 * static_cast<uint64_t>(i)) * kMiB; };
  for (size_t i = 0; i < 10; ++i) boxes.push_back(std::make_unique<TestMemcg>(scope, "c" + std::to_string(i), limit(i)));
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir,
                                     "ThresholdPercent = 80\nNodeMaxCapturesPerMinute = 3\nBatchWindow = 5\nOomKillWindow = 1\n"
                                     "[triggers]\nBlacklist = [\"process_exit\"]"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  // In reverse order of closeness, so arrival order does not pick the winners.
  std::vector<std::unique_ptr<Process>> leakers(10);
  for (int i = 9; i >= 0; --i) leakers[static_cast<size_t>(i)] = leaker(*boxes[static_cast<size_t>(i)], 400, 200);

  std::vector<json> first;
  for (int i = 0; i < 3; ++i) {
    first.push_back(agent.next_record(30s));
    ASSERT_FALSE(first.back().is_null()) << agent.log();
  }
  EXPECT_TRUE(agent.next_record(3s).is_null()) << "more than the budget collected";
  // The containers by closeness to their limit, as the leakers hold still now.
  auto closest_first = [&](const std::set<std::string>& skip) {
    std::vector<std::pair<double, std::string>> v;
    for (size_t i = 0; i < boxes.size(); ++i) {
      if (skip.count(boxes[i]->rel_path())) continue;
      const double ratio = static_cast<double>(usage_of(*boxes[i])) / static_cast<double>(limit(i));
      EXPECT_GE(ratio, 0.80) << boxes[i]->rel_path() << " is not a candidate";
      v.emplace_back(ratio, boxes[i]->rel_path());
    }
    std::sort(v.rbegin(), v.rend());
    return v;
  };
  const auto by_ratio = closest_first({});
  std::set<std::string> collected, closest;
  for (const auto& r : first) {
    collected.insert(r["container"]["cgroup_path"].get<std::string>());
    EXPECT_EQ(r["collection"]["status"], "collected") << r.dump(2);
    EXPECT_EQ(r["timeline"]["decided_ns"], first[0]["timeline"]["decided_ns"]) << "one decision";
  }
  for (size_t i = 0; i < 3; ++i) closest.insert(by_ratio[i].second);
  EXPECT_EQ(collected, closest) << agent.log();
  const std::string log = agent.log();
  for (size_t i = 3; i < by_ratio.size(); ++i)
    EXPECT_NE(log.find("not collecting " + by_ratio[i].second + ": the node's capture budget"), std::string::npos)
        << by_ratio[i].second << "\n" << log;

  // Re-checked when the budget frees: the three slots free within a few ms
  // of each other (the first three captures were that close), so up to three
  // of the deferred are collected then, the closest first (by their ratios
  // now: the leakers' runtimes may have returned some memory). Their records
  // are written as each one's OomKillWindow ends, in any order: the order of
  // collection is what closeness decides.
  std::vector<json> again;
  again.push_back(agent.next_record(75s));
  ASSERT_FALSE(again.back().is_null()) << agent.log();
  for (json r; again.size() < 3 && !(r = agent.next_record(4s)).is_null();) again.push_back(r);
  const auto deferred = closest_first(collected);
  ASSERT_EQ(deferred.size(), 7u);
  std::sort(again.begin(), again.end(), [](const json& a, const json& b) {
    return a["timeline"]["collection_start_ns"].get<uint64_t>() < b["timeline"]["collection_start_ns"].get<uint64_t>();
  });
  for (size_t i = 0; i < again.size(); ++i) {
    const json& r = again[i];
    EXPECT_EQ(r["container"]["cgroup_path"], deferred[i].second) << "collected #" << i + 4 << "\n" << r.dump(2);
    EXPECT_EQ(r["collection"]["status"], "collected");
    const double later_s = static_cast<double>(r["timeline"]["decided_ns"].get<uint64_t>() -
                                               first[0]["timeline"]["decided_ns"].get<uint64_t>()) / 1e9;
    EXPECT_GE(later_s, 59.9) << "collected before the budget freed";
    EXPECT_LE(later_s, 65.0) << "not re-checked when the budget freed";
  }
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// Two containers running out of memory 15 s apart, the agent at its default
// interval (300 s): each is snapshotted before its own kill. (Before, the
// node-wide cooldown left the second without a snapshot.)
TEST(AgentEndToEnd, TwoContainersOomApartEachSnapshottedBeforeItsKill) {
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg first(scope, "first", 128 * kMiB);
  TestMemcg second(scope, "second", 128 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 5"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto check = [&](const json& rec, const TestMemcg& box, pid_t victim) {
    ASSERT_FALSE(rec.is_null()) << agent.log();
    EXPECT_EQ(rec["container"]["cgroup_path"], box.rel_path()) << rec.dump(2);
    EXPECT_EQ(rec["victim_pid"], victim) << rec.dump(2);
    EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
    ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
    EXPECT_EQ(rec["oom_kill"]["pid"], victim);
    EXPECT_TRUE(rec["oom_kill"]["matches_victim"].get<bool>());
    EXPECT_GT(rec["oom_kill"]["lead_ms"].get<double>(), 0.0) << rec.dump(2);
  };
  auto l1 = leaker(first, 25);
  json rec1 = agent.next_record(60s);
  check(rec1, first, l1->pid());
  std::this_thread::sleep_for(10s);  // the second runs out ~15 s after the first
  auto l2 = leaker(second, 25);
  json rec2 = agent.next_record(60s);
  check(rec2, second, l2->pid());
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// A container whose triggers keep firing for ~10 s before its kill, with a
// 1 s interval: one incident, every trigger of the episode on its timeline,
// not a new incident each second (before: 9 incidents in 5 s).
TEST(AgentEndToEnd, OneIncidentPerEpisodeWhileTriggersKeepFiring) {
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 192 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir,
                                     "IntervalTracing = 1\nOomKillWindow = 60\nRunTracingToolTimeout = 5\n"
                                     "ThresholdPercent = 75"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto fx = leaker(box, 6);  // 75% (144 MiB) to the limit in ~8 s
  json rec = agent.next_record(90s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["pid"], fx->pid());
  const uint64_t episode = rec["timeline"]["oom_kill_ns"].get<uint64_t>() - rec["timeline"]["decided_ns"].get<uint64_t>();
  EXPECT_GT(episode, 3'000'000'000ull) << "the kill came too soon to show an episode";
  EXPECT_GT(rec["triggers_seen"].size(), 2u) << rec.dump(2);
  EXPECT_TRUE(agent.next_record(3s).is_null()) << agent.log();
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// A second kill in a container whose snapshot went with its first kill, with
// no trigger before it (all but oom_kill blacklisted by a SIGHUP edit, as a
// kill too sudden for any trigger would be): the second record points at the
// first one's snapshot (before: "recorded without a kill", which that record
// was not).
TEST(AgentEndToEnd, ASecondKillPointsAtTheSnapshotThatWentWithTheFirst) {
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 128 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 30\nRunTracingToolTimeout = 5"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto first = leaker(box, 25);
  json rec = agent.next_record(60s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  ASSERT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  const uint64_t snapshot_incident = rec["incident_id"];
  std::ofstream(dir + "/agent.toml") << config_for(
      scope, dir,
      "OomKillWindow = 30\nRunTracingToolTimeout = 5\n[triggers]\nBlacklist = [\"memcg_pressure\", "
      "\"memory_events\", \"psi\", \"threshold\", \"forecast\", \"process_exit\"]");
  ::kill(agent.process().pid(), SIGHUP);
  ASSERT_TRUE(agent.wait_log("configuration reloaded", 10s)) << agent.log();
  Process filler({"/usr/bin/python3", "-c", "import time; x = bytearray(192 << 20); time.sleep(30)"}, {}, box.dir());
  json second = agent.next_record(30s);
  ASSERT_FALSE(second.is_null()) << agent.log();
  ASSERT_TRUE(second.contains("oom_kill")) << second.dump(2);
  EXPECT_EQ(second["oom_kill"]["pid"], filler.pid());
  const std::string reason = second["collection"].value("reason", "");
  EXPECT_NE(reason.find("its last snapshot (incident " + std::to_string(snapshot_incident)), std::string::npos)
      << second.dump(2);
  EXPECT_NE(reason.find("went with an earlier kill"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("without a kill"), std::string::npos) << reason;
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

// A process killed by a signal in a watched container is reported; this one
// runs with the classic-tracepoint attach mode to cover the fallback path.
TEST(AgentEndToEnd, ProcessExitBySignalIsReportedInTracepointMode) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 64 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, ""), {"--bpf-mode", "tracepoint"});
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_NE(agent.log().find("BPF attached: tracepoint"), std::string::npos) << agent.log();

  Process sleeper({"/bin/sleep", "60"}, {}, box.dir());
  ASSERT_TRUE(sleeper.wait_exec(10s));
  ::kill(sleeper.pid(), SIGTERM);
  json rec = agent.next_record(15s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["trigger"]["type"], "process_exit");
  EXPECT_EQ(rec["trigger"]["pid"], sleeper.pid());
  EXPECT_EQ(rec["exit"]["pid"], sleeper.pid());
  EXPECT_EQ(rec["exit"]["signal"], SIGTERM);
  EXPECT_EQ(rec["exit"]["signal_name"], "SIGTERM");
  EXPECT_EQ(rec["container"]["cgroup_path"], box.rel_path());
  EXPECT_EQ(rec["collection"]["status"], "not_attempted");
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// The process that filled the container is gone by the time the batch
// closes, but its memory is still charged (a tmpfs file): the incident is
// recorded with the reason, and the agent carries on.
TEST(AgentEndToEnd, VictimGoneBeforeCollectionGivesRecordWithReason) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 64 * kMiB);
  const std::string dir = temp_dir();
  const std::string shm = "/dev/shm/oomsnap-test-" + std::to_string(getpid());
  AgentProcess agent(dir, config_for(scope, dir, "BatchWindow = 1.5\nOomKillWindow = 0.5"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  // 58 MiB of tmpfs pages charged to the box, then the writer exits at once.
  Process writer({"/bin/dd", "if=/dev/zero", "of=" + shm, "bs=1M", "count=58"}, {}, box.dir());
  for (int i = 0; i < 200 && writer.try_wait() < 0; ++i) std::this_thread::sleep_for(50ms);
  json rec = agent.next_record(20s);
  unlink(shm.c_str());
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["container"]["cgroup_path"], box.rel_path());
  EXPECT_EQ(rec["collection"]["status"], "no_victim") << rec.dump(2);
  EXPECT_NE(rec["collection"]["reason"].get<std::string>().find("no processes"), std::string::npos);
  EXPECT_TRUE(rec["victim_pid"].is_null());
  EXPECT_FALSE(rec.contains("tracer_data"));
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

// A kill with no snapshot before it (every trigger but the kill itself
// blacklisted): the record carries the kernel's own OOM report and explains
// the container's charge from it, as the kernel saw it before the victim
// died. A python3 fills 64 MiB beside an idle sleep. The report is read from
// /dev/kmsg, or, where the agent has no such device (a pod; systemd's
// PrivateDevices), with syslog(2).
class KillWithoutSnapshot : public ::testing::TestWithParam<bool> {};

TEST_P(KillWithoutSnapshot, IsExplainedByTheKernelsOwnReport) {
  const bool via_syslog = GetParam();
  KernelOomReportLock report_lock;  // not inside a flood's ratelimit window
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 64 * kMiB);
  const std::string dir = temp_dir();
  const std::string config = config_for(
      scope, dir, "[triggers]\nBlacklist = [\"memcg_pressure\", \"memory_events\", \"psi\", \"threshold\", \"forecast\", \"process_exit\"]");
  std::unique_ptr<AgentProcess> agent =
      via_syslog ? std::make_unique<AgentProcess>(dir, config, std::vector<std::string>{},
                                                  std::vector<std::string>{"OOMSNAP_TEST_KMSG_PATH=/nonexistent/kmsg"},
                                                  std::vector<std::string>{}, kTestHooksBinary)
                 : std::make_unique<AgentProcess>(dir, config);
  ASSERT_TRUE(agent->wait_log("ready:", 30s)) << agent->log();
  ASSERT_NE(agent->log().find(via_syslog ? "kernel OOM reports: read from syslog(2) (cannot open /nonexistent/kmsg"
                                         : "kernel OOM reports: read from /dev/kmsg"),
            std::string::npos)
      << agent->log();
  Process sleeper({"/bin/sleep", "60"}, {}, box.dir());
  Process filler({"/usr/bin/python3", "-c", "import time; x = bytearray(96 << 20); time.sleep(30)"}, {}, box.dir());
  json rec = agent->next_record(30s);
  ASSERT_FALSE(rec.is_null()) << agent->log();
  EXPECT_EQ(rec["trigger"]["type"], "oom_kill") << rec.dump(2);
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["pid"], filler.pid());
  ASSERT_TRUE(rec["oom_kill"].contains("kernel_report")) << rec["oom_kill"].dump(2) << "\n" << agent->log();
  const json& k = rec["oom_kill"]["kernel_report"];
  EXPECT_EQ(k["constraint"], "CONSTRAINT_MEMCG");
  EXPECT_EQ(k["task_memcg"], box.rel_path());
  EXPECT_EQ(k["limit_bytes"], 64 * kMiB);
  EXPECT_GE(k["usage_bytes"].get<uint64_t>(), 60 * kMiB);
  ASSERT_EQ(k["tasks_total"], 2) << k.dump(2);
  EXPECT_EQ(k["tasks"][0]["pid"], filler.pid());  // the largest first
  EXPECT_EQ(k["tasks"][1]["pid"], sleeper.pid());
  EXPECT_GE(k["tasks"][0]["rss_anon_bytes"].get<uint64_t>(), 50 * kMiB);
  EXPECT_GE(k["memory_stat"]["anon"].get<uint64_t>(), 50 * kMiB) << k["memory_stat"].dump(2);
  // The charge, from that report: mostly the filler's anonymous pages.
  const json& x = rec["container"]["explained"];
  EXPECT_EQ(x["source"], "kernel_oom_report") << rec["container"].dump(2);
  EXPECT_EQ(x["usage_bytes"], k["usage_bytes"]);
  EXPECT_EQ(x["processes_by_rss"], 2);
  EXPECT_GE(x["kinds"]["anon"].get<uint64_t>(), 50 * kMiB) << x.dump(2);
  EXPECT_LE(x["unexplained_bytes"].get<uint64_t>(), x["usage_bytes"].get<uint64_t>() / 10) << x.dump(2);
  EXPECT_EQ(oomsnap_test::record_schema_errors(rec.dump()), "");
  std::printf("[ info ] kill without snapshot, from the kernel's report (%s): usage %.1f MiB, anon %.1f MiB, "
              "kernel %.1f MiB, unexplained %.2f MiB\n",
              via_syslog ? "syslog(2)" : "/dev/kmsg", x["usage_bytes"].get<double>() / kMiB,
              x["kinds"]["anon"].get<double>() / kMiB, x["kinds"].value("kernel", 0.0) / kMiB,
              x["unexplained_bytes"].get<double>() / kMiB);
  EXPECT_EQ(agent->stop(), 0) << agent->log();
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(AgentEndToEnd, KillWithoutSnapshot, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "syslog" : "kmsg"; });

namespace {
// `oomsnap watch --config path`: the first line it writes (stdout and stderr),
// and its wait status in status (-1 if it has not exited within 5 s).
std::string watch_first_line(const std::string& path, int& status) {
  Process p({"/bin/sh", "-c", std::string("exec \"$0\" watch --config \"$1\" 2>&1"), OOMSNAP_BINARY, path});
  std::string line = p.read_line(10s);
  status = -1;
  for (int i = 0; i < 100 && (status = p.try_wait()) < 0; ++i) std::this_thread::sleep_for(50ms);
  return line;
}
}  // namespace

TEST(AgentCli, BadConfigIsRejectedNamingTheKey) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/bad.toml") << "ThresholdPercent = 90\nIntervalTracin = 5\n";
  int st = -1;
  const std::string line = watch_first_line(dir + "/bad.toml", st);
  EXPECT_NE(line.find("'IntervalTracin' (line 2)"), std::string::npos) << line;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 2);
  std::filesystem::remove_all(dir);
}

// A config that its group or everyone can write (or that another user
// owns: tests/unit/agent/config_file_test.cpp) does not start the agent.
TEST(AgentCli, ConfigOthersCanWriteIsRefusedNamingPathAndMode) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/open.toml";
  std::ofstream(path) << "ThresholdPercent = 90\n";
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  int st = -1;
  const std::string line = watch_first_line(path, st);
  EXPECT_NE(line.find("refusing '" + path + "' (mode 0666"), std::string::npos) << line;
  EXPECT_NE(line.find("everyone can write it"), std::string::npos) << line;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 2);
  std::filesystem::remove_all(dir);
}

TEST(AgentCli, MissingPrivilegesGiveAClearErrorAndExitOne) {
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) not installed";
  // A copy the unprivileged user can execute, wherever the build lives.
  const std::string dir = temp_dir();
  chmod(dir.c_str(), 0755);
  const std::string bin = dir + "/oomsnap";
  std::filesystem::copy_file(OOMSNAP_BINARY, bin);
  chmod(bin.c_str(), 0755);
  std::ofstream(dir + "/ok.toml") << "[storage]\nPath = \"" << dir << "/records\"\n";
  chmod((dir + "/ok.toml").c_str(), 0644);
  Process p({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
             "--bounding-set=-all", "/bin/sh", "-c", "exec \"$0\" watch --config \"$1\" 2>&1", bin, dir + "/ok.toml"});
  std::string out;
  for (std::string l; !(l = p.read_line(10s)).empty();) out += l + "\n";
  int st = -1;
  for (int i = 0; i < 100 && (st = p.try_wait()) < 0; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(WIFEXITED(st)) << out;
  EXPECT_EQ(WEXITSTATUS(st), 1) << out;
  EXPECT_NE(out.find("cannot start"), std::string::npos) << out;
  EXPECT_NE(out.find("root"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// SIGHUP re-reads the file: a broken edit is refused (the agent keeps
// running with the old configuration), a good one is applied.
TEST(AgentCli, SighupReloadsConfigAndRefusesBadEdits) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "ThresholdPercent = 90"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  std::ofstream(dir + "/agent.toml") << "ThresholdPercent = 900\n";
  ::kill(agent.process().pid(), SIGHUP);
  ASSERT_TRUE(agent.wait_log("not reloaded", 10s)) << agent.log();
  EXPECT_NE(agent.log().find("'ThresholdPercent'"), std::string::npos);
  std::ofstream(dir + "/agent.toml") << config_for(scope, dir, "ThresholdPercent = 80");
  ::kill(agent.process().pid(), SIGHUP);
  ASSERT_TRUE(agent.wait_log("configuration reloaded", 10s)) << agent.log();
  EXPECT_LT(agent.process().try_wait(), 0);  // still running
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

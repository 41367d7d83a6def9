// The incident record's shape: the fields a log pipeline keys on, lead_ms
// only when a snapshot preceded the kill, exits decoded, absent data absent.
#include <gtest/gtest.h>
#include <signal.h>

#include "agent/incident/incident.h"
#include "agent/records/record_limit.h"
#include "record_schema.h"

using namespace oomsnap;

namespace {

RecordContext ctx() {
  RecordContext c;
  c.node = "node-1";
  c.clocks.mono_ns = 10'000'000'000ull;                   // monotonic 10 s ...
  c.clocks.realtime_ns = 1'796'000'000'000'000'000ll;     // ... is this wall time
  return c;
}

Incident collected() {
  Incident inc;
  inc.id = 7;
  inc.trigger.type = "threshold";
  inc.trigger.source = "eventfd";
  inc.trigger.kernel_ns = 9'000'000'000ull;
  inc.container.cgroup_path =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c3c4e_1f2a_4c1b_9a7e_2b3c4d5e6f70.slice/"
      "cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope";
  inc.container.ref = container_of(inc.container.cgroup_path);
  inc.container.inode = 42;
  inc.container.stats.usage_bytes = 95;
  inc.container.stats.limit_bytes = 100;
  VictimCandidate v;
  v.pid = 1234;
  v.comm = "leaker";
  v.start_time_ticks = 555;
  v.score_pages = 99;
  inc.victim = v;
  CaptureRecord rec;
  rec.identity.pid = 1234;
  rec.result.language = "go";
  rec.result.snapshot.set_status(SnapshotStatus::kComplete, "");
  inc.capture = rec;
  inc.outcome = CollectionOutcome::kCollected;
  inc.timeline.trigger = 9'000'000'000ull;
  inc.timeline.collection_start = 9'100'000'000ull;
  inc.timeline.snapshot_complete = 9'150'000'000ull;
  return inc;
}

}  // namespace

TEST(IncidentRecord, CollectedIncidentWithKill) {
  Incident inc = collected();
  inc.oom_kill = OomKillInfo{1234, "leaker", "/x", 9'400'000'000ull, 4096, true, {}};
  inc.timeline.oom_kill = 9'400'000'000ull;
  inc.exit = ExitInfo{1234, 9'401'000'000ull, SIGKILL};
  inc.timeline.exit = 9'401'000'000ull;
  nlohmann::json j = to_json(inc, ctx());
  EXPECT_EQ(j["time"], "2026-11-30T00:53:19.000Z");  // wall time of the trigger: 1 s before the clock pair
  EXPECT_EQ(j["node"], "node-1");
  EXPECT_EQ(j["trigger"]["type"], "threshold");
  EXPECT_EQ(j["container"]["runtime"], "containerd");
  EXPECT_EQ(j["container"]["pod_uid"], "0b7c3c4e-1f2a-4c1b-9a7e-2b3c4d5e6f70");
  EXPECT_EQ(j["container"]["limit_bytes"], 100);
  EXPECT_FALSE(j["container"].contains("high_bytes"));
  EXPECT_EQ(j["victim_pid"], 1234);
  EXPECT_EQ(j["start_time_ticks"], 555);
  EXPECT_EQ(j["score"], 99);
  EXPECT_EQ(j["tracer_data"]["language"], "go");
  EXPECT_EQ(j["tracer_data"]["snapshot"]["status"], "complete");
  EXPECT_EQ(j["oom_kill"]["matches_victim"], true);
  EXPECT_DOUBLE_EQ(j["oom_kill"]["lead_ms"].get<double>(), 250.0);
  EXPECT_EQ(j["exit"]["signal_name"], "SIGKILL");
  EXPECT_EQ(j["timeline"]["oom_kill_ns"], 9'400'000'000ull);
}

TEST(IncidentRecord, MemoryStatAtCaptureAndKillAndTheTaskList) {
  Incident inc = collected();
  EXPECT_FALSE(to_json(inc, ctx())["container"].contains("memory_stat"));  // not read: absent
  EXPECT_FALSE(to_json(inc, ctx())["container"].contains("tasks"));
  inc.container.memory_stat = parse_memory_stat(2, "anon 900\nfile 50\nshmem 10\n", std::nullopt, 0);
  VictimCandidate t;
  t.pid = 1234;
  t.comm = "leaker";
  t.oom_score_adj = -10;
  t.memory.rss_bytes = 800;
  t.memory.page_table_bytes = 16;
  inc.container.tasks = {t};
  inc.container.tasks_total = 3;
  inc.oom_kill = OomKillInfo{1234, "leaker", "/x", 9'400'000'000ull, 4096, true, {}};
  inc.oom_kill->memory_stat = MemoryStat{};
  inc.oom_kill->memory_stat->error = "cannot read /x/memory.stat";
  nlohmann::json j = to_json(inc, ctx());
  const auto& c = j["container"];
  EXPECT_EQ(c["memory_stat"]["anon"], 900);
  EXPECT_EQ(c["memory_stat"]["swap"], 0);
  EXPECT_EQ(c["memory_stat"]["raw"]["shmem"], 10);
  ASSERT_EQ(c["tasks"].size(), 1u);
  EXPECT_EQ(c["tasks"][0], nlohmann::json({{"pid", 1234},
                                           {"comm", "leaker"},
                                           {"rss_bytes", 800},
                                           {"page_table_bytes", 16},
                                           {"oom_score_adj", -10}}));
  EXPECT_EQ(c["tasks_total"], 3);
  EXPECT_FALSE(c.contains("tasks_cut"));  // the scan read every process
  EXPECT_EQ(j["oom_kill"]["memory_stat"]["error"], "cannot read /x/memory.stat");
  inc.container.tasks_cut = "read 3 of 5 processes (the limit of 3 processes)";
  EXPECT_EQ(to_json(inc, ctx())["container"]["tasks_cut"], inc.container.tasks_cut);
}

TEST(IncidentRecord, KillBeforeSnapshotHasNegativeLead) {
  Incident inc = collected();
  inc.oom_kill = OomKillInfo{1234, "leaker", "/x", 9'120'000'000ull, 0, true, {}};
  inc.timeline.oom_kill = 9'120'000'000ull;
  EXPECT_DOUBLE_EQ(*lead_ms(inc), -30.0);
}

TEST(IncidentRecord, KillWithoutSnapshotHasNoLeadAndNoTracerData) {
  Incident inc;
  inc.trigger.type = "oom_kill";
  inc.container.cgroup_path = "/box";
  inc.oom_kill = OomKillInfo{77, "x", "/box", 9'000'000'000ull, 0, false, {}};
  inc.timeline.oom_kill = inc.timeline.trigger = 9'000'000'000ull;
  inc.reason = "no snapshot of this container before the kill";
  nlohmann::json j = to_json(inc, ctx());
  EXPECT_TRUE(j["victim_pid"].is_null());
  EXPECT_FALSE(j.contains("tracer_data"));
  EXPECT_TRUE(j["oom_kill"]["lead_ms"].is_null());
  EXPECT_TRUE(j["container"]["limit_bytes"].is_null());
  EXPECT_EQ(j["collection"]["status"], "not_attempted");
  EXPECT_EQ(j["collection"]["reason"], inc.reason);
}

TEST(IncidentRecord, DiscardedSnapshotIsNotPrinted) {
  Incident inc = collected();
  inc.outcome = CollectionOutcome::kDiscarded;
  inc.reason = "pid 1234 was reused by another process during collection";
  nlohmann::json j = to_json(inc, ctx());
  EXPECT_FALSE(j.contains("tracer_data"));
  EXPECT_EQ(j["collection"]["status"], "discarded");
}

TEST(IncidentRecord, NormalExitShowsStatus) {
  Incident inc = collected();
  inc.exit = ExitInfo{1234, 9'500'000'000ull, 3 << 8};
  nlohmann::json j = to_json(inc, ctx());
  EXPECT_EQ(j["exit"]["exit_status"], 3);
  EXPECT_FALSE(j["exit"].contains("signal"));
}

// One OOM event of a group kill: every killed process once (the chosen
// victim's second mark is no second entry), the chosen one first, and
// group_kill; a single kill is no group kill.
TEST(IncidentRecord, GroupKillListsEveryKilledProcessOnce) {
  Incident inc = collected();
  inc.oom_kill = OomKillInfo{1234, "leaker", "/x", 9'400'000'000ull, 4096, true, {}};
  inc.oom_kill->killed.push_back({1234, "leaker", 4096});
  EXPECT_FALSE(inc.oom_kill->group_kill);
  EXPECT_TRUE(inc.oom_kill->add_killed({77, "holder", 8192}));
  EXPECT_TRUE(inc.oom_kill->add_killed({78, "sleep", 0}));
  EXPECT_FALSE(inc.oom_kill->add_killed({1234, "leaker", 4096}));  // marked again during the group kill
  EXPECT_TRUE(inc.oom_kill->group_kill);
  EXPECT_TRUE(inc.oom_kill->killed_pid(78));
  EXPECT_FALSE(inc.oom_kill->killed_pid(79));
  inc.timeline.oom_kill = 9'400'000'000ull;
  auto j = to_json(inc, ctx());
  const auto& k = j["oom_kill"];
  EXPECT_EQ(k["pid"], 1234);
  EXPECT_EQ(k["group_kill"], true);
  ASSERT_EQ(k["killed"].size(), 3u) << k.dump(2);
  EXPECT_EQ(k["killed"][0]["pid"], 1234);
  EXPECT_EQ(k["killed"][1]["comm"], "holder");
  EXPECT_EQ(k["killed"][1]["rss_bytes"], 8192);
  EXPECT_EQ(k["killed"][2]["pid"], 78);
}

// Every shape the encoder writes holds to docs/record.schema.json: collected
// with a kill, its exit and other processes; without a victim; an exit of its
// own; over the size limit, cut down.
TEST(IncidentRecord, EveryShapeHoldsToThePublishedSchema) {
  std::vector<nlohmann::json> records;
  Incident full = collected();
  full.oom_kill = OomKillInfo{1234, "leaker", "/x", 9'400'000'000ull, 4096, true, {}};
  full.oom_kill->add_killed({1234, "leaker", 4096});
  full.oom_kill->add_killed({77, "sidecar", 8192});
  full.timeline.oom_kill = 9'400'000'000ull;
  full.exit = ExitInfo{1234, 9'401'000'000ull, SIGKILL};
  full.merged_triggers = 3;
  full.triggers_seen.push_back({"psi", 9'000'100'000ull});
  OtherProcess other;
  other.process.pid = 77;
  other.process.comm = "sidecar";
  other.outcome = CollectionOutcome::kVictimGone;
  other.reason = "exited";
  full.other_processes.push_back(other);
  full.others_without_runtime = 2;
  records.push_back(to_json(full, ctx()));
  Incident none = collected();
  none.victim.reset();
  none.capture.reset();
  none.outcome = CollectionOutcome::kNoVictim;
  none.reason = "no candidate";
  none.container.tasks_cut = "read 0 of 100000 processes (the scan's time limit of 1000 ms)";
  records.push_back(to_json(none, ctx()));
  Incident exited = collected();
  exited.trigger.type = "process_exit";
  exited.capture.reset();
  exited.outcome = CollectionOutcome::kNotAttempted;
  exited.exit = ExitInfo{1234, 9'401'000'000ull, 0x0100};  // exit status 1
  records.push_back(to_json(exited, ctx()));
  for (const auto& r : records) EXPECT_EQ(oomsnap_test::record_schema_errors(r.dump()), "") << r.dump();
  // Cut down past the record size limit: still a record.
  Incident big = collected();
  for (int i = 0; i < 2000; ++i)
    big.capture->result.snapshot.entries.push_back({"object_type", std::string(200, 'x') + std::to_string(i), 1, 1});
  const std::string line = serialise_record(to_json(big, ctx()), 64 * 1024);
  EXPECT_LE(line.size(), 64u * 1024);
  EXPECT_EQ(oomsnap_test::record_schema_errors(line), "") << line.substr(0, 400);
}

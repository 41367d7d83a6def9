// Where a last gasp goes in the record of its kill: the record's own
// snapshot when it had none (or an incomplete one of the same process),
// other_processes for the rest of a group kill, never over a complete
// snapshot from before the kill, never into another kill's record.
#include <gtest/gtest.h>

#include "agent/incident/last_gasp_attach.h"
#include "record_schema.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kKill = 50'000'000'000ull;

Incident kill_record(std::vector<pid_t> killed) {
  Incident inc;
  inc.id = 3;
  inc.trigger.type = "oom_kill";
  inc.oom_kill = OomKillInfo{};
  inc.oom_kill->pid = killed.front();
  inc.oom_kill->kernel_ns = kKill;
  for (pid_t p : killed) inc.oom_kill->killed.push_back({p, "server", 1 << 20, "task"});
  inc.timeline.oom_kill = kKill;
  inc.reason = "no trigger before the kill";
  inc.container.stats.limit_bytes = 256 << 20;
  return inc;
}

LastGaspDecoded gasp(pid_t pid, SnapshotStatus status = SnapshotStatus::kComplete, MonoNs at = kKill + 2'000'000) {
  LastGaspDecoded d;
  d.pid = pid;
  d.walk_start_ns = at;
  d.walk_end_ns = at + 3'000'000;
  d.record.identity.pid = pid;
  d.record.identity.start_time_ticks = 77;
  d.record.identity.comm = "server";
  d.record.process_memory.status = "the process was gone: read in it at its kill (last gasp)";  // as decoded
  d.record.result.language = "go";
  d.record.result.snapshot.source = "last_gasp";
  d.record.result.snapshot.set_status(status, status == SnapshotStatus::kComplete ? "" : "last gasp: cut");
  return d;
}

CaptureRecord pre_kill(pid_t pid, SnapshotStatus status) {
  CaptureRecord r;
  r.identity.pid = pid;
  r.result.language = "go";
  r.result.snapshot.set_status(status, status == SnapshotStatus::kComplete ? "" : "a collection ran");
  return r;
}

}  // namespace

TEST(LastGaspAttach, AKillWithoutASnapshotGetsTheLastGaspAsItsOwn) {
  Incident inc = kill_record({40});
  ASSERT_TRUE(last_gasp_of_kill(inc, gasp(40)));
  const std::string what = attach_last_gasp(inc, gasp(40), kMaxLastGaspOthers);
  EXPECT_NE(what.find("is the record's snapshot"), std::string::npos) << what;
  ASSERT_TRUE(inc.victim);
  EXPECT_EQ(inc.victim->pid, 40);
  EXPECT_EQ(inc.victim->start_time_ticks, 77u);
  ASSERT_TRUE(inc.capture);
  EXPECT_EQ(inc.capture->result.snapshot.source, "last_gasp");
  EXPECT_EQ(inc.outcome, CollectionOutcome::kCollected);
  EXPECT_EQ(inc.reason,
            "snapshot read by the last gasp, in the victim at its kill; no snapshot before the kill: no trigger "
            "before the kill");
  EXPECT_TRUE(inc.oom_kill->matches_victim);
  EXPECT_EQ(inc.capture->process_memory.rss_bytes, 1u << 20) << "the RSS the kernel saw at the kill";
  EXPECT_NE(inc.capture->process_memory.status.find("rss only"), std::string::npos);
  EXPECT_EQ(inc.timeline.snapshot_complete, kKill + 5'000'000);
  // The kill came first: lead_ms says so.
  ASSERT_TRUE(lead_ms(inc));
  EXPECT_DOUBLE_EQ(*lead_ms(inc), -5.0);
  RecordContext ctx;
  ctx.node = "n";
  ctx.clocks.mono_ns = kKill + 1'000'000'000;
  ctx.clocks.realtime_ns = 1'796'000'000'000'000'000ll;
  const std::string line = to_json(inc, ctx).dump();
  EXPECT_EQ(oomsnap_test::record_schema_errors(line), "") << line;
  EXPECT_NE(line.find("\"source\":\"last_gasp\""), std::string::npos) << line;
}

TEST(LastGaspAttach, ACompleteSnapshotFromBeforeTheKillStaysAnIncompleteOneIsReplaced) {
  Incident inc = kill_record({40});
  inc.victim = VictimCandidate{.pid = 40, .start_time_ticks = 77, .comm = "server", .score_pages = 9};
  inc.capture = pre_kill(40, SnapshotStatus::kComplete);
  inc.reason.clear();
  EXPECT_NE(attach_last_gasp(inc, gasp(40), kMaxLastGaspOthers).find("not used"), std::string::npos);
  EXPECT_EQ(inc.capture->result.snapshot.source, "");

  inc.capture = pre_kill(40, SnapshotStatus::kPartial);
  inc.reason = "";
  attach_last_gasp(inc, gasp(40), kMaxLastGaspOthers);
  EXPECT_EQ(inc.capture->result.snapshot.source, "last_gasp");
  EXPECT_EQ(inc.victim->score_pages, 9) << "the pre-kill view of the victim is kept";
  EXPECT_EQ(inc.reason, "snapshot read by the last gasp, in the victim at its kill; the snapshot before the kill "
                        "was partial");
}

TEST(LastGaspAttach, TheRestOfAGroupKillGoesToOtherProcessesWithinItsBound) {
  std::vector<pid_t> killed = {40};
  for (pid_t p = 41; p <= 41 + static_cast<pid_t>(kMaxLastGaspOthers); ++p) killed.push_back(p);
  Incident inc = kill_record(killed);
  // The snapshot before the kill was of another process (the policy's guess).
  inc.victim = VictimCandidate{.pid = 39, .comm = "other"};
  inc.capture = pre_kill(39, SnapshotStatus::kComplete);
  EXPECT_NE(attach_last_gasp(inc, gasp(40), kMaxLastGaspOthers).find("other_processes"), std::string::npos);
  EXPECT_EQ(inc.victim->pid, 39);
  for (pid_t p = 41; p < 40 + static_cast<pid_t>(kMaxLastGaspOthers); ++p) attach_last_gasp(inc, gasp(p), kMaxLastGaspOthers);
  ASSERT_EQ(inc.other_processes.size(), kMaxLastGaspOthers);
  EXPECT_EQ(inc.other_processes[0].process.pid, 40);
  EXPECT_EQ(inc.other_processes[0].capture->result.snapshot.source, "last_gasp");
  EXPECT_EQ(inc.other_processes[0].outcome, CollectionOutcome::kCollected);
  const std::string what = attach_last_gasp(inc, gasp(41 + static_cast<pid_t>(kMaxLastGaspOthers)), kMaxLastGaspOthers);
  EXPECT_NE(what.find("not used: other_processes holds"), std::string::npos) << what;
  EXPECT_EQ(inc.other_processes.size(), kMaxLastGaspOthers);
  // A later last gasp of one already there, incomplete, does not replace a complete one.
  inc.other_processes[1].capture = pre_kill(41, SnapshotStatus::kComplete);
  attach_last_gasp(inc, gasp(41, SnapshotStatus::kPartial), kMaxLastGaspOthers);
  EXPECT_EQ(inc.other_processes[1].capture->result.snapshot.source, "");
}

TEST(LastGaspAttach, OnlyAWalkOfAProcessKilledInTheEventAndAfterItBelongsToIt) {
  const Incident inc = kill_record({40, 41});
  EXPECT_TRUE(last_gasp_of_kill(inc, gasp(41)));
  EXPECT_FALSE(last_gasp_of_kill(inc, gasp(42))) << "not killed in this event";
  EXPECT_FALSE(last_gasp_of_kill(inc, gasp(40, SnapshotStatus::kComplete, kKill - 5'000'000'000ull)))
      << "a walk long before the kill: the pid's earlier process";
  EXPECT_FALSE(last_gasp_of_kill(inc, gasp(40, SnapshotStatus::kComplete, kKill + 60'000'000'000ull)))
      << "a walk long after: a later kill of a reused pid";
  Incident exit_record;
  EXPECT_FALSE(last_gasp_of_kill(exit_record, gasp(40)));
}

// The open incidents' rules on a fake clock: which incident an OOM kill, a
// further mark of the same OOM event, an exit or a trigger belongs to, and
// when each record is due. Branch by branch; times are CLOCK_MONOTONIC ns
// as the agent passes them (kernel event times on the same clock).
#include <gtest/gtest.h>

#include <string>

#include "agent/incident/incident_book.h"

using namespace oomsnap;

namespace {

constexpr MonoNs kSec = 1'000'000'000;
constexpr MonoNs kMs = 1'000'000;
constexpr MonoNs kWindow = 60 * kSec;

// An incident decided for `memcg` at `decided` (the policy's decision).
Incident decided_incident(uint64_t id, const std::string& memcg, MonoNs decided) {
  Incident inc;
  inc.id = id;
  inc.trigger.type = "threshold";
  inc.container.cgroup_path = memcg;
  inc.timeline.decided = decided;
  return inc;
}

// The worker's result: the victim `pid` captured.
Incident with_snapshot_of(Incident inc, pid_t pid) {
  VictimCandidate v;
  v.pid = pid;
  v.comm = "leaker";
  inc.victim = v;
  inc.capture = CaptureRecord{};
  inc.outcome = CollectionOutcome::kCollected;
  return inc;
}

OomKillInfo kill_of(pid_t pid, const std::string& memcg, MonoNs at, uint32_t invoker = 77) {
  OomKillInfo k;
  k.pid = pid;
  k.comm = "p" + std::to_string(pid);
  k.memcg = memcg;
  k.kernel_ns = at;
  k.invoker = invoker;
  k.killed.push_back({pid, k.comm, 4096, "task"});
  return k;
}

ExitInfo exit_of(pid_t pid, MonoNs at) { return ExitInfo{pid, at, 9}; }

}  // namespace

TEST(IncidentBook, CollectedThenKilledThenExitedIsDueAfterTheGroupKillTail) {
  IncidentBook book;
  Incident open = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  EXPECT_FALSE(book.next_due());  // collecting: never due
  ASSERT_TRUE(book.collected(with_snapshot_of(open, 42), 1 * kSec));
  EXPECT_EQ(book.next_due(), kWindow);  // waits for the kill until the window ends
  EXPECT_TRUE(book.due(2 * kSec).empty());

  auto m = book.oom_kill(kill_of(42, "/box", 2 * kSec), 2 * kSec);
  EXPECT_EQ(m.kind, IncidentBook::KillMatch::kAttached);
  EXPECT_EQ(m.id, 1u);
  EXPECT_FALSE(m.collecting);
  EXPECT_TRUE(book.find(1)->oom_kill->matches_victim);
  EXPECT_EQ(book.next_due(), 2 * kSec + IncidentBook::kExitWaitNs);  // then waits for the exit

  // The victim's exit inside the OOM event's window: the rest of a group
  // kill may still be marked, so a short wait.
  auto x = book.exit(exit_of(42, 2 * kSec + 5 * kMs), 2 * kSec + 6 * kMs);
  EXPECT_EQ(x.id, 1u);
  EXPECT_EQ(book.next_due(), 2 * kSec + 6 * kMs + IncidentBook::kGroupKillTailNs);
  EXPECT_TRUE(book.due(2 * kSec + 100 * kMs).empty());
  EXPECT_EQ(book.due(2 * kSec + 300 * kMs), std::vector<uint64_t>{1});
  auto inc = book.take(1);
  ASSERT_TRUE(inc);
  EXPECT_EQ(inc->timeline.oom_kill, 2 * kSec);
  EXPECT_EQ(inc->timeline.exit, 2 * kSec + 5 * kMs);
  EXPECT_EQ(book.size(), 0u);
  EXPECT_FALSE(book.take(1));
}

TEST(IncidentBook, AnExitLongAfterTheKillIsDueAtOnce) {
  IncidentBook book;
  Incident open = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  book.collected(with_snapshot_of(open, 42), kSec);
  book.oom_kill(kill_of(42, "/box", 2 * kSec), 2 * kSec);
  book.exit(exit_of(42, 4 * kSec), 4 * kSec);
  EXPECT_EQ(book.due(4 * kSec), std::vector<uint64_t>{1});
}

TEST(IncidentBook, WhatArrivesDuringTheCollectionStaysWithIt) {
  IncidentBook book;
  Incident copy = book.open_collection(decided_incident(1, "/box", 0), kWindow);  // the worker's copy
  // The loop, while the worker runs: two more triggers, the kill, the exit.
  EXPECT_TRUE(book.merge_trigger("/box", {"memcg_pressure", 100, ""}));
  EXPECT_TRUE(book.merge_trigger("/box", {"memory_events", 200, ""}));
  auto m = book.oom_kill(kill_of(42, "/box/child", 300), 300);
  EXPECT_EQ(m.kind, IncidentBook::KillMatch::kAttached);
  EXPECT_TRUE(m.collecting);
  auto x = book.exit(exit_of(42, 400), 400);
  EXPECT_EQ(x.id, 1u);
  EXPECT_TRUE(x.collecting);
  EXPECT_FALSE(book.next_due());  // still collecting

  ASSERT_TRUE(book.collected(with_snapshot_of(copy, 42), kSec));
  const Incident& inc = *book.find(1);
  ASSERT_TRUE(inc.oom_kill && inc.exit);
  EXPECT_TRUE(inc.oom_kill->matches_victim);  // decided with the worker's victim
  EXPECT_EQ(inc.merged_triggers, 2u);
  ASSERT_EQ(inc.triggers_seen.size(), 2u);
  EXPECT_EQ(inc.triggers_seen[1].type, "memory_events");
  EXPECT_EQ(inc.outcome, CollectionOutcome::kCollected);
  EXPECT_EQ(book.due(kSec), std::vector<uint64_t>{1});  // with its exit: at once
}

TEST(IncidentBook, KilledDuringCollectionWithoutExitWaitsForIt) {
  IncidentBook book;
  Incident copy = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  book.oom_kill(kill_of(42, "/box", 300), 300);
  book.collected(with_snapshot_of(copy, 41), kSec);
  EXPECT_FALSE(book.find(1)->oom_kill->matches_victim);  // another process was captured
  EXPECT_EQ(book.next_due(), kSec + IncidentBook::kExitWaitNs);
}

TEST(IncidentBook, FurtherMarksOfTheSameEventJoinItsRecord) {
  IncidentBook book;
  Incident open = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  book.collected(with_snapshot_of(open, 42), kSec);
  book.oom_kill(kill_of(41, "/box", 2 * kSec, 77), 2 * kSec);
  EXPECT_FALSE(book.find(1)->oom_kill->matches_victim);

  // The group kill's next member, then the snapshotted victim: same invoker, within 1 s.
  auto m = book.oom_kill(kill_of(43, "/box/a", 2 * kSec + kMs, 77), 2 * kSec + kMs);
  EXPECT_EQ(m.kind, IncidentBook::KillMatch::kSameEvent);
  EXPECT_TRUE(m.added);
  m = book.oom_kill(kill_of(42, "/box", 2 * kSec + 2 * kMs, 77), 2 * kSec + 2 * kMs);
  EXPECT_TRUE(m.added);
  EXPECT_TRUE(book.find(1)->oom_kill->matches_victim);  // the snapshotted process was among the killed
  // The chosen victim marked a second time: once in the list.
  m = book.oom_kill(kill_of(41, "/box", 2 * kSec + 3 * kMs, 77), 2 * kSec + 3 * kMs);
  EXPECT_EQ(m.kind, IncidentBook::KillMatch::kSameEvent);
  EXPECT_FALSE(m.added);
  EXPECT_EQ(book.find(1)->oom_kill->killed.size(), 3u);

  // Another invoker, or the same one over a second later, is another event:
  // the container's incident has its kill already, so nothing takes it.
  EXPECT_EQ(book.oom_kill(kill_of(44, "/box", 2 * kSec + 4 * kMs, 78), 2 * kSec).kind,
            IncidentBook::KillMatch::kNone);
  EXPECT_EQ(book.oom_kill(kill_of(45, "/box", 3 * kSec + 1, 77), 3 * kSec).kind, IncidentBook::KillMatch::kNone);
  // The same invoker in another container: not this event.
  EXPECT_EQ(book.oom_kill(kill_of(46, "/other", 2 * kSec + 5 * kMs, 77), 2 * kSec).kind,
            IncidentBook::KillMatch::kNone);
}

TEST(IncidentBook, AKillOutsideTheWindowOrTheContainerOpensItsOwnRecord) {
  IncidentBook book;
  Incident open = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  book.collected(with_snapshot_of(open, 42), kSec);
  // (Other processes each time: one killed is not killed again, see below.)
  EXPECT_EQ(book.oom_kill(kill_of(42, "/boxer", 2 * kSec), 2 * kSec).kind, IncidentBook::KillMatch::kNone);
  EXPECT_EQ(book.oom_kill(kill_of(43, "/", 2 * kSec, 5), 2 * kSec).kind, IncidentBook::KillMatch::kNone);
  EXPECT_EQ(book.oom_kill(kill_of(44, "/box", kWindow + 1, 6), kWindow + 1).kind, IncidentBook::KillMatch::kNone);
  EXPECT_FALSE(book.find(1)->oom_kill);
}

// The kernel marks a victim that is still exiting again, rather than kill
// another, when its memcg is still over the limit (seen live: a Go leaker's
// second mark_victim 1 s after its first, once its record was written). It
// is not a new kill: no record of its own.
TEST(IncidentBook, AVictimMarkedAgainAfterItsRecordIsNotANewKill) {
  IncidentBook book;
  Incident open = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  book.collected(with_snapshot_of(open, 42), kSec);
  EXPECT_EQ(book.oom_kill(kill_of(42, "/box", 2 * kSec, 77), 2 * kSec).kind, IncidentBook::KillMatch::kAttached);
  ASSERT_TRUE(book.take(1));
  auto m = book.oom_kill(kill_of(42, "/box", 3 * kSec + 5 * kMs, 78), 3 * kSec + 5 * kMs);
  EXPECT_EQ(m.kind, IncidentBook::KillMatch::kMarkedAgain);
  // Nor when no incident took the first kill.
  EXPECT_EQ(book.oom_kill(kill_of(50, "/other", 4 * kSec), 4 * kSec).kind, IncidentBook::KillMatch::kNone);
  EXPECT_EQ(book.oom_kill(kill_of(50, "/other", 5 * kSec, 78), 5 * kSec).kind, IncidentBook::KillMatch::kMarkedAgain);
  // Long after, the number is another process's.
  EXPECT_EQ(book.oom_kill(kill_of(50, "/other", 6 * kSec + IncidentBook::kOomKilledKeepNs, 79), 6 * kSec).kind,
            IncidentBook::KillMatch::kNone);
}

TEST(IncidentBook, TheKillGoesToTheCollectionThatCapturedTheKilledProcess) {
  IncidentBook book;
  // Two collections of one container before its kill: the first captured
  // the process that is later killed, the second found another one.
  Incident a = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  book.collected(with_snapshot_of(a, 42), kSec);
  Incident b = book.open_collection(decided_incident(2, "/box", 5 * kSec), 5 * kSec + kWindow);
  book.collected(with_snapshot_of(b, 43), 6 * kSec);
  auto m = book.oom_kill(kill_of(42, "/box", 7 * kSec), 7 * kSec);
  EXPECT_EQ(m.id, 1u);
  // Neither captured the killed process: the latest decided one.
  IncidentBook other;
  Incident c = other.open_collection(decided_incident(1, "/box", 0), kWindow);
  other.collected(with_snapshot_of(c, 50), kSec);
  Incident d = other.open_collection(decided_incident(2, "/box", 5 * kSec), 5 * kSec + kWindow);
  other.collected(with_snapshot_of(d, 51), 6 * kSec);
  EXPECT_EQ(other.oom_kill(kill_of(42, "/box", 7 * kSec), 7 * kSec).id, 2u);
  // A collection still running does not count as having the victim.
  IncidentBook running;
  Incident e = running.open_collection(decided_incident(1, "/box", 0), kWindow);
  running.collected(with_snapshot_of(e, 42), kSec);
  running.open_collection(decided_incident(2, "/box", 5 * kSec), 5 * kSec + kWindow);
  EXPECT_EQ(running.oom_kill(kill_of(42, "/box", 7 * kSec), 7 * kSec).id, 1u);
}

TEST(IncidentBook, ExitsOfOtherProcessesAndKilledOnesAreTold) {
  IncidentBook book;
  Incident open = book.open_collection(decided_incident(1, "/box", 0), kWindow);
  book.collected(with_snapshot_of(open, 42), kSec);
  EXPECT_EQ(book.exit(exit_of(99, 2 * kSec), 2 * kSec).id, 0u);
  EXPECT_FALSE(book.find(1)->exit);
  // A process killed in an OOM event (here one no incident took).
  book.oom_kill(kill_of(60, "/elsewhere", 3 * kSec), 3 * kSec);
  EXPECT_TRUE(book.oom_killed_recently(60, 3 * kSec + kSec));
  EXPECT_FALSE(book.oom_killed_recently(60, 3 * kSec - 1));  // an exit before the kill is not its exit
  EXPECT_FALSE(book.oom_killed_recently(60, 3 * kSec + IncidentBook::kOomKilledKeepNs + 1));
  EXPECT_FALSE(book.oom_killed_recently(61, 3 * kSec));
}

TEST(IncidentBook, TheOomKilledListIsBounded) {
  IncidentBook book;
  for (pid_t p = 1; p <= static_cast<pid_t>(IncidentBook::kMaxOomKilled) + 10; ++p)
    book.oom_kill(kill_of(p, "/x", static_cast<MonoNs>(p) * kMs, static_cast<uint32_t>(p)), 0);
  EXPECT_FALSE(book.oom_killed_recently(1, 5 * kSec));  // the oldest went first
  EXPECT_TRUE(book.oom_killed_recently(static_cast<pid_t>(IncidentBook::kMaxOomKilled) + 10, 5 * kSec));
}

TEST(IncidentBook, TriggersJoinOnlyTheirContainersOpenCollections) {
  IncidentBook book;
  book.open_collection(decided_incident(1, "/box", 0), kWindow);
  Incident kill_record = decided_incident(2, "/other", 0);
  kill_record.trigger.type = "oom_kill";
  book.open_kernel(kill_record, kSec);
  EXPECT_FALSE(book.merge_trigger("/other", {"threshold", 1, ""}));  // a kernel record is no episode
  EXPECT_FALSE(book.merge_trigger("/box/child", {"threshold", 1, ""}));
  for (size_t i = 0; i < kMaxSeenTriggers + 5; ++i) EXPECT_TRUE(book.merge_trigger("/box", {"threshold", i, ""}));
  EXPECT_EQ(book.find(1)->merged_triggers, kMaxSeenTriggers + 5);
  EXPECT_EQ(book.find(1)->triggers_seen.size(), kMaxSeenTriggers);
}

// memory.events under memory.high fires dozens of times a second: the usage
// poll's first "threshold" must still reach the timeline (EvaluateCgroupV2
// once saw 64 memory_events and no threshold).
TEST(IncidentBook, AFloodOfOneTriggerTypeDoesNotHideTheFirstOfAnother) {
  IncidentBook book;
  book.open_collection(decided_incident(1, "/box", 0), kWindow);
  for (size_t i = 0; i < 200; ++i) book.merge_trigger("/box", {"memory_events", i, ""});
  book.merge_trigger("/box", {"threshold", 300, ""});
  book.merge_trigger("/box", {"threshold", 301, ""});  // the first of its type is what matters
  for (size_t i = 0; i < 20; ++i) book.merge_trigger("/box", {"type" + std::to_string(i), 400 + i, ""});
  const auto& seen = book.find(1)->triggers_seen;
  EXPECT_EQ(seen.size(), kMaxSeenTriggers + kMaxSeenTriggerTypesPastCap);
  size_t thresholds = 0;
  for (const auto& s : seen) thresholds += s.type == "threshold";
  EXPECT_EQ(thresholds, 1u);
  EXPECT_EQ(book.find(1)->merged_triggers, 200u + 2 + 20);
}

// Past the cap, each mechanism's first sighting of a type is still listed:
// the record says whether the in-kernel threshold saw the crossing, even when
// the poll's threshold came first and memory.events had filled the list.
TEST(IncidentBook, PastTheCapTheFirstOfEachSourceOfATypeIsKept) {
  IncidentBook book;
  book.open_collection(decided_incident(1, "/box", 0), kWindow);
  for (size_t i = 0; i < 200; ++i) book.merge_trigger("/box", {"memory_events", i, "v2 memory.events"});
  book.merge_trigger("/box", {"threshold", 300, "poll"});
  book.merge_trigger("/box", {"threshold", 301, "bpf raw_tp: rss_stat: usage at or above the threshold"});
  book.merge_trigger("/box", {"threshold", 302, "poll"});  // a second from the same source: not kept
  const auto& seen = book.find(1)->triggers_seen;
  size_t poll = 0, bpf = 0;
  for (const auto& s : seen) {
    poll += s.type == "threshold" && s.source == "poll";
    bpf += s.type == "threshold" && s.source.rfind("bpf ", 0) == 0;
  }
  EXPECT_EQ(poll, 1u);
  EXPECT_EQ(bpf, 1u);
  EXPECT_EQ(seen.size(), kMaxSeenTriggers + 2);
}

TEST(IncidentBook, DueTimesOrderTheRecordsAndStoppingClosesAll) {
  IncidentBook book;
  book.open_kernel(decided_incident(1, "/a", 0), 5 * kSec);
  book.open_kernel(decided_incident(2, "/b", 0), 3 * kSec);
  book.open_collection(decided_incident(3, "/c", 0), kWindow);
  EXPECT_EQ(book.next_due(), 3 * kSec);
  EXPECT_EQ(book.due(4 * kSec), std::vector<uint64_t>{2});
  EXPECT_EQ(book.due(5 * kSec), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(book.close_all(6 * kSec, "the agent stopped"), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(book.find(3)->reason, "the agent stopped");
  EXPECT_TRUE(book.find(1)->reason.empty());
  EXPECT_EQ(book.due(6 * kSec).size(), 3u);
  // A result for an incident no longer open is dropped.
  book.take(3);
  EXPECT_FALSE(book.collected(decided_incident(3, "/c", 0), 7 * kSec));
}

TEST(IncidentBook, GroupKillCounterRoseOnlyWhenItWasReadBothTimes) {
  EXPECT_TRUE(IncidentBook::group_kill_counter_rose({{"oom_group_kill", 1}}, {{"oom_group_kill", 2}}));
  EXPECT_FALSE(IncidentBook::group_kill_counter_rose({{"oom_group_kill", 2}}, {{"oom_group_kill", 2}}));
  EXPECT_FALSE(IncidentBook::group_kill_counter_rose({}, {{"oom_group_kill", 2}}));  // v1, or not read
  EXPECT_FALSE(IncidentBook::group_kill_counter_rose({{"oom_group_kill", 1}}, {}));
}

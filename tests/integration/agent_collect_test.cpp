// The agent's collection step against real processes in a real memcg: the
// victim is the process the kernel would pick, and a victim that exits, is
// replaced or leaves the container before collection gives a reason, never a
// snapshot of the wrong process.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "agent/collect.h"
#include "capture/capture_sandbox.h"
#include "test_cgroup.h"
#include "test_process.h"

using namespace std::chrono_literals;
using oomsnap_test::Process;
using oomsnap_test::TestMemcg;

namespace {

const std::string kFixture = std::string(OOMSNAP_FIXTURES) + "/go/1.26/default/heapfixture";

oomsnap::Incident incident_for(const TestMemcg& cg) {
  oomsnap::Incident inc;
  inc.container.cgroup_path = cg.rel_path();
  inc.container.stats = oomsnap::read_memcg(cg.fs(), cg.rel_path());
  return inc;
}

oomsnap::CaptureOptions quick() {
  oomsnap::CaptureOptions o;
  o.budget = 5000ms;
  return o;
}

// The agent's way: each capture in a sandboxed capture process (the oomsnap binary).
oomsnap::CaptureFn sandboxed() {
  auto box = std::make_shared<oomsnap::CaptureSandbox>(oomsnap::SandboxOptions{.helper_path = OOMSNAP_BINARY,
                                                                                .max_budget = 5000ms});
  return [box](pid_t pid, const oomsnap::CaptureOptions& o, std::string& error) { return box->capture(pid, o, error); };
}

}  // namespace

TEST(AgentCollect, PicksTheBiggestProcessAndCapturesIt) {
  TestMemcg box("collect", 512 << 20);
  TestMemcg child(box, "child");  // processes in child cgroups belong to the container too
  Process small({"/bin/sleep", "60"}, {}, box.dir());
  ASSERT_TRUE(small.wait_exec(10s));
  Process go({kFixture, "-leak-mb-per-s", "200", "-leak-limit-mb", "40"}, {}, child.dir());
  ASSERT_NE(go.read_line(20s).find("\"ready\":true"), std::string::npos);
  std::this_thread::sleep_for(500ms);  // 40 MiB retained
  oomsnap::Incident inc = incident_for(box);
  oomsnap::collect_incident(inc, box.fs(), quick(), sandboxed());
  ASSERT_TRUE(inc.victim) << inc.reason;
  EXPECT_EQ(inc.victim->pid, go.pid());
  EXPECT_EQ(inc.outcome, oomsnap::CollectionOutcome::kCollected) << inc.reason;
  ASSERT_TRUE(inc.capture);
  EXPECT_EQ(inc.capture->result.language, "go");
  EXPECT_GT(inc.timeline.snapshot_complete, inc.timeline.collection_start);
}

// The agent's capture path serves every runtime: a Python and a Java
// process in the container are snapshotted with their own collectors.
TEST(AgentCollect, CapturesPythonAndJavaVictims) {
  TestMemcg box("collect-rt", 1024 << 20);
  {
    Process py({"/usr/bin/python3.11", std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/python/heapfixture.py"}, {},
               box.dir());
    ASSERT_FALSE(py.read_line(30s).empty());
    oomsnap::Incident inc = incident_for(box);
    oomsnap::collect_incident(inc, box.fs(), quick(), sandboxed());
    ASSERT_TRUE(inc.victim) << inc.reason;
    EXPECT_EQ(inc.victim->pid, py.pid());
    ASSERT_TRUE(inc.capture);
    EXPECT_EQ(inc.capture->result.language, "python");
    EXPECT_EQ(inc.capture->result.snapshot.status, oomsnap::SnapshotStatus::kComplete)
        << inc.capture->result.snapshot.reason;
  }
  {
    Process java({"/usr/lib/jvm/java-17-openjdk-amd64/bin/java", "-XX:+UseG1GC", "-Xmx256m", "-XX:-UsePerfData", "-cp",
                  std::string(OOMSNAP_FIXTURES) + "/java", "HeapFixture", "--markers", "10000"},
                 {}, box.dir());
    ASSERT_FALSE(java.read_line(60s).empty());
    oomsnap::Incident inc = incident_for(box);
    oomsnap::collect_incident(inc, box.fs(), quick(), sandboxed());
    ASSERT_TRUE(inc.victim) << inc.reason;
    EXPECT_EQ(inc.victim->pid, java.pid());
    ASSERT_TRUE(inc.capture);
    EXPECT_EQ(inc.capture->result.language, "java");
    EXPECT_EQ(inc.capture->result.snapshot.status, oomsnap::SnapshotStatus::kComplete)
        << inc.capture->result.snapshot.reason;
  }
}

TEST(AgentCollect, VictimThatExitsBeforeCollectionGivesReason) {
  TestMemcg box("collect-exit", 256 << 20);
  auto p = std::make_unique<Process>(std::vector<std::string>{"/bin/sleep", "60"}, std::vector<std::string>{},
                                     box.dir());
  ASSERT_TRUE(p->wait_exec(10s));
  oomsnap::Incident inc = incident_for(box);
  auto victim = oomsnap::choose_victim(inc, box.fs());
  ASSERT_TRUE(victim);
  EXPECT_EQ(victim->pid, p->pid());
  p.reset();  // killed and reaped between choice and capture
  oomsnap::capture_victim(inc, *victim, box.fs(), quick(), sandboxed());
  EXPECT_EQ(inc.outcome, oomsnap::CollectionOutcome::kVictimGone);
  EXPECT_NE(inc.reason.find("exited before collection"), std::string::npos) << inc.reason;
  EXPECT_FALSE(inc.capture);
  EXPECT_EQ(inc.timeline.collection_start, 0u);
}

// A victim killed (e.g. by the OOM killer) but not yet reaped is a zombie:
// its /proc entry is still there, with its cgroup reading as the root. That
// is an exit, not a move.
TEST(AgentCollect, ZombieVictimCountsAsExited) {
  TestMemcg box("collect-zombie", 256 << 20);
  Process p({"/bin/sleep", "60"}, {}, box.dir());
  ASSERT_TRUE(p.wait_exec(10s));
  oomsnap::Incident inc = incident_for(box);
  auto victim = oomsnap::choose_victim(inc, box.fs());
  ASSERT_TRUE(victim);
  ::kill(p.pid(), SIGKILL);  // not reaped: a zombie until p goes out of scope
  for (int i = 0; i < 500; ++i) {
    auto id = oomsnap::read_identity(p.pid());
    if (id && id->exited()) break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(oomsnap::read_identity(p.pid())->exited());
  oomsnap::capture_victim(inc, *victim, box.fs(), quick(), sandboxed());
  EXPECT_EQ(inc.outcome, oomsnap::CollectionOutcome::kVictimGone);
  EXPECT_NE(inc.reason.find("exited before collection"), std::string::npos) << inc.reason;
}

TEST(AgentCollect, ReusedPidIsNotCaptured) {
  TestMemcg box("collect-reuse", 256 << 20);
  Process p({"/bin/sleep", "60"}, {}, box.dir());
  ASSERT_TRUE(p.wait_exec(10s));  // exec comes after the move into the cgroup
  oomsnap::Incident inc = incident_for(box);
  auto victim = oomsnap::choose_victim(inc, box.fs());
  ASSERT_TRUE(victim);
  victim->start_time_ticks += 1;  // as if the pid now belonged to another process
  oomsnap::capture_victim(inc, *victim, box.fs(), quick(), sandboxed());
  EXPECT_EQ(inc.outcome, oomsnap::CollectionOutcome::kVictimGone);
  EXPECT_FALSE(inc.capture);
}

TEST(AgentCollect, VictimThatLeftTheContainerIsNotCaptured) {
  TestMemcg box("collect-move", 256 << 20);
  TestMemcg elsewhere("collect-elsewhere");
  Process p({"/bin/sleep", "60"}, {}, box.dir());
  ASSERT_TRUE(p.wait_exec(10s));  // exec comes after the move into the cgroup
  oomsnap::Incident inc = incident_for(box);
  auto victim = oomsnap::choose_victim(inc, box.fs());
  ASSERT_TRUE(victim);
  ASSERT_TRUE(oomsnap_test::write_text(elsewhere.dir() + "/cgroup.procs", std::to_string(p.pid())));
  oomsnap::capture_victim(inc, *victim, box.fs(), quick(), sandboxed());
  EXPECT_EQ(inc.outcome, oomsnap::CollectionOutcome::kVictimGone);
  EXPECT_NE(inc.reason.find("left the container"), std::string::npos) << inc.reason;
  EXPECT_NE(inc.reason.find(elsewhere.rel_path()), std::string::npos) << inc.reason;
}

TEST(AgentCollect, EmptyContainerHasNoVictim) {
  TestMemcg box("collect-empty", 256 << 20);
  oomsnap::Incident inc = incident_for(box);
  oomsnap::collect_incident(inc, box.fs(), quick(), sandboxed());
  EXPECT_EQ(inc.outcome, oomsnap::CollectionOutcome::kNoVictim);
  EXPECT_EQ(inc.reason, "the container has no processes");
  EXPECT_FALSE(inc.victim);
}

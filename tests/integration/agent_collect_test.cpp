// The agent's collection step against real processes in a real memcg: the
// victim is the process the kernel would pick, and a victim that exits, is
// replaced or leaves the container before collection gives a reason, never a
// snapshot of the wrong process.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/incident/collect.h"
#include "capture/capture_sandbox.h"
#include "cli/record_text.h"
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

// Node.js in the agent's path: the larger Node process is the victim, the
// other is snapshotted after it, and the record and `oomsnap show` carry
// their objects by constructor and the memory their Buffers hold.
TEST(AgentCollect, NodeVictimAndANodeBesideIt) {
  const std::string node = std::string(OOMSNAP_NODE_CACHE) + "/22/bin/node";
  ASSERT_EQ(access(node.c_str(), X_OK), 0) << node << " is missing: tools/fetch-node.sh fetches it";
  std::ifstream f(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/node/heapfixture.js");
  std::stringstream source;
  source << f.rdbuf();
  TestMemcg box("collect-node", 1024 << 20);
  Process big({node, "--expose-gc", "-e", source.str(), "200000", "--buffers"}, {}, box.dir());
  ASSERT_FALSE(big.read_line(60s).empty());
  Process small({node, "--expose-gc", "-e", source.str(), "1000"}, {}, box.dir());
  ASSERT_FALSE(small.read_line(60s).empty());

  oomsnap::Incident inc = incident_for(box);
  oomsnap::collect_incident(inc, box.fs(), quick(), sandboxed(), 2);
  ASSERT_TRUE(inc.victim) << inc.reason;
  EXPECT_EQ(inc.victim->pid, big.pid());
  ASSERT_TRUE(inc.capture);
  EXPECT_EQ(inc.capture->result.language, "node");
  EXPECT_EQ(inc.capture->result.snapshot.status, oomsnap::SnapshotStatus::kComplete)
      << inc.capture->result.snapshot.reason;
  ASSERT_EQ(inc.other_processes.size(), 1u);
  EXPECT_EQ(inc.other_processes[0].process.pid, small.pid());
  ASSERT_TRUE(inc.other_processes[0].capture);
  EXPECT_EQ(inc.other_processes[0].capture->result.language, "node");

  oomsnap::RecordContext ctx;
  ctx.node = "n";
  ctx.clocks = oomsnap::ClockPair::now();
  const auto j = oomsnap::to_json(inc, ctx);
  EXPECT_EQ(j["tracer_data"]["language"], "node");
  bool order = false;
  for (const auto& e : j["tracer_data"]["snapshot"]["entries"])
    if (e["name"] == "Order" && e["objects"] == 200000) order = true;
  EXPECT_TRUE(order) << "200,000 Order objects in the record: " << j["tracer_data"]["snapshot"].dump(1);
  EXPECT_EQ(j["other_processes"][0]["tracer_data"]["language"], "node");
  const std::string shown = oomsnap::render_record(j);
  for (const char* want : {"node v22", "Order", "ArrayBuffer backing stores"})
    EXPECT_NE(shown.find(want), std::string::npos) << want << " is not shown:\n" << shown;
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

// MaxProcessesPerIncident: the kernel's pick first, then the next processes
// by badness that run a supported runtime (a `sleep` is skipped and counted),
// each checked and captured like the victim.
TEST(AgentCollect, OtherProcessesWithARuntimeAreSnapshottedAfterTheVictim) {
  TestMemcg box("collect-others", 1024 << 20);
  Process small({"/bin/sleep", "60"}, {}, box.dir());
  ASSERT_TRUE(small.wait_exec(10s));
  Process py({"/usr/bin/python3.11", std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/python/heapfixture.py",
              "--blobs", "1", "--dict-blobs", "1", "--attr-blobs", "1", "--blob-size", "1048576"},
             {}, box.dir());
  ASSERT_FALSE(py.read_line(30s).empty());
  Process go({kFixture, "-leak-mb-per-s", "400", "-leak-limit-mb", "80"}, {}, box.dir());
  ASSERT_NE(go.read_line(20s).find("\"ready\":true"), std::string::npos);
  std::this_thread::sleep_for(500ms);  // 80 MiB retained: the Go process is the kernel's pick

  std::vector<std::pair<pid_t, std::chrono::milliseconds>> calls;
  auto inner = sandboxed();
  oomsnap::CaptureFn counting = [&](pid_t pid, const oomsnap::CaptureOptions& o, std::string& error) {
    calls.emplace_back(pid, o.budget);
    return inner(pid, o, error);
  };
  oomsnap::Incident inc = incident_for(box);
  oomsnap::collect_incident(inc, box.fs(), quick(), counting, 3);
  ASSERT_TRUE(inc.victim) << inc.reason;
  EXPECT_EQ(inc.victim->pid, go.pid());
  ASSERT_TRUE(inc.capture);
  EXPECT_EQ(inc.capture->result.language, "go");
  ASSERT_EQ(inc.other_processes.size(), 1u) << "the python process only: sleep has no runtime";
  const auto& other = inc.other_processes[0];
  EXPECT_EQ(other.process.pid, py.pid());
  EXPECT_GT(other.process.score_pages, 0);
  EXPECT_EQ(other.outcome, oomsnap::CollectionOutcome::kCollected) << other.reason;
  ASSERT_TRUE(other.capture);
  EXPECT_EQ(other.capture->result.language, "python");
  EXPECT_EQ(other.capture->result.snapshot.status, oomsnap::SnapshotStatus::kComplete)
      << other.capture->result.snapshot.reason;
  EXPECT_EQ(inc.others_without_runtime, 1u);
  // Victim first, in the kernel's order; the others get what the victim left.
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].first, go.pid());
  EXPECT_EQ(calls[1].first, py.pid());
  EXPECT_EQ(calls[2].first, small.pid());
  EXPECT_EQ(calls[0].second, quick().budget);
  EXPECT_LT(calls[1].second, quick().budget);
  EXPECT_LE(calls[2].second, calls[1].second);

  // The record lists it, after the victim's own fields.
  oomsnap::RecordContext ctx;
  ctx.node = "n";
  ctx.clocks = oomsnap::ClockPair::now();
  auto j = oomsnap::to_json(inc, ctx);
  ASSERT_EQ(j["other_processes"].size(), 1u);
  EXPECT_EQ(j["other_processes"][0]["pid"], py.pid());
  EXPECT_EQ(j["other_processes"][0]["tracer_data"]["language"], "python");
  EXPECT_EQ(j["collection"]["processes_without_runtime"], 1);
  EXPECT_FALSE(j["other_processes"][0].contains("killed")) << "no OOM kill yet";

  // MaxProcessesPerIncident = 1: the victim only, nothing else tried.
  calls.clear();
  oomsnap::Incident one = incident_for(box);
  oomsnap::collect_incident(one, box.fs(), quick(), counting, 1);
  EXPECT_TRUE(one.other_processes.empty());
  EXPECT_EQ(calls.size(), 1u);
}

// The others never stretch the incident past its budget: once the victim's
// capture has used it up, none is tried and the record says why.
TEST(AgentCollect, OtherProcessesShareTheIncidentsBudget) {
  TestMemcg box("collect-budget", 512 << 20);
  Process a({kFixture, "-leak-mb-per-s", "400", "-leak-limit-mb", "40"}, {}, box.dir());
  ASSERT_NE(a.read_line(20s).find("\"ready\":true"), std::string::npos);
  Process b({kFixture}, {}, box.dir());
  ASSERT_NE(b.read_line(20s).find("\"ready\":true"), std::string::npos);
  std::this_thread::sleep_for(300ms);
  auto inner = sandboxed();
  size_t calls = 0;
  oomsnap::CaptureFn slow = [&](pid_t pid, const oomsnap::CaptureOptions& o, std::string& error) {
    ++calls;
    auto r = inner(pid, o, error);
    std::this_thread::sleep_for(o.budget);  // as if the capture took all of it
    return r;
  };
  oomsnap::CaptureOptions opts = quick();
  opts.budget = 400ms;
  oomsnap::Incident inc = incident_for(box);
  oomsnap::collect_incident(inc, box.fs(), opts, slow, 3);
  EXPECT_EQ(inc.victim->pid, a.pid());
  EXPECT_EQ(calls, 1u);
  EXPECT_TRUE(inc.other_processes.empty());
  EXPECT_EQ(inc.others_reason, "the incident's capture budget was spent");
}

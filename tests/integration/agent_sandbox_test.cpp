// The agent with its captures in capture processes: a capture that crashes,
// hogs memory, hangs or is still stuck at SIGTERM is recorded as failed with
// the reason, and the agent keeps taking events and capturing the next
// incident. Misbehaving capture processes come from tests/capture_hooks (the
// agent built with its test hooks, oomsnap-test-hooks, runs it through
// OOMSNAP_CAPTURE_HELPER), picked by the victim's comm. The shipped binary
// ignores that variable and every other test hook.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "agent_process.h"
#include "trap_targets.h"

using namespace oomsnap_test;
namespace fs = std::filesystem;

namespace {

const std::string kHookEnv = std::string("OOMSNAP_CAPTURE_HELPER=") + OOMSNAP_CAPTURE_HOOK_HELPER;

// A CPython process named `comm` (run through a symlink of that name) that
// fills `mb` MiB in `cg` over about half a second (1 MiB at a time, as a
// growing program would), prints "ready", and keeps allocating and freeing.
std::unique_ptr<Process> holder(const TestMemcg& cg, const std::string& dir, const std::string& comm, int mb) {
  const std::string link = dir + "/" + comm;
  if (!fs::exists(link)) fs::create_symlink("/usr/bin/python3", link);
  auto p = std::make_unique<Process>(
      std::vector<std::string>{link, "-c",
                               "import time\nheld = []\nfor i in range(" + std::to_string(mb) +
                                   "):\n    held.append(b'\\x01' * (1 << 20))\n    if i % 8 == 7: time.sleep(0.03)\n"
                                   "print('ready', flush=True)\n"
                                   // Then keep charging and uncharging 1 MiB: v1 thresholds are
                                   // checked on charge events (rate-limited), so a container that
                                   // went quiet right at the threshold is still seen above it.
                                   "while True:\n    churn = b'\\x02' * (1 << 20)\n    del churn\n    time.sleep(0.05)\n"},
      std::vector<std::string>{}, cg.dir());
  if (p->read_line(30s) != "ready") throw std::runtime_error("holder did not start");
  return p;
}

uint64_t status_kib(pid_t pid, const std::string& field) {
  std::string text = slurp("/proc/" + std::to_string(pid) + "/status");
  auto at = text.find(field + ":");
  return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + field.size() + 1, nullptr, 10);
}

// The agent's own pid (AgentProcess runs it through `sh -c exec`).
pid_t agent_pid(AgentProcess& a) { return a.process().pid(); }

// Whether the process has a handler for sig (SigCgt in /proc/PID/status).
bool catches(pid_t pid, int sig) {
  const std::string text = slurp("/proc/" + std::to_string(pid) + "/status");
  const auto at = text.find("SigCgt:");
  if (at == std::string::npos) throw std::runtime_error("no SigCgt in /proc/" + std::to_string(pid) + "/status");
  return (std::strtoull(text.c_str() + at + 7, nullptr, 16) >> (sig - 1)) & 1;
}

// A record whose CPython victim `pid` was captured: complete, or partial
// saying why (taken while the holder may still be filling its lists).
void expect_python_captured(const json& rec, pid_t pid) {
  EXPECT_EQ(rec["victim_pid"], pid) << rec.dump(2);
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  EXPECT_EQ(rec["tracer_data"]["language"], "python") << rec.dump(2);
  const json& snap = rec["tracer_data"]["snapshot"];
  EXPECT_TRUE(snap["status"] == "complete" || snap["status"] == "partial") << rec.dump(2);
}

// Every test hook of the agent, switched on.
const std::vector<std::string> kAllHooks = {kHookEnv, "OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2=9",
                                            "OOMSNAP_TEST_CAPTURE_IN_PROCESS=1"};

}  // namespace

// A capture process that dies by SIGSEGV: the incident is recorded failed,
// naming the signal, and the next container's incident is captured normally.
TEST(AgentSandbox, CrashedCaptureRecordedAndNextIncidentCaptured) {
  TestMemcg scope("scope");
  TestMemcg bad(scope, "bad", 128 * kMiB);
  TestMemcg good(scope, "good", 128 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "IntervalTracing = 1\nOomKillWindow = 1\nRunTracingToolTimeout = 5"),
                     {}, {kHookEnv}, {}, kTestHooksBinary);
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  auto crasher = holder(bad, dir, "hook-segv", 112);
  json first = agent.next_record(30s);
  ASSERT_FALSE(first.is_null()) << agent.log();
  EXPECT_EQ(first["victim_pid"], crasher->pid()) << first.dump(2);
  EXPECT_EQ(first["collection"]["status"], "failed") << first.dump(2);
  EXPECT_NE(first["collection"]["reason"].get<std::string>().find("capture process died: SIGSEGV"), std::string::npos)
      << first.dump(2);
  EXPECT_EQ(first["tracer_data"]["snapshot"]["status"], "failed") << first.dump(2);

  auto fine = holder(good, dir, "plain-python", 112);
  json second = agent.next_record(30s);
  ASSERT_FALSE(second.is_null()) << agent.log();
  expect_python_captured(second, fine->pid());
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  fs::remove_all(dir);
}

// The shipped binary with every test hook in its environment runs as if
// there were none: its captures run in its own capture process (a victim named
// hook-segv is captured, where the hook helper would die by SIGSEGV), not in
// the agent, and SIGUSR2 is not handled (no stalled loop to be had). The same
// environment does switch them on in oomsnap-test-hooks, so the checks see
// what they are meant to.
TEST(AgentSandbox, ShippedBinaryIgnoresTheTestHookEnvironment) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 128 * kMiB);
  const std::string config = "IntervalTracing = 1\nOomKillWindow = 1\nRunTracingToolTimeout = 5";
  {
    const std::string dir = temp_dir();
    AgentProcess hooked(dir, config_for(scope, dir, config), {}, kAllHooks, {}, kTestHooksBinary);
    ASSERT_TRUE(hooked.wait_log("ready:", 30s)) << hooked.log();
    EXPECT_TRUE(catches(agent_pid(hooked), SIGUSR2));
    EXPECT_NE(hooked.log().find("captures IN THE AGENT"), std::string::npos) << hooked.log();
    EXPECT_NE(hooked.log().find("never deploy it"), std::string::npos) << hooked.log();
    EXPECT_EQ(hooked.stop(), 0) << hooked.log();
    fs::remove_all(dir);
  }
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, config), {}, kAllHooks);
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_FALSE(catches(agent_pid(agent), SIGUSR2));
  EXPECT_NE(agent.log().find("captures in a capture process"), std::string::npos) << agent.log();
  EXPECT_EQ(agent.log().find("test hook"), std::string::npos) << agent.log();
  EXPECT_EQ(agent.log().find("oomsnap-test-hooks"), std::string::npos) << agent.log();

  auto victim = holder(box, dir, "hook-segv", 112);
  json rec = agent.next_record(30s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  expect_python_captured(rec, victim->pid());  // not crashed by the hook helper, which never ran
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  fs::remove_all(dir);
}

// A capture process over its memory cap: failed with the cap named; the
// agent's own memory does not grow with it.
TEST(AgentSandbox, CaptureOverMemoryCapLeavesAgentMemoryAlone) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 128 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir,
                     config_for(scope, dir, "OomKillWindow = 1\nRunTracingToolTimeout = 10\n[capture]\nMemoryMax = 268435456"),
                     {}, {kHookEnv}, {}, kTestHooksBinary);
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const uint64_t rss_before = status_kib(agent_pid(agent), "VmRSS");

  auto hog = holder(box, dir, "hook-hog", 112);
  json rec = agent.next_record(30s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["collection"]["status"], "failed") << rec.dump(2);
  EXPECT_NE(rec["collection"]["reason"].get<std::string>().find("exceeded its 256 MiB memory cap"), std::string::npos)
      << rec.dump(2);
  const uint64_t rss_after = status_kib(agent_pid(agent), "VmRSS");
  const uint64_t peak = status_kib(agent_pid(agent), "VmHWM");
  EXPECT_LT(rss_after, rss_before + 8 * 1024) << "before " << rss_before << " KiB, after " << rss_after << " KiB";
  EXPECT_LT(peak, 128 * 1024u) << "the agent's peak RSS " << peak << " KiB: the hog ran inside it?";
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  fs::remove_all(dir);
}

// SIGTERM while a capture is stuck (its capture process stopped, so only a
// kill ends it): the agent exits within 2 s and writes the incident, failed.
TEST(AgentSandbox, SigtermDuringStuckCaptureStopsWithin2sAndWritesTheRecord) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 128 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 30"), {}, {kHookEnv}, {},
                     kTestHooksBinary);
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto stuck = holder(box, dir, "hook-stop", 112);
  ASSERT_TRUE(agent.wait_log("collecting in", 30s)) << agent.log();
  std::this_thread::sleep_for(500ms);  // the capture process is stopped by now

  auto t0 = std::chrono::steady_clock::now();
  ::kill(agent_pid(agent), SIGTERM);
  int st = -1;
  while (st < 0 && std::chrono::steady_clock::now() - t0 < 5s) {
    st = agent.process().try_wait();
    std::this_thread::sleep_for(20ms);
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_GE(st, 0) << "the agent did not stop within 5 s\n" << agent.log();
  EXPECT_EQ(st, 0);
  EXPECT_LT(took, 2s);
  json rec = agent.next_record(2s);
  ASSERT_FALSE(rec.is_null()) << "pending record not written\n" << agent.log();
  EXPECT_EQ(rec["victim_pid"], stuck->pid());
  EXPECT_EQ(rec["collection"]["status"], "failed") << rec.dump(2);
  EXPECT_NE(rec["collection"]["reason"].get<std::string>().find("the agent is stopping"), std::string::npos)
      << rec.dump(2);
  fs::remove_all(dir);
}

// The scenario: one container's heap leads into a userfaultfd page
// nobody serves, and a second container's Go program leaks into its limit
// soon after. The trapped capture's hung read is reported, the capture runs
// again without the userfaultfd mapping and records a partial histogram that
// says what it did not read; the leaker is snapshotted complete before its kill.
TEST(AgentSandbox, TrappedContainerDoesNotBlindTheAgent) {
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg trapped(scope, "trapped", 128 * kMiB);
  TestMemcg leaky(scope, "leaky", 256 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir,
                                     "IntervalTracing = 1\nOomKillWindow = 20\nRunTracingToolTimeout = 2\n"
                                     "[capture]\nGrace = 1"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  auto trap = start_python_uffd_trap("/usr/bin/python3", "", 4, 112, trapped.dir());
  ASSERT_TRUE(agent.wait_log("collecting in " + trapped.rel_path(), 20s)) << agent.log();
  auto go = leaker(leaky, 25);  // ~10 s to its limit

  // The leaky container's episode is one incident (further triggers join its
  // timeline); its kill belongs to the record that has its snapshot.
  std::map<pid_t, json> by_victim;
  const auto until = std::chrono::steady_clock::now() + 90s;
  while (!(by_victim.count(trap.proc->pid()) && by_victim.count(go->pid()) && by_victim[go->pid()].contains("oom_kill")) &&
         std::chrono::steady_clock::now() < until) {
    json rec = agent.next_record(30s);
    ASSERT_FALSE(rec.is_null()) << agent.log();
    if (!rec["victim_pid"].is_number()) continue;
    const pid_t v = rec["victim_pid"].get<pid_t>();
    if (!by_victim.count(v) || rec.contains("oom_kill")) by_victim[v] = rec;
  }
  ASSERT_TRUE(by_victim.count(trap.proc->pid())) << agent.log();
  ASSERT_TRUE(by_victim.count(go->pid())) << agent.log();
  const json& t = by_victim[trap.proc->pid()];
  EXPECT_EQ(t["collection"]["status"], "collected") << t.dump(2);
  const json& ts = t["tracer_data"]["snapshot"];
  EXPECT_EQ(ts["status"], "partial") << t.dump(2);
  const std::string reason = ts["reason"];
  EXPECT_NE(reason.find("not read: "), std::string::npos) << reason;
  EXPECT_NE(reason.find("(userfaultfd)"), std::string::npos) << reason;
  bool payload = false;
  for (const auto& e : ts["entries"]) payload |= e["name"] == "bytes";  // what it holds
  EXPECT_TRUE(payload) << t.dump(2);
  // Within the budget (2 s); the capture process is killed at budget + grace at the latest.
  const double took_ms = (t["timeline"]["snapshot_complete_ns"].get<double>() -
                          t["timeline"]["collection_start_ns"].get<double>()) / 1e6;
  EXPECT_LT(took_ms, 3000) << t.dump(2);

  const json& g = by_victim[go->pid()];
  EXPECT_EQ(g["collection"]["status"], "collected") << g.dump(2);
  EXPECT_EQ(g["tracer_data"]["snapshot"]["status"], "complete") << g.dump(2);
  EXPECT_EQ(g["tracer_data"]["snapshot"]["entries"][0]["name"], "main.leakForever") << g.dump(2);
  ASSERT_TRUE(g.contains("oom_kill")) << g.dump(2);
  EXPECT_EQ(g["oom_kill"]["matches_victim"], true) << g.dump(2);
  EXPECT_GT(g["oom_kill"]["lead_ms"].get<double>(), 0.0) << g.dump(2);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  fs::remove_all(dir);
}

// SIGTERM while the capture of a trapped container waits on its hung read
// (before the stall is reported): the agent stops within 2 s and writes that
// incident (failed, or partial if the capture won the race).
TEST(AgentSandbox, SigtermDuringTrappedCaptureStopsWithin2s) {
  TestMemcg scope("scope");
  TestMemcg trapped(scope, "trapped", 128 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 30"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto trap = start_python_uffd_trap("/usr/bin/python3", "", 4, 112, trapped.dir());
  ASSERT_TRUE(agent.wait_log("collecting in", 20s)) << agent.log();
  // The stall is reported after 500 ms (a quarter of the budget, at most 500 ms):
  // stop inside that window.
  std::this_thread::sleep_for(150ms);

  auto t0 = std::chrono::steady_clock::now();
  ::kill(agent_pid(agent), SIGTERM);
  int st = -1;
  while (st < 0 && std::chrono::steady_clock::now() - t0 < 5s) {
    st = agent.process().try_wait();
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(st, 0) << "the agent did not stop within 5 s\n" << agent.log();
  EXPECT_EQ(st, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  json rec = agent.next_record(2s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["victim_pid"], trap.proc->pid());
  if (rec["collection"]["status"] == "failed") {
    EXPECT_NE(rec["collection"]["reason"].get<std::string>().find("the agent is stopping"), std::string::npos)
        << rec.dump(2);
  } else {
    EXPECT_EQ(rec["tracer_data"]["snapshot"]["status"], "partial") << rec.dump(2);
  }
  fs::remove_all(dir);
}

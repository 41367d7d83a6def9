// The last gasp in the agent, end to end: a Go server in a limited
// container is armed ahead of time, its limit is hit in one allocation with
// no trigger before the kill, and the kill's record carries the heap profile
// read in the dying process, exactly what it held. A SIGKILL that is not an
// OOM kill costs no decode.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "agent_process.h"
#include "go_matrix.h"

using namespace oomsnap_test;

namespace {

const char* kOnlyTheKill =
    "[triggers]\nBlacklist = [\"memcg_pressure\", \"memory_events\", \"psi\", \"threshold\", \"forecast\", "
    "\"process_exit\"]\n";

// name -> {objects, bytes}, summed over the record's entries of that name.
std::map<std::string, std::pair<uint64_t, uint64_t>> entries_by_name(const json& entries) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const json& e : entries) {
    m[e["name"]].first += e["objects"].get<uint64_t>();
    m[e["name"]].second += e["bytes"].get<uint64_t>();
  }
  return m;
}

// The fixture started in `cg` (sh moves itself in, then execs the fixture).
StartedGoFixture start_in(const TestMemcg& cg, std::vector<std::string> args) {
  std::vector<std::string> sh = {"-c", "echo $$ > " + cg.dir() + "/cgroup.procs && exec \"$@\"", "sh",
                                 go_fixture_path("1.26", "default")};
  sh.insert(sh.end(), args.begin(), args.end());
  return start_go_fixture("/bin/sh", sh);
}

}  // namespace

TEST(AgentLastGasp, AKillNoTriggerPrecededIsRecordedWithTheHeapProfileReadAtIt) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 256 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, std::string("MaxMemoryObjectEntries = 1000\n") + kOnlyTheKill));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  ASSERT_NE(agent.log().find("last gasp: on (raw_tp/signal_deliver"), std::string::npos) << agent.log();

  // A process that is not Go, beside it: looked at, not armed.
  Process sleeper({"/bin/sleep", "60"}, {}, box.dir());
  auto fx = start_in(box, {"-rate", "1", "-burst-mb", "1024"});
  ASSERT_TRUE(fx.proc);
  const pid_t pid = fx.proc->pid();
  ASSERT_TRUE(agent.wait_log("last gasp: armed " + std::to_string(pid) + " (heapfixture", 30s)) << agent.log();
  ASSERT_TRUE(agent.wait_log("last gasp: " + std::to_string(sleeper.pid()) + " (sleep) not armed", 10s))
      << agent.log();

  // A SIGKILL of another sender (a pod's grace period run out): read, since
  // the program cannot tell, but never decoded: no OOM kill's record wants it.
  auto other = start_in(box, {"-rate", "1"});
  ASSERT_TRUE(other.proc);
  const std::string other_pid = std::to_string(other.proc->pid());
  ASSERT_TRUE(agent.wait_log("last gasp: armed " + other_pid + " (heapfixture", 30s)) << agent.log();
  ASSERT_EQ(::kill(other.proc->pid(), SIGKILL), 0);
  ASSERT_TRUE(agent.wait_log("last gasp: " + other_pid + " (heapfixture) read at its SIGKILL", 10s)) << agent.log();

  ASSERT_EQ(::kill(pid, SIGUSR1), 0);  // the burst: 1 GiB in one allocation, in a 256 MiB box
  json rec = agent.next_record(60s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  int status = -1;
  for (int i = 0; i < 200 && (status = fx.proc->try_wait()) == -1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;

  EXPECT_EQ(rec["trigger"]["type"], "oom_kill") << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["pid"], pid);
  EXPECT_EQ(rec["victim_pid"], pid);
  EXPECT_EQ(rec["oom_kill"]["matches_victim"], true);
  EXPECT_EQ(rec["collection"]["status"], "collected");
  EXPECT_EQ(rec["collection"]["reason"].get<std::string>().rfind(
                "snapshot read by the last gasp, in the victim at its kill; no snapshot before the kill", 0),
            0u)
      << rec["collection"].dump(2);
  ASSERT_TRUE(rec.contains("tracer_data")) << rec.dump(2);
  const json& s = rec["tracer_data"]["snapshot"];
  EXPECT_EQ(s["source"], "last_gasp");
  ASSERT_EQ(s["status"], "complete") << s.dump(2);
  // Exact: every site the fixture holds, with its objects and bytes (rate 1).
  auto got = entries_by_name(s["entries"]);
  for (auto& [name, site] : fx.census["sites"].items()) {
    ASSERT_TRUE(got.count(name)) << "site " << name << " missing: " << s.dump(2);
    EXPECT_EQ(got[name].first, site["objects"].get<uint64_t>()) << name;
    EXPECT_EQ(got[name].second, site["bytes"].get<uint64_t>()) << name;
  }
  // And the allocation that hit the limit, in `recent`.
  bool burst = false;
  for (const json& e : s["recent"]["entries"])
    if (e["name"] == "main.burst") burst = e["objects"] == 1 && e["bytes"] == 1024 * kMiB;
  EXPECT_TRUE(burst) << s["recent"].dump(2);
  // /proc was gone by then: the RSS the kernel saw at the kill, and so said.
  EXPECT_EQ(rec["process_memory"]["rss_bytes"], rec["oom_kill"]["rss_bytes"]) << rec["process_memory"].dump(2);
  EXPECT_GT(rec["process_memory"]["rss_bytes"].get<uint64_t>(), 200 * kMiB);
  EXPECT_EQ(rec["process_memory"]["status"].get<std::string>().rfind("rss only: as the kernel saw it at the kill", 0),
            0u);
  // The kill came first: lead_ms is negative, the snapshot's time after the kill's.
  EXPECT_LT(rec["oom_kill"]["lead_ms"].get<double>(), 0.0);
  EXPECT_EQ(rec["agent"]["last_gasp_walks"], 2) << rec["agent"].dump(2);
  EXPECT_EQ(rec["agent"]["last_gasp_decoded"], 1) << "the other SIGKILL was decoded: " << rec["agent"].dump(2);
  EXPECT_EQ(agent.log().find("last gasp: " + other_pid + " decoded"), std::string::npos);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

// A hostile Go target cannot push the agent out of memory (issue #28 item 1):
// 4 KiB function names, stacks 1,000 frames deep (GODEBUG=profstackdepth=1024)
// and 48 KiB allocation sites make a result of ~41 MB, which the agent used to
// take whole (165 MiB in the capture process, 176 MiB in the parent). The
// agent runs in a 256 MiB memory cgroup of its own, as in the DaemonSet and
// the systemd unit (its capture process in it too); it must survive, write
// the record, and the record must say what the capture process cut.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "agent_process.h"

using namespace oomsnap_test;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kAgentLimit = 256 * kMiB;

// tests/fixtures/hostile/gen_deepnames.py built with Go 1.26, offline, with
// the fixtures' warm build cache; the path of the binary, or empty (and a
// failure) when it could not be built.
std::string build_deep_names(const std::string& dir) {
  const std::string src = std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/hostile/gen_deepnames.py";
  const std::string go = std::string(OOMSNAP_GO_CACHE) + "/1.26/bin/go";
  const std::string cmd = "cd " + dir + " && python3 " + src +
                          " main.go 4096 1000 2000 16 49152 && env -u GOFLAGS -u GOROOT -u GOPATH GOTOOLCHAIN=local "
                          "GOPROXY=off GO111MODULE=off CGO_ENABLED=0 GOCACHE=" +
                          std::string(OOMSNAP_GO_CACHE) + "/../gocache-1.26 " + go + " build -o deepnames main.go 2>&1";
  std::string out;
  const int rc = run_status(cmd, &out);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return rc == 0 ? dir + "/deepnames" : "";
}

uint64_t status_kib(pid_t pid, const std::string& field) {
  const std::string text = slurp("/proc/" + std::to_string(pid) + "/status");
  const auto at = text.find(field + ":");
  return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + field.size() + 1, nullptr, 10);
}

// memory.oom_control's "oom_kill N" (v1): OOM kills in the cgroup so far.
uint64_t oom_kills(const TestMemcg& cg) {
  const std::string text = slurp(cg.dir() + "/memory.oom_control");
  const auto at = text.find("oom_kill ");
  return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + 9, nullptr, 10);
}

}  // namespace

TEST(AgentHostileMemory, DeepNamesTargetIsCutToFitAndTheAgentSurvivesIn256MiB) {
  const std::string dir = temp_dir();
  const std::string target = build_deep_names(dir);
  ASSERT_FALSE(target.empty());

  TestMemcg agent_cg("agent", kAgentLimit);
  TestMemcg scope("scope");
  // The target holds ~115 MiB: over the 90 % threshold of 124 MiB.
  TestMemcg box(scope, "box", 124 * kMiB);
  // The agent joins its cgroup before exec, so its capture processes start there too.
  const std::vector<std::string> join = {"/bin/sh", "-c", "echo $$ > " + agent_cg.dir() + "/cgroup.procs && exec \"$@\"",
                                         "join-agent-cgroup"};
  AgentProcess agent(dir, config_for(scope, dir, "IntervalTracing = 1\nOomKillWindow = 1\nRunTracingToolTimeout = 20"), {}, {}, join);
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const pid_t agent_pid = agent.process().pid();
  ASSERT_NE(slurp(agent_cg.dir() + "/cgroup.procs").find(std::to_string(agent_pid)), std::string::npos);

  Process go({target}, {"GODEBUG=profstackdepth=1024"}, box.dir());
  ASSERT_NE(go.read_line(120s).find("\"ready\":true"), std::string::npos);
  json rec = agent.next_record(120s);
  ASSERT_FALSE(rec.is_null()) << agent.log();

  EXPECT_EQ(rec["victim_pid"], go.pid()) << rec.dump(2).substr(0, 4096);
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2).substr(0, 4096);
  EXPECT_EQ(rec["tracer_data"]["language"], "go");
  const json& snap = rec["tracer_data"]["snapshot"];
  EXPECT_EQ(snap["status"], "complete") << snap.dump(2).substr(0, 4096);
  EXPECT_TRUE(snap["output_truncated"].get<bool>());
  const std::string reason = snap.value("reason", "");
  EXPECT_NE(reason.find("result cut to fit the 4096 KiB result cap"), std::string::npos) << reason;
  EXPECT_NE(reason.find("names cut to 1024 bytes"), std::string::npos) << reason;
  EXPECT_NE(reason.find("stacks cut to 32 KiB"), std::string::npos) << reason;
  ASSERT_FALSE(snap["entries"].empty());
  EXPECT_LE(snap["entries"][0]["name"].get<std::string>().size(), 1024u + 3);

  // Alive, never OOM-killed, and its own peak far below its cgroup's limit.
  EXPECT_LT(agent.process().try_wait(), 0) << agent.log();
  EXPECT_EQ(oom_kills(agent_cg), 0u);
  const uint64_t agent_peak_kib = status_kib(agent_pid, "VmHWM");
  const uint64_t cgroup_peak = std::strtoull(slurp(agent_cg.dir() + "/memory.max_usage_in_bytes").c_str(), nullptr, 10);
  std::printf("agent VmHWM %llu KiB; agent cgroup peak (agent + capture process) %llu KiB\n",
              static_cast<unsigned long long>(agent_peak_kib), static_cast<unsigned long long>(cgroup_peak >> 10));
  EXPECT_LT(agent_peak_kib, 128 * 1024u) << "the agent's peak RSS";
  EXPECT_LT(cgroup_peak, kAgentLimit);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  fs::remove_all(dir);
}

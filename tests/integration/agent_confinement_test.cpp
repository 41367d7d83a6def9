// The agent confines itself once its BPF programs are attached (issue #28):
// its status shows a seccomp filter, a ptrace(PTRACE_ATTACH) or a BPF program
// load made from inside it (the test hook OOMSNAP_TEST_CONFINEMENT_PROBE_PID,
// on the loop thread and on a thread started before the filter) answers
// EPERM, and the capture process it starts inherits the filter. Captures
// under the filter are covered by every other agent test.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "agent_process.h"

using namespace oomsnap_test;

namespace {

// A field of /proc/PID/status ("Seccomp", "TracerPid"), or "" when absent.
std::string status_field(pid_t pid, const std::string& name) {
  const std::string status = "\n" + slurp("/proc/" + std::to_string(pid) + "/status");
  std::smatch m;
  if (!std::regex_search(status, m, std::regex("\n" + name + ":\\s*([^\n]*)"))) return "";
  return m[1];
}

// The children of every thread of `pid`.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    std::istringstream in(slurp(t.path().string() + "/children"));
    for (pid_t c; in >> c;) out.push_back(c);
  }
  return out;
}

// The agent's status says it is under seccomp filters, and how many.
int seccomp_filters(pid_t pid) {
  EXPECT_EQ(status_field(pid, "Seccomp"), "2") << "pid " << pid << " is not in seccomp filter mode";
  return std::atoi(status_field(pid, "Seccomp_filters").c_str());
}

}  // namespace

TEST(AgentConfinement, PtraceAndBpfLoadsFromInsideTheAgentGetEperm) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  // What the agent would attach to: a process it could trace as root without the filter.
  Process target({"/bin/sleep", "600"});
  ASSERT_TRUE(target.wait_exec(5s));
  const std::string pid = std::to_string(target.pid());
  AgentProcess agent(dir, config_for(scope, dir, ""), {}, {"OOMSNAP_TEST_CONFINEMENT_PROBE_PID=" + pid}, {},
                     kTestHooksBinary);
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  ASSERT_TRUE(agent.wait_log("confinement probe on the capture worker", 30s)) << agent.log();
  const std::string log = agent.log();
  EXPECT_NE(log.find("confined: seccomp deny-list loaded on all"), std::string::npos) << log;
  const std::string refused = "ptrace(PTRACE_ATTACH, " + pid +
                              ") failed: EPERM; bpf(BPF_PROG_LOAD) failed: EPERM; syslog(SIZE_UNREAD) failed: EPERM; "
                              "syslog(SIZE_BUFFER) succeeded";
  for (const char* thread : {"loop thread", "capture worker"})
    EXPECT_NE(log.find(std::string("confinement probe on the ") + thread + ": " + refused), std::string::npos)
        << thread << ":\n" << log;
  EXPECT_EQ(status_field(target.pid(), "TracerPid"), "0");

  const pid_t agent_pid = agent.process().pid();
  const int filters = seccomp_filters(agent_pid);
  EXPECT_GE(filters, 1);
  // The capture process started ahead of the first capture inherits the
  // agent's filter (and adds its own when it confines itself).
  std::vector<pid_t> children;
  for (int i = 0; i < 200 && (children = children_of(agent_pid)).empty(); ++i) std::this_thread::sleep_for(50ms);
  ASSERT_FALSE(children.empty()) << "no capture process started\n" << agent.log();
  for (pid_t child : children) EXPECT_GE(seccomp_filters(child), filters) << "capture process " << child;
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

// The shipped binary confines itself the same way (it lacks only the probe).
TEST(AgentConfinement, ShippedAgentRunsUnderItsOwnFilter) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, ""));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_NE(agent.log().find("confined: seccomp deny-list loaded on all"), std::string::npos) << agent.log();
  EXPECT_EQ(agent.log().find("confinement probe"), std::string::npos) << agent.log();
  EXPECT_GE(seccomp_filters(agent.process().pid()), 1);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

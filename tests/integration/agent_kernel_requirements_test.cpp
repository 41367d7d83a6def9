// The agent's start-up checks of what the kernel must have (#16): BTF for the
// CO-RE relocations, and the BPF ring buffer (Linux 5.8). Each is taken away
// from one agent process only: BTF by a tmpfs over /sys/kernel/btf in a mount
// namespace of its own, the ring buffer by a seccomp filter that answers map
// creation EINVAL as a kernel before 5.8 does. Either way the agent must exit 1
// at once with a message naming what is missing, not fail later on a
// relocation error or run without events.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <thread>

#include "agent_process.h"

using namespace std::chrono_literals;
using namespace oomsnap_test;

namespace {

// The agent's exit status, or -1 if it is still running after `timeout`.
int wait_exit(AgentProcess& agent, std::chrono::milliseconds timeout) {
  for (auto end = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < end;) {
    int st = agent.process().try_wait();
    if (st >= 0) return st;
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

}  // namespace

TEST(AgentKernelRequirements, NoBtfExitsOneNamingIt) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  // Private mounts, so the tmpfs hides BTF from this agent alone.
  const std::vector<std::string> without_btf = {
      "/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
      "mount -t tmpfs oomsnap-no-btf /sys/kernel/btf && exec \"$0\" \"$@\""};
  AgentProcess agent(dir, config_for(scope, dir, ""), {}, {}, without_btf);
  const int st = wait_exit(agent, 30s);
  ASSERT_TRUE(st >= 0 && WIFEXITED(st)) << "status " << st << "\n" << agent.log();
  EXPECT_EQ(WEXITSTATUS(st), 1) << agent.log();
  const std::string log = agent.log();
  EXPECT_NE(log.find(") has no BTF: /sys/kernel/btf/vmlinux is missing"), std::string::npos) << log;
  EXPECT_NE(log.find("CONFIG_DEBUG_INFO_BTF=y"), std::string::npos) << log;
  EXPECT_EQ(log.find("ready:"), std::string::npos) << log;
  // The check ran before any program was loaded: no libbpf relocation error.
  EXPECT_EQ(log.find("CO-RE relocation"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

TEST(AgentKernelRequirements, NoRingBufferExitsOneNamingIt) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, ""), {}, {}, {OOMSNAP_BPF_MAP_CREATE_EINVAL});
  const int st = wait_exit(agent, 30s);
  ASSERT_TRUE(st >= 0 && WIFEXITED(st)) << "status " << st << "\n" << agent.log();
  EXPECT_EQ(WEXITSTATUS(st), 1) << agent.log();
  const std::string log = agent.log();
  EXPECT_NE(log.find(") has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF, Linux 5.8 and later"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("ready:"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

// The same agent and configuration start with nothing taken away: the two
// failures above come from what was taken, not from the set-up.
TEST(AgentKernelRequirements, StartsWithBtfAndRingBuffer) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, ""));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

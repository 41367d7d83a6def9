// The agent as a systemd service (deploy/oomsnap.service, Type=notify): this
// machine has no systemd as PID 1, so the test plays systemd's part the way
// systemd does it: a datagram socket in NOTIFY_SOCKET and WATCHDOG_USEC in the
// environment; the agent's libsystemd sd_notify talks to it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "agent_process.h"

using namespace oomsnap_test;

namespace {

// systemd's end of the notification socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof a.sun_path - 1);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  // The next message within `timeout`, "" when none came.
  std::string next(std::chrono::milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }
  // Messages until one contains `what` (returned), or "" after `timeout`.
  std::string wait_for(const std::string& what, std::chrono::milliseconds timeout, std::vector<std::string>* seen) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      std::string m = next(100ms);
      if (m.empty()) continue;
      if (seen) seen->push_back(m);
      if (m.find(what) != std::string::npos) return m;
    }
    return "";
  }
  // How many messages containing `what` arrive within `span`.
  int count(const std::string& what, std::chrono::milliseconds span) {
    int n = 0;
    const auto end = std::chrono::steady_clock::now() + span;
    while (std::chrono::steady_clock::now() < end) {
      std::string m = next(50ms);
      if (m.find(what) != std::string::npos) ++n;
    }
    return n;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace

// READY=1 (with STATUS=) once the agent watches, WATCHDOG=1 at half of
// WATCHDOG_USEC from the event loop, none while the loop is stalled,
// RELOADING=1 then READY=1 around SIGHUP, STOPPING=1 at SIGTERM.
TEST(AgentSystemd, NotifiesReadyWatchdogReloadAndStop) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  NotifySocket sock(dir + "/notify.sock");
  ASSERT_TRUE(sock.ok()) << "cannot bind " << dir << "/notify.sock";
  AgentProcess agent(dir, config_for(scope, dir, ""), {},
                     {"NOTIFY_SOCKET=" + dir + "/notify.sock", "WATCHDOG_USEC=1000000",
                      "OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2=3"},
                     {}, kTestHooksBinary);
  std::vector<std::string> seen;
  const std::string ready = sock.wait_for("READY=1", 30s, &seen);
  ASSERT_FALSE(ready.empty()) << "no READY=1; messages seen: " << seen.size() << "\n" << agent.log();
  EXPECT_NE(agent.log().find("ready:"), std::string::npos) << "READY=1 before the agent was ready";
  EXPECT_NE(ready.find("STATUS="), std::string::npos) << ready;
  EXPECT_NE(ready.find("watching"), std::string::npos) << ready;
  EXPECT_EQ(ready.find("WATCHDOG=1"), std::string::npos);

  // Every 0.5 s (half of 1 s) while the loop turns: 4-7 in 3 s.
  const int pings = sock.count("WATCHDOG=1", 3000ms);
  EXPECT_GE(pings, 4);
  EXPECT_LE(pings, 8);

  // A stalled loop stops the pings, so systemd would restart the agent.
  ::kill(agent.process().pid(), SIGUSR2);  // the loop sleeps 3 s (test hook)
  std::this_thread::sleep_for(300ms);       // the signal reaches the loop
  EXPECT_EQ(sock.count("WATCHDOG=1", 2000ms), 0) << "pings while the loop was stalled";
  EXPECT_FALSE(sock.wait_for("WATCHDOG=1", 5s, nullptr).empty()) << "no pings after the stall";

  ::kill(agent.process().pid(), SIGHUP);
  seen.clear();
  EXPECT_FALSE(sock.wait_for("RELOADING=1", 10s, &seen).empty()) << agent.log();
  EXPECT_FALSE(sock.wait_for("READY=1", 10s, &seen).empty()) << agent.log();

  ::kill(agent.process().pid(), SIGTERM);
  EXPECT_FALSE(sock.wait_for("STOPPING=1", 10s, nullptr).empty());
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// Outside systemd (no NOTIFY_SOCKET) nothing is sent and nothing fails.
TEST(AgentSystemd, WithoutSystemdNothingIsSent) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, ""), {}, {"WATCHDOG_USEC=1000000"});
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_EQ(agent.log().find("sd_notify"), std::string::npos) << agent.log();
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// Under systemd with a libsystemd that cannot serve (here a stub
// libsystemd.so.0 without sd_notify, found first through LD_LIBRARY_PATH):
// the agent still watches, says in a warning why nothing can be sent, and
// sends nothing (a Type=notify unit would time out, and the warning says
// why).
TEST(AgentSystemd, UnusableLibsystemdIsWarnedAndTheAgentRuns) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  const std::string stub = dir + "/libsystemd.so.0";
  const std::string build = "printf 'int not_sd_notify;\\n' | cc -shared -fPIC -x c -o " + stub + " -";
  ASSERT_EQ(std::system(build.c_str()), 0) << build;
  NotifySocket sock(dir + "/notify.sock");
  ASSERT_TRUE(sock.ok());
  AgentProcess agent(dir, config_for(scope, dir, ""), {},
                     {"NOTIFY_SOCKET=" + dir + "/notify.sock", "WATCHDOG_USEC=1000000", "LD_LIBRARY_PATH=" + dir});
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_TRUE(agent.wait_log("NOTIFY_SOCKET is set, but nothing can be sent", 5s)) << agent.log();
  EXPECT_NE(agent.log().find("sd_notify"), std::string::npos) << agent.log();  // dlsym's answer names it
  EXPECT_EQ(sock.next(1500ms), "") << "a message was sent";
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

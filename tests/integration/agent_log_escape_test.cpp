// The agent's log (stderr, one line per event) with target-controlled text
// in it: a process that names itself with a newline, and a container cgroup
// whose name holds a carriage return and a terminal escape, must not be able
// to start a forged log line or drive the terminal; they appear escaped
// (base/log_escape.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "agent_process.h"
#include "base/log_escape.h"

using namespace std::chrono_literals;
using nlohmann::json;
using namespace oomsnap_test;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// A Python process in `box` that names itself `comm` (prctl PR_SET_NAME), then
// holds ~40 MiB: over a 50 % threshold of 64 MiB, no OOM.
std::unique_ptr<Process> start_named_holder(const std::string& comm, const TestMemcg& box) {
  const char* src =
      "import ctypes, os, sys, time\n"
      "ctypes.CDLL(None).prctl(15, os.fsencode(sys.argv[1]), 0, 0, 0)\n"
      "hold = b'x' * (40 << 20)\n"
      "print('ready', flush=True)\n"
      "time.sleep(600)\n";
  auto py = std::make_unique<Process>(std::vector<std::string>{"/usr/bin/python3", "-c", src, comm},
                                      std::vector<std::string>{}, box.dir());
  EXPECT_NE(py->read_line(30s).find("ready"), std::string::npos);
  std::string proc_comm;
  read_file("/proc/" + std::to_string(py->pid()) + "/comm", proc_comm);
  EXPECT_EQ(proc_comm, comm + "\n");
  return py;
}

// An agent watching a 64 MiB box with a 50 % threshold, ready.
struct BoxedAgent {
  TestMemcg scope{"scope"};
  TestMemcg box{scope, "box", 64 * kMiB};
  std::string dir = temp_dir();
  AgentProcess agent{dir, config_for(scope, dir, "ThresholdPercent = 50\nOomKillWindow = 0.5\nRunTracingToolTimeout = 5")};
  ~BoxedAgent() { std::filesystem::remove_all(dir); }
};

}  // namespace

// comm is at most 15 bytes: a newline, then the start of a forged line (with
// a backslash, which the escaping doubles so that "\x0a" in a comm cannot
// pass for an escaped newline).
TEST(AgentLogEscape, CommWithNewlineCannotForgeALogLine) {
  const std::string comm = "\nFORGED\\oomsnap";
  ASSERT_EQ(comm.size(), 15u);
  BoxedAgent run;
  AgentProcess& agent = run.agent;
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto holder = start_named_holder(comm, run.box);
  ASSERT_FALSE(testing::Test::HasFailure());  // it is ready, named as asked
  Process& py = *holder;

  json rec = agent.next_record(60s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["victim_pid"], py.pid()) << rec.dump(2);
  EXPECT_EQ(rec["comm"], comm);  // the record keeps it (JSON escapes it)
  ASSERT_TRUE(agent.wait_log("recorded", 10s)) << agent.log();

  const std::string log = agent.log();
  for (const auto& line : lines_of(log)) EXPECT_NE(line.rfind("FORGED", 0), 0u) << "forged line: " << line;
  EXPECT_NE(log.find("victim " + std::to_string(py.pid()) + " (\\x0aFORGED\\\\oomsnap)"), std::string::npos) << log;
  EXPECT_EQ(agent.stop(), 0);
}

// A comm with a C1 control (U+009B, a terminal's CSI), a right-to-left
// override, a line separator and DEL: JSON would let all four through raw,
// and `kubectl logs` or a log UI shows them as they are. The record is
// printable ASCII, each of them a \u escape, and reads back to the comm.
TEST(AgentLogEscape, CommWithC1BidiAndDelIsPrintableAsciiInTheRecord) {
  const std::string comm = std::string("\xc2\x9b") + "\xe2\x80\xae" + "\xe2\x80\xa8" + "\x7f" + "evil";
  ASSERT_LE(comm.size(), 15u);
  BoxedAgent run;
  AgentProcess& agent = run.agent;
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  auto holder = start_named_holder(comm, run.box);
  ASSERT_FALSE(testing::Test::HasFailure());  // it is ready, named as asked
  Process& py = *holder;

  std::string line;
  json rec = agent.next_record(60s, line);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["victim_pid"], py.pid()) << line;
  EXPECT_EQ(rec["comm"], comm);
  for (unsigned char c : line) ASSERT_TRUE(c >= 0x20 && c <= 0x7e) << "raw byte " << int(c) << " in the record";
  EXPECT_NE(line.find(R"("comm":"\u009b\u202e\u2028\u007fevil")"), std::string::npos) << line;
  EXPECT_EQ(agent.stop(), 0);
}

// The kernel refuses "\n" in a cgroup name, not "\r" or ESC: a name that
// would rewrite the terminal line ("\r", erase line) is escaped wherever the
// agent logs the container.
TEST(AgentLogEscape, CgroupNameWithControlCharactersIsEscaped) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box\r\x1b[2Kforged", 64 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, ""));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  Process sleeper({"/bin/sleep", "60"}, {}, box.dir());
  ASSERT_TRUE(sleeper.wait_exec(10s));
  ::kill(sleeper.pid(), SIGTERM);
  json rec = agent.next_record(15s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  EXPECT_EQ(rec["trigger"]["type"], "process_exit");
  EXPECT_EQ(rec["container"]["cgroup_path"], box.rel_path());
  ASSERT_TRUE(agent.wait_log("recorded", 10s)) << agent.log();

  const std::string log = agent.log();
  // (The log is printed escaped: raw, it would drive the terminal.)
  EXPECT_EQ(log.find('\r'), std::string::npos) << oomsnap::printable(log);
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << oomsnap::printable(log);
  EXPECT_NE(log.find("box\\x0d\\x1b[2Kforged"), std::string::npos) << oomsnap::printable(log);
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// The agent's record writing never holds up its event loop: another process
// holding the store's lock for 30 s (any local user who can open the
// directory could) stalls neither event intake nor stdout, and the records
// reach the file, in order, once the lock is released.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "agent_process.h"

using namespace oomsnap_test;
namespace fs = std::filesystem;

TEST(AgentSink, StoreLockHeld30sStallsNothingAndRecordsLandAfter) {
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 64 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, ""));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const std::string store = dir + "/records";
  ASSERT_TRUE(fs::is_directory(store));

  // Another process takes the store's lock and keeps it for 30 s.
  Process holder({"/usr/bin/flock", "--exclusive", store, "/bin/sleep", "30"});
  ASSERT_TRUE(holder.wait_exec(10s));
  std::this_thread::sleep_for(200ms);

  // Incidents keep coming meanwhile: processes in the container killed by a
  // signal, one every 1.5 s; each record must reach stdout at once.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> victims;
  while (std::chrono::steady_clock::now() - t0 < 28s) {
    Process victim({"/bin/sleep", "60"}, {}, box.dir());
    ASSERT_TRUE(victim.wait_exec(10s));
    ::kill(victim.pid(), SIGKILL);
    json rec = agent.next_record(5s);  // not held up by the file sink
    ASSERT_FALSE(rec.is_null()) << "no record on stdout within 5 s while the store is locked\n" << agent.log();
    EXPECT_EQ(rec["exit"]["pid"], victim.pid());
    EXPECT_EQ(rec["agent"]["bpf_ring_drops"], 0);
    victims.push_back(victim.pid());
    std::this_thread::sleep_for(1500ms);
  }
  ASSERT_GE(victims.size(), 10u);
  EXPECT_NE(agent.log().find("held by pid"), std::string::npos) << "the lock holder is named in the log\n" << agent.log();

  // Released: every record lands in the file, in order.
  holder.kill_now();
  std::vector<pid_t> in_file;
  for (int i = 0; i < 100 && in_file.size() < victims.size(); ++i) {
    std::this_thread::sleep_for(100ms);
    in_file.clear();
    std::istringstream lines(slurp(store + "/oomsnap.jsonl"));
    for (std::string line; std::getline(lines, line);)
      if (auto j = json::parse(line, nullptr, false); !j.is_discarded() && j.contains("exit")) in_file.push_back(j["exit"]["pid"]);
  }
  EXPECT_EQ(in_file, victims);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  const std::string log = agent.log();
  auto stopped = log.rfind("stopped: ");
  ASSERT_NE(stopped, std::string::npos) << log;
  auto counters = json::parse(log.substr(log.find('{', stopped), log.find('\n', stopped) - log.find('{', stopped)));
  EXPECT_EQ(counters["bpf_ring_drops"], 0);
  EXPECT_EQ(counters["records_lost"], 0);
  EXPECT_GT(counters["sink_errors"].get<uint64_t>(), 0u);  // the lock time-outs were counted
  fs::remove_all(dir);
}

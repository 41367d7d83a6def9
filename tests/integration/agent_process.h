// Shared by the agent's end-to-end tests: the agent as a child process
// (records from its stdout, its log in a file), configs scoped to a test
// cgroup, and a leaking Go fixture.
#pragma once
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "record_schema.h"
#include "test_cgroup.h"
#include "test_process.h"

namespace oomsnap_test {

using namespace std::chrono_literals;
using nlohmann::json;


inline const std::string kFixture = std::string(OOMSNAP_FIXTURES) + "/go/1.26/default/heapfixture";
inline constexpr uint64_t kMiB = 1 << 20;
// The agent built with its test hooks (cli/test_hooks.h): for the tests that
// set them in its environment. Every other test runs the shipped binary.
inline const std::string kTestHooksBinary = OOMSNAP_TEST_HOOKS_BINARY;

inline std::string temp_dir() {
  char tmpl[] = "/tmp/oomsnap-agent-XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp");
  return d;
}

// The agent as a child process: records arrive as lines on its stdout, the
// log goes to a file the test can search.
class AgentProcess {
 public:
  // env: extra NAME=value for the agent (e.g. NOTIFY_SOCKET).
  // launcher: a command the agent runs under (e.g. setpriv with fewer capabilities).
  // binary: kTestHooksBinary for a test hook in env (e.g. OOMSNAP_CAPTURE_HELPER).
  AgentProcess(const std::string& dir, const std::string& config_text, std::vector<std::string> extra_args = {},
               const std::vector<std::string>& env = {}, const std::vector<std::string>& launcher = {},
               const std::string& binary = OOMSNAP_BINARY)
      : dir_(dir), log_(dir + "/agent.log") {
    std::ofstream(dir + "/agent.toml") << config_text;
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"" + log_ + "\""};
    argv.insert(argv.end(), launcher.begin(), launcher.end());
    for (const std::string& a : {binary, std::string("watch"), std::string("--config")}) argv.push_back(a);
    for (const std::string& a : {dir + "/agent.toml", std::string("--log-level"), std::string("debug")}) argv.push_back(a);
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    proc_ = std::make_unique<Process>(argv, env);
  }
  ~AgentProcess() {
    if (proc_ && proc_->try_wait() < 0) {
      ::kill(proc_->pid(), SIGTERM);
      for (int i = 0; i < 100 && proc_->try_wait() < 0; ++i) std::this_thread::sleep_for(50ms);
    }
  }
  // Waits for a log line containing `what`.
  bool wait_log(const std::string& what, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (log().find(what) != std::string::npos) return true;
      if (proc_->try_wait() >= 0) return log().find(what) != std::string::npos;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  std::string log() const { return oomsnap_test::slurp(log_); }
  // The next record (parsed), or null on timeout.
  json next_record(std::chrono::milliseconds timeout) {
    std::string line;
    return next_record(timeout, line);
  }
  // The same, with the line as the agent wrote it in `line`.
  json next_record(std::chrono::milliseconds timeout, std::string& line) {
    line = proc_->read_line(timeout);
    if (line.empty()) return nullptr;
    // Every record an agent under test writes holds to the published schema.
    EXPECT_EQ(record_schema_errors(line), "") << line;
    return json::parse(line);
  }
  Process& process() { return *proc_; }
  // SIGTERM and wait for the exit status.
  int stop() {
    ::kill(proc_->pid(), SIGTERM);
    for (int i = 0; i < 200; ++i) {
      int st = proc_->try_wait();
      if (st >= 0) return st;
      std::this_thread::sleep_for(50ms);
    }
    return -1;
  }

 private:
  std::string dir_, log_;
  std::unique_ptr<Process> proc_;
};

// http_listen: [http] Listen. Off unless a test asks: ctest runs many agents
// at once, and the default 127.0.0.1:9463 would let only one of them start.
// "127.0.0.1:0" takes a free port; http_port() reads it from the log.
inline std::string config_for(const TestMemcg& scope, const std::string& dir, const std::string& extra,
                              const std::string& http_listen = "") {
  return extra + "\n[storage]\nPath = \"" + dir + "/records\"\n[cgroup]\nScope = \"" + scope.rel_path() +
         "\"\n[http]\nListen = \"" + http_listen + "\"\n";
}

// The port the agent's HTTP endpoint bound, from its log line
// "http: listening on 127.0.0.1:PORT"; 0 when it did not (yet).
inline uint16_t http_port(AgentProcess& agent, std::chrono::milliseconds timeout) {
  const std::string mark = "http: listening on 127.0.0.1:";
  if (!agent.wait_log(mark, timeout)) return 0;
  const std::string log = agent.log();
  return static_cast<uint16_t>(std::strtoul(log.c_str() + log.find(mark) + mark.size(), nullptr, 10));
}

// A Go fixture leaking at `mb_per_s` (up to `limit_mb`, 0 = forever) inside `cg`.
inline std::unique_ptr<Process> leaker(const TestMemcg& cg, double mb_per_s, double limit_mb = 0) {
  std::vector<std::string> argv = {kFixture, "-leak-mb-per-s", std::to_string(mb_per_s)};
  if (limit_mb > 0) {
    argv.push_back("-leak-limit-mb");
    argv.push_back(std::to_string(limit_mb));
  }
  auto p = std::make_unique<Process>(argv, std::vector<std::string>{}, cg.dir());
  if (p->read_line(20s).find("\"ready\":true") == std::string::npos)
    throw std::runtime_error("fixture did not start in " + cg.dir());
  return p;
}

inline uint64_t usage_of(const TestMemcg& cg) {
  return std::strtoull(oomsnap_test::slurp(cg.dir() + "/memory.usage_in_bytes").c_str(), nullptr, 10);
}

inline void require_fixture() {
  if (access(kFixture.c_str(), X_OK) != 0) FAIL() << "fixture missing: " << kFixture << " (tools/build-go-fixtures.sh)";
}


}  // namespace oomsnap_test

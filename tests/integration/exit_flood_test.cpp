// Issue #12: a container that kills its own processes in a loop (thousands of
// deaths by a signal) must neither drown OOM-kill events nor fill the record
// store. Real floods in real memory cgroups below this test's memcg, the real
// BPF programs and the real agent:
// - BPF: exits rate-limited per memcg with the suppressed count, tracked
//   exits never limited, OOM kills in their own ring buffer (a full exit
//   buffer cannot make them fail);
// - agent: the test — a 5,000-death flood in one container while
//   another is OOM-killed: the OOM record is complete, the flood's records are
//   bounded and carry their suppressed counts, no OOM event dropped.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/events/bpf_events.h"
#include "agent_process.h"
#include "cgroup_child.h"

using namespace std::chrono_literals;
using nlohmann::json;
using namespace oomsnap_test;
using oomsnap::BpfEventOptions;
using oomsnap::BpfEventSource;

namespace {

// A flood of deaths by a signal inside a memcg: a child of this test joins
// `cg`, then `n` times, spread evenly over `seconds`, vforks a process that
// kills itself with SIGKILL (vfork: no page tables to copy, so thousands a
// second even on a loaded machine — a forking shell or Python manages ~100).
// deaths() is how many children really died by SIGKILL.
class Flood {
 public:
  Flood(const TestMemcg& cg, int n, double seconds) : child_(cg, [n, seconds] { return run(n, seconds); }) {}
  // The deaths once the flood is over, -1 while it runs (after `timeout`).
  int deaths(std::chrono::milliseconds timeout) { return child_.count(timeout); }

 private:
  static int run(int n, double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    int deaths = 0;
    for (int i = 0; i < n; ++i) {
      std::this_thread::sleep_until(t0 + std::chrono::duration<double>(seconds * i / n));
      pid_t c = vfork();
      if (c == 0) {
        syscall(SYS_kill, syscall(SYS_getpid), SIGKILL);
        _exit(1);
      }
      int st = 0;
      if (c > 0 && waitpid(c, &st, 0) == c && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) ++deaths;
    }
    return deaths;
  }

  CountingChildInCgroup child_;
};

// Every event of a BpfEventSource, consumed in a polling loop.
class Events {
 public:
  explicit Events(const BpfEventOptions& opts) {
    src_ = BpfEventSource::open(opts, [this](const oomsnap_event& e) { all_.push_back(e); }, error_);
  }
  BpfEventSource* source() const { return src_.get(); }
  const std::string& error() const { return error_; }
  // Consumes until pred() or the timeout.
  bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (true) {
      EXPECT_GE(src_->consume(), 0);
      if (pred()) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
      pollfd p{src_->fd(), POLLIN, 0};
      poll(&p, 1, 20);
    }
  }
  std::vector<oomsnap_event> of(uint32_t type, uint64_t memcg) const {
    std::vector<oomsnap_event> out;
    for (const auto& e : all_)
      if (e.type == type && e.cgroup_id == memcg) out.push_back(e);
    return out;
  }
  bool has(uint32_t type, pid_t pid) const {
    for (const auto& e : all_)
      if (e.type == type && e.tgid == uint32_t(pid)) return true;
    return false;
  }

 private:
  std::unique_ptr<BpfEventSource> src_;
  std::string error_;
  std::vector<oomsnap_event> all_;
};

}  // namespace

// 2,000 deaths in 2 s in one memcg, limit 200 ms: about ten events reach user
// space, each with the count suppressed before it, and together they account
// for the deaths (the ones after the last event sent are still pending).
TEST(ExitFloodBpf, ExitsAreRateLimitedPerMemcgWithSuppressedCounts) {
  BpfEventOptions opts;
  opts.exit_min_interval = 200ms;
  Events ev(opts);
  ASSERT_NE(ev.source(), nullptr) << ev.error();
  TestMemcg cg("exitflood", 256 * kMiB);
  const auto start = std::chrono::steady_clock::now();
  Flood f(cg, 2000, 2.0);
  int deaths = -1;
  ASSERT_TRUE(ev.wait_until([&] { return (deaths = f.deaths(0ms)) >= 0; }, 30s)) << "flood did not finish";
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ev.wait_until([] { return false; }, 300ms);
  ASSERT_EQ(deaths, 2000);

  auto exits = ev.of(OOMSNAP_EV_PROCESS_EXIT, cg.inode());
  ASSERT_GE(exits.size(), 2u);
  EXPECT_LE(double(exits.size()), elapsed_s / 0.2 + 2) << "elapsed " << elapsed_s << " s";
  uint64_t accounted = 0;
  for (size_t i = 0; i < exits.size(); ++i) {
    accounted += 1 + exits[i].suppressed;
    EXPECT_EQ(exits[i].exit_code & 0x7f, uint32_t(SIGKILL));
    if (i > 0) {
      EXPECT_GE(exits[i].ktime_ns - exits[i - 1].ktime_ns, 200'000'000u) << "event " << i;
      EXPECT_GT(exits[i].suppressed, 0u) << "event " << i << ": ~200 deaths per interval";
    }
  }
  EXPECT_EQ(exits[0].suppressed, 0u) << "the memcg's first exit has nothing before it";
  // Every death up to the last event sent is in some event; the ones after it
  // (at most one interval's worth, ~200 at this pace, more on a slow machine)
  // wait for the memcg's next exit.
  EXPECT_LE(accounted, 2000u);
  EXPECT_GE(accounted, 1000u) << exits.size() << " events";
  EXPECT_EQ(ev.source()->dropped(), 0u);
}

// A tracked process (one the agent snapshotted) is reported however hard its
// memcg floods, and in the OOM buffer, unlimited.
TEST(ExitFloodBpf, TrackedExitBypassesTheLimit) {
  BpfEventOptions opts;
  opts.exit_min_interval = 10s;  // after the first exit, nothing untracked gets through
  Events ev(opts);
  ASSERT_NE(ev.source(), nullptr) << ev.error();
  TestMemcg cg("exittracked", 256 * kMiB);
  Process watched({"/bin/sleep", "100"}, {}, cg.dir());
  ASSERT_TRUE(watched.wait_exec(10s));
  Process untracked({"/bin/sleep", "100"}, {}, cg.dir());
  ASSERT_TRUE(untracked.wait_exec(10s));
  ASSERT_TRUE(ev.source()->track_pid(watched.pid()));
  Flood f(cg, 300, 0.5);
  ASSERT_EQ(f.deaths(30s), 300);
  ::kill(untracked.pid(), SIGKILL);
  ::kill(watched.pid(), SIGKILL);
  EXPECT_TRUE(ev.wait_until([&] { return ev.has(OOMSNAP_EV_PROCESS_EXIT, watched.pid()); }, 10s))
      << "the tracked exit was suppressed";
  ev.wait_until([] { return false; }, 300ms);
  EXPECT_FALSE(ev.has(OOMSNAP_EV_PROCESS_EXIT, untracked.pid())) << "an untracked exit passed a 10 s limit";
  EXPECT_EQ(ev.of(OOMSNAP_EV_PROCESS_EXIT, cg.inode()).size(), 2u) << "the flood's first exit + the tracked one";
  for (const auto& e : ev.of(OOMSNAP_EV_PROCESS_EXIT, cg.inode()))
    if (e.tgid == uint32_t(watched.pid())) {
      EXPECT_EQ(e.suppressed, 0u);
    }
}

// The exit buffer is full (no limit, nobody reading, thousands of deaths):
// an OOM kill still gets through, and so does its victim's exit (tracked
// from mark_victim on, in the same buffer). Before OOM kills had their own
// buffer, this kill was dropped.
TEST(ExitFloodBpf, FullExitBufferCannotDropAnOomKill) {
  BpfEventOptions opts;
  opts.exit_min_interval = 0ms;  // every exit, to fill the shared buffer
  Events ev(opts);
  ASSERT_NE(ev.source(), nullptr) << ev.error();
  TestMemcg flood_cg("exitfill", 256 * kMiB);
  // 256 KiB of ring / 112 bytes per event: ~2,340 exits fill it.
  Flood f(flood_cg, 4000, 1.0);
  ASSERT_EQ(f.deaths(60s), 4000);  // not consumed meanwhile
  ASSERT_GT(ev.source()->dropped(), 0u) << "the exit buffer did not fill; the test proves nothing";
  const uint64_t dropped_before = ev.source()->dropped();

  TestMemcg oom_cg("exitfilloom", 32 * kMiB);
  Process victim({"/usr/bin/python3", "-c", "b = b'x' * (128 << 20)"}, {}, oom_cg.dir());
  const pid_t pid = victim.pid();  // pid() is -1 once reaped
  int status = -1;
  for (int i = 0; i < 1000 && status == -1; ++i) {
    status = victim.try_wait();
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "not OOM-killed: wait status " << status;
  EXPECT_TRUE(ev.wait_until([&] { return ev.has(OOMSNAP_EV_OOM_KILL, pid); }, 10s)) << "OOM kill lost";
  EXPECT_TRUE(ev.wait_until([&] { return ev.has(OOMSNAP_EV_PROCESS_EXIT, pid); }, 10s))
      << "the OOM victim's exit lost";
  EXPECT_EQ(ev.source()->dropped_oom(), 0u);
  EXPECT_GE(ev.source()->dropped(), dropped_before);
}

// The test: container A dies 5,000 times by SIGKILL in 10 s while
// container B's Go program leaks into its limit and is OOM-killed.
TEST(ExitFloodAgent, FloodIsBoundedAndAnotherContainersOomRecordIsComplete) {
  require_fixture();
  constexpr int kPerMinute = 10;
  TestMemcg scope("scope");
  TestMemcg a(scope, "flood", 256 * kMiB);
  TestMemcg b(scope, "oom", 256 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir,
                                     "MaxExitRecordsPerMinute = " + std::to_string(kPerMinute) +
                                         "\nOomKillWindow = 60\nRunTracingToolTimeout = 5"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();

  const auto start = std::chrono::steady_clock::now();
  Flood flood_a(a, 5000, 10.0);
  auto fixture = leaker(b, 25);  // 256 MiB at 25 MB/s: OOM-killed after ~10 s
  const pid_t victim = fixture->pid();

  std::vector<json> a_records;
  json b_record;
  while (b_record.is_null() && std::chrono::steady_clock::now() - start < 40s) {
    json rec = agent.next_record(1s);
    if (rec.is_null()) continue;
    const std::string path = rec["container"]["cgroup_path"];
    if (path == a.rel_path()) a_records.push_back(rec);
    else if (path == b.rel_path() && rec.contains("oom_kill")) b_record = rec;
  }
  const int deaths = flood_a.deaths(20s);
  ASSERT_FALSE(b_record.is_null()) << "no OOM record for B; agent log:\n" << agent.log();
  ASSERT_EQ(deaths, 5000) << "the flood did not run";
  // Whatever A's records are still on their way.
  for (json rec; !(rec = agent.next_record(1500ms)).is_null();)
    if (rec["container"]["cgroup_path"] == a.rel_path()) a_records.push_back(rec);
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // B: complete — the snapshot before the kill, the kill, the exit.
  EXPECT_EQ(b_record["collection"]["status"], "collected") << b_record.dump(2);
  EXPECT_EQ(b_record["victim_pid"], victim);
  EXPECT_EQ(b_record["tracer_data"]["snapshot"]["status"], "complete") << b_record.dump(2);
  EXPECT_EQ(b_record["oom_kill"]["pid"], victim);
  EXPECT_EQ(b_record["oom_kill"]["matches_victim"], true);
  EXPECT_GT(b_record["oom_kill"]["lead_ms"].get<double>(), 0.0);
  ASSERT_TRUE(b_record.contains("exit")) << b_record.dump(2);
  EXPECT_EQ(b_record["exit"]["signal"], SIGKILL);
  EXPECT_EQ(b_record["agent"]["bpf_oom_ring_drops"], 0) << "an OOM-buffer reservation failed";
  EXPECT_EQ(b_record["agent"]["bpf_ring_drops"], 0);

  // A: bounded (the test ran well within one minute), with the suppressed
  // counts: no exit counted twice, and most of the flood accounted for in
  // the records (the rest is owed to A's next record).
  ASSERT_LT(elapsed_s, 60.0);
  ASSERT_FALSE(a_records.empty()) << agent.log();
  EXPECT_LE(a_records.size(), size_t(kPerMinute)) << "exit records of A in " << elapsed_s << " s";
  uint64_t carried = 0, carried_in_kernel = 0;
  for (const auto& r : a_records) {
    EXPECT_EQ(r["trigger"]["type"], "process_exit") << r.dump(2);
    EXPECT_EQ(r["exit"]["signal"], SIGKILL);
    carried += r["trigger"]["counters"]["suppressed_exits"].get<uint64_t>();
    carried_in_kernel += r["trigger"]["counters"]["suppressed_exits_in_kernel"].get<uint64_t>();
  }
  EXPECT_GT(carried, 0u) << "no record of A reports suppressed exits";
  EXPECT_GT(carried_in_kernel, 0u);
  EXPECT_LE(a_records.size() + carried, 5000u) << "exits counted twice";

  EXPECT_EQ(agent.stop(), 0) << agent.log();
  const std::string log = agent.log();
  const auto stopped = log.rfind("stopped: ");
  ASSERT_NE(stopped, std::string::npos) << log;
  const json counters = json::parse(log.substr(stopped + 9, log.find('\n', stopped) - stopped - 9));
  EXPECT_GT(counters["exit_records_suppressed"].get<uint64_t>(), 0u) << "the per-minute bound never applied";
  EXPECT_GT(counters["exit_events_suppressed"].get<uint64_t>(), 0u) << "the kernel's limit never applied";
  EXPECT_EQ(counters["bpf_oom_ring_drops"], 0);
  // What A still owed was said at shutdown.
  EXPECT_NE(log.find("exit(s) by a signal since its last exit record not recorded"), std::string::npos) << log;
  std::printf("[ measured ] %d deaths in A, %zu records of A carrying %llu suppressed exits (%llu in the kernel); "
              "agent: %s; %.1f s\n",
              deaths, a_records.size(), static_cast<unsigned long long>(carried),
              static_cast<unsigned long long>(carried_in_kernel), counters.dump().c_str(), elapsed_s);
  std::filesystem::remove_all(dir);
}

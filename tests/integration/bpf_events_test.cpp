// BpfEventSource against the real kernel: raw-tracepoint and tracepoint modes,
// memcg pressure (with the per-memcg rate limit), OOM kills and process exits,
// all provoked for real in memory cgroups created below this test's own memcg.
// Other things run on this machine: events are always filtered by pid or memcg,
// and nothing asserts on timing except generous deadlines.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/events/bpf_events.h"
#include "test_cgroup.h"
#include "test_process.h"

using namespace std::chrono_literals;
using oomsnap::BpfAttachMode;
using oomsnap::BpfEventOptions;
using oomsnap::BpfEventSource;

namespace {

// Exit events unlimited: these tests kill processes in the test's own memcg,
// which tests running in parallel share, and the per-memcg exit rate limit
// (exit_flood_test.cpp) would drop an exit that follows another's by < 100 ms.
BpfEventOptions all_exits() {
  BpfEventOptions o;
  o.exit_min_interval = std::chrono::milliseconds(0);
  return o;
}

// Opens a source and records every event it delivers.
class EventLog {
 public:
  explicit EventLog(const BpfEventOptions& opts = all_exits()) {
    src_ = BpfEventSource::open(opts, [this](const oomsnap_event& e) { events_.push_back(e); }, error_);
  }
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  BpfEventSource* source() const { return src_.get(); }
  const std::string& error() const { return error_; }
  const std::vector<oomsnap_event>& events() const { return events_; }

  // Polls fd() and consumes until pred() holds or the timeout passes.
  bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int n = src_->consume();
      EXPECT_GE(n, 0) << "consume failed: " << std::strerror(-n);
      if (pred()) return true;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      // Short slices: pred() may also depend on things other than events.
      pollfd p{src_->fd(), POLLIN, 0};
      poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
    }
  }
  // Consumes whatever arrives during d.
  void drain_for(std::chrono::milliseconds d) {
    wait_until([] { return false; }, d);
  }

  std::vector<oomsnap_event> matching(uint32_t type, const std::function<bool(const oomsnap_event&)>& f) const {
    std::vector<oomsnap_event> out;
    for (auto& e : events_)
      if (e.type == type && f(e)) out.push_back(e);
    return out;
  }
  std::vector<oomsnap_event> exits_of(pid_t pid) const {
    return matching(OOMSNAP_EV_PROCESS_EXIT, [pid](const oomsnap_event& e) { return e.tgid == uint32_t(pid); });
  }
  std::vector<oomsnap_event> pressure_of(uint64_t memcg) const {
    return matching(OOMSNAP_EV_MEMCG_PRESSURE, [memcg](const oomsnap_event& e) { return e.cgroup_id == memcg; });
  }
  std::vector<oomsnap_event> oom_kills_of(pid_t pid) const {
    return matching(OOMSNAP_EV_OOM_KILL, [pid](const oomsnap_event& e) { return e.tgid == uint32_t(pid); });
  }

 private:
  std::unique_ptr<BpfEventSource> src_;
  std::string error_;
  std::vector<oomsnap_event> events_;
};

std::string comm_of(const oomsnap_event& e) { return std::string(e.comm, strnlen(e.comm, sizeof e.comm)); }

uint64_t own_memcg_inode() {
  struct stat st {};
  return stat(oomsnap_test::own_memcg().dir().c_str(), &st) == 0 ? st.st_ino : 0;
}

// Waits until the child has exec'd (its comm is `comm`), so events carry it.
bool wait_for_comm(pid_t pid, const std::string& comm) {
  for (int i = 0; i < 500; ++i) {
    std::string c;
    if (oomsnap_test::read_file("/proc/" + std::to_string(pid) + "/comm", c) && c == comm + "\n") return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// A fresh directory on a disk-backed file system (page cache, not tmpfs).
class DiskTempDir {
 public:
  DiskTempDir() {
    char tmpl[] = "/var/tmp/oomsnap-bpf-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp /var/tmp failed");
    path_ = tmpl;
  }
  ~DiskTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// OOM kill of a process in a 32 MiB memcg that touches 128 MiB; checks the
// OOM_KILL and PROCESS_EXIT events of both attach modes.
void check_oom_kill(BpfAttachMode mode) {
  BpfEventOptions opts = all_exits();
  opts.mode = mode;
  EventLog log(opts);
  ASSERT_NE(log.source(), nullptr) << log.error();
  ASSERT_EQ(log.source()->mode(), mode) << log.source()->description();

  oomsnap_test::TestMemcg cg("oom", 32ull << 20);
  const uint64_t ino = cg.inode();
  ASSERT_NE(ino, 0u);
  oomsnap_test::Process p({"/usr/bin/python3", "-c", "b = b'x' * (128 << 20)"}, {}, cg.dir());
  const pid_t pid = p.pid();
  int status = -1;
  ASSERT_TRUE(log.wait_until([&] {
    if (status == -1) status = p.try_wait();
    return status != -1 && !log.oom_kills_of(pid).empty() && !log.exits_of(pid).empty();
  })) << "no OOM_KILL + PROCESS_EXIT for pid " << pid << " (wait status " << status << ")";
  ASSERT_TRUE(WIFSIGNALED(status)) << "python3 was not killed, wait status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  auto kills = log.oom_kills_of(pid);
  ASSERT_EQ(kills.size(), 1u);
  const auto& k = kills[0];
  EXPECT_EQ(k.cgroup_id, ino) << "memcg inode of the victim (raw_tp) / of the charging task (tp)";
  EXPECT_GT(k.rss_anon_pages, 0u);
  // Not more than the limit allows (+ slack: the counters are folded per-CPU counters).
  EXPECT_LE(k.rss_anon_pages, (40ull << 20) / 4096);
  EXPECT_EQ(comm_of(k), "python3");
  EXPECT_GT(k.ktime_ns, 0u);
  // The victim ran into the limit itself: its (only) thread ran the OOM killer.
  EXPECT_EQ(k.oom_invoker, uint32_t(pid));
  // The process id from the task (raw_tp), or from current, the marked thread
  // itself (tracepoint): never the trace entry's thread id as it came.
  EXPECT_EQ(k.pid_source, uint32_t(mode == BpfAttachMode::RawTracepoint ? OOMSNAP_PID_TASK : OOMSNAP_PID_CURRENT));

  auto exits = log.exits_of(pid);
  ASSERT_GE(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code & 0x7f, uint32_t(SIGKILL));
  EXPECT_EQ(exits[0].cgroup_id, ino);
  EXPECT_EQ(comm_of(exits[0]), "python3");
  EXPECT_GE(exits[0].ktime_ns, k.ktime_ns) << "the exit follows the kill";

  // The memcg hit its limit before the OOM: reclaim was reported too.
  EXPECT_FALSE(log.pressure_of(ino).empty());
  EXPECT_EQ(log.source()->dropped(), 0u);
}

}  // namespace

TEST(BpfEvents, AutoModePicksRawTracepoints) {
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  EXPECT_EQ(log.source()->mode(), BpfAttachMode::RawTracepoint);
  EXPECT_EQ(log.source()->description(),
            "raw_tp: mark_victim, mm_vmscan_memcg_reclaim_begin, sched_process_exit, rss_stat");
  EXPECT_GE(log.source()->fd(), 0);
  EXPECT_GE(log.source()->consume(), 0);
  EXPECT_EQ(log.source()->dropped(), 0u);
}

TEST(BpfEvents, ForcedTracepointModeAttachesAndDelivers) {
  BpfEventOptions opts = all_exits();
  opts.mode = BpfAttachMode::Tracepoint;
  EventLog log(opts);
  ASSERT_NE(log.source(), nullptr) << log.error();
  EXPECT_EQ(log.source()->mode(), BpfAttachMode::Tracepoint);
  const std::string d = log.source()->description();
  EXPECT_EQ(d.rfind("tracepoint: oom/mark_victim, vmscan/mm_vmscan_memcg_reclaim_begin, sched/sched_process_exit, "
                    "kmem/rss_stat", 0), 0u)
      << d;
  EXPECT_EQ(d.find("fallback"), std::string::npos) << "forced mode never falls back: " << d;
  struct stat st {};
  EXPECT_EQ(stat("/sys/kernel/tracing/events/sched/sched_process_exit", &st), 0) << "tracefs not mounted";

  // A real event through the tracepoint variant: a process killed by SIGTERM.
  oomsnap_test::Process p({"/bin/sleep", "100"});
  ASSERT_TRUE(wait_for_comm(p.pid(), "sleep"));
  ASSERT_EQ(::kill(p.pid(), SIGTERM), 0);
  ASSERT_TRUE(log.wait_until([&] { return !log.exits_of(p.pid()).empty(); }));
  auto e = log.exits_of(p.pid())[0];
  EXPECT_EQ(e.exit_code & 0x7f, uint32_t(SIGTERM));
  EXPECT_EQ(comm_of(e), "sleep");
  EXPECT_EQ(e.cgroup_id, own_memcg_inode());
  EXPECT_EQ(log.source()->dropped(), 0u);
}

TEST(BpfEvents, RawTracepointModeCanBeForced) {
  BpfEventOptions opts = all_exits();
  opts.mode = BpfAttachMode::RawTracepoint;
  EventLog log(opts);
  ASSERT_NE(log.source(), nullptr) << log.error();
  EXPECT_EQ(log.source()->mode(), BpfAttachMode::RawTracepoint);
}

TEST(BpfEvents, TwoSourcesCoexistAndBothDeliver) {
  EventLog a, b;
  ASSERT_NE(a.source(), nullptr) << a.error();
  ASSERT_NE(b.source(), nullptr) << b.error();
  oomsnap_test::Process p({"/bin/sleep", "100"});
  ASSERT_TRUE(wait_for_comm(p.pid(), "sleep"));
  ASSERT_EQ(::kill(p.pid(), SIGKILL), 0);
  EXPECT_TRUE(a.wait_until([&] { return !a.exits_of(p.pid()).empty(); }));
  EXPECT_TRUE(b.wait_until([&] { return !b.exits_of(p.pid()).empty(); }));
}

TEST(BpfEvents, MemcgPressureFromPageCache) {
  EventLog log;  // default rate limit: 100 ms per memcg
  ASSERT_NE(log.source(), nullptr) << log.error();
  oomsnap_test::TestMemcg cg("pressure", 16ull << 20);
  const uint64_t ino = cg.inode();
  ASSERT_NE(ino, 0u);
  DiskTempDir tmp;
  const std::string file = tmp.path() + "/fill";
  oomsnap_test::Process p(
      {"/bin/sh", "-c", "dd if=/dev/zero of=" + file + " bs=1M count=64 conv=fsync 2>/dev/null; rc=$?; rm -f " + file + "; exit $rc"},
      {}, cg.dir());
  int status = -1;
  ASSERT_TRUE(log.wait_until([&] {
    if (status == -1) status = p.try_wait();
    return status != -1 && !log.pressure_of(ino).empty();
  })) << "no MEMCG_PRESSURE for memcg " << ino << " (writer wait status " << status << ")";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed, wait status " << status;

  auto ev = log.pressure_of(ino);
  for (auto& e : ev) {
    EXPECT_NE(e.gfp_flags, 0u);
    EXPECT_LT(e.order, 11u);
    EXPECT_NE(e.tgid, 0u);
  }
  EXPECT_EQ(comm_of(ev[0]), "dd");
  EXPECT_EQ(ev[0].suppressed, 0u) << "the first event of a memcg has nothing before it";
  for (size_t i = 1; i < ev.size(); ++i) {
    EXPECT_GE(ev[i].ktime_ns - ev[i - 1].ktime_ns, 100'000'000u) << "rate limit: event " << i;
  }
  EXPECT_EQ(log.source()->dropped(), 0u);
}

TEST(BpfEvents, MemcgPressureIsRateLimitedPerMemcg) {
  BpfEventOptions opts;
  opts.pressure_min_interval = 1000ms;
  EventLog log(opts);
  ASSERT_NE(log.source(), nullptr) << log.error();
  // A second source without a rate limit sees every reclaim of the storm.
  BpfEventOptions every_opts;
  every_opts.pressure_min_interval = 0ms;
  EventLog every(every_opts);
  ASSERT_NE(every.source(), nullptr) << every.error();

  oomsnap_test::TestMemcg cg("storm", 16ull << 20);
  const uint64_t ino = cg.inode();
  ASSERT_NE(ino, 0u);
  DiskTempDir tmp;
  // Page cache churn until killed, two writers so both CPUs race in the rate
  // limiter: every round charges 32 MiB into 16 MiB.
  auto writer = [&](const std::string& f) {
    return "while :; do dd if=/dev/zero of=" + tmp.path() + "/" + f +
           " bs=1M count=32 conv=fsync 2>/dev/null; done";
  };
  const auto start = std::chrono::steady_clock::now();
  oomsnap_test::Process p({"/bin/sh", "-c", "(" + writer("a") + ") & " + writer("b")}, {}, cg.dir());
  // Storm until an event carries a suppressed count (needs > 1 interval of reclaim).
  bool got = log.wait_until([&] {
    every.source()->consume();
    for (auto& e : log.pressure_of(ino))
      if (e.suppressed > 0) return true;
    return false;
  }, 15s);
  // Stop every writer and wait until the memcg is empty: then no reclaim is left.
  bool empty = false;
  for (int i = 0; i < 500 && !empty; ++i) {
    std::string procs;
    oomsnap_test::read_file(cg.dir() + "/cgroup.procs", procs);
    std::istringstream in(procs);
    empty = true;
    for (pid_t q; in >> q;) {
      ::kill(q, SIGKILL);
      empty = false;
    }
    every.source()->consume();
    if (!empty) std::this_thread::sleep_for(10ms);
  }
  p.kill_now();
  ASSERT_TRUE(empty) << "the writers did not die";
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log.drain_for(300ms);
  every.drain_for(300ms);
  ASSERT_TRUE(got) << "no pressure event with suppressed > 0; events for the memcg: " << log.pressure_of(ino).size();

  auto ev = log.pressure_of(ino);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_LE(static_cast<double>(ev.size()), elapsed_s + 1.0) << "elapsed " << elapsed_s << " s";
  uint64_t accounted = 0, suppressed = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    suppressed += ev[i].suppressed;
    accounted += 1 + ev[i].suppressed;
    if (i > 0) {
      EXPECT_GE(ev[i].ktime_ns - ev[i - 1].ktime_ns, 1'000'000'000u) << "event " << i;
    }
  }
  EXPECT_GT(suppressed, 0u);
  EXPECT_EQ(log.source()->dropped(), 0u);

  // No count is lost: every reclaim up to the last event sent is in some
  // event, either as the event or in its suppressed count. The bounds allow
  // for a reclaim that races with a send on the other CPU (counted in the next
  // event), and reclaims after the last send are still pending.
  ASSERT_EQ(every.source()->dropped(), 0u) << "the unlimited reference lost events";
  auto all = every.pressure_of(ino);
  const uint64_t last_sent = ev.back().ktime_ns;
  uint64_t before_last = 0;
  for (auto& e : all)
    if (e.ktime_ns <= last_sent) ++before_last;
  EXPECT_LE(accounted, all.size());
  EXPECT_GE(accounted + 2 * ev.size(), before_last)
      << "sent " << ev.size() << " + suppressed " << suppressed << " vs " << before_last
      << " reclaims up to the last event (" << all.size() << " in all)";
}

TEST(BpfEvents, OomKillRawTracepoint) { check_oom_kill(BpfAttachMode::RawTracepoint); }

TEST(BpfEvents, OomKillTracepoint) { check_oom_kill(BpfAttachMode::Tracepoint); }

TEST(BpfEvents, ExitBySignalIsReported) {
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  oomsnap_test::Process p({"/bin/sleep", "100"});
  const pid_t pid = p.pid();
  ASSERT_TRUE(wait_for_comm(pid, "sleep"));
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  ASSERT_TRUE(log.wait_until([&] { return !log.exits_of(pid).empty(); }));
  auto ev = log.exits_of(pid);
  EXPECT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].exit_code & 0x7f, uint32_t(SIGTERM));
  EXPECT_EQ(ev[0].exit_code, uint32_t(SIGTERM)) << "no core dump, no status";
  EXPECT_EQ(comm_of(ev[0]), "sleep");
  EXPECT_EQ(ev[0].cgroup_id, own_memcg_inode());
  EXPECT_EQ(ev[0].rss_anon_pages, 0u);
  EXPECT_EQ(ev[0].suppressed, 0u);
  EXPECT_EQ(log.source()->dropped(), 0u);
}

TEST(BpfEvents, ExitOfMultiThreadedProcessReportedOnce) {
  // A fatal signal makes every thread exit at once, and several of them see
  // the group's live count at 0: still exactly one event per process.
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  for (int round = 0; round < 3; ++round) {
    oomsnap_test::Process p({"/usr/bin/python3", "-c",
                             "import threading, time\n"
                             "ts = [threading.Thread(target=time.sleep, args=(100,), daemon=True) for _ in range(8)]\n"
                             "[t.start() for t in ts]\n"
                             "print('ready', flush=True)\n"
                             "time.sleep(100)\n"});
    ASSERT_EQ(p.read_line(10s), "ready");
    ASSERT_EQ(::kill(p.pid(), SIGKILL), 0);
    ASSERT_TRUE(log.wait_until([&] { return !log.exits_of(p.pid()).empty(); }));
    log.drain_for(200ms);
    auto ev = log.exits_of(p.pid());
    EXPECT_EQ(ev.size(), 1u) << "round " << round;
    EXPECT_EQ(ev[0].exit_code & 0x7f, uint32_t(SIGKILL));
    EXPECT_EQ(comm_of(ev[0]), "python3") << "the group leader's name";
  }
  EXPECT_EQ(log.source()->dropped(), 0u);
}

TEST(BpfEvents, NormalExitReportedOnlyWhenTracked) {
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  auto* src = log.source();

  // Untracked, exit 0: not reported.
  oomsnap_test::Process quiet({"/bin/true"});
  const pid_t quiet_pid = quiet.pid();
  for (int i = 0; i < 500 && quiet.try_wait() == -1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_NE(quiet.try_wait(), -1);

  // Tracked, then untracked before it exits: not reported.
  oomsnap_test::Process untracked({"/bin/sleep", "0.2"});
  const pid_t untracked_pid = untracked.pid();
  ASSERT_TRUE(src->track_pid(untracked_pid));
  src->untrack_pid(untracked_pid);

  // Tracked, exit 0: reported with exit_code 0. It exits after the two above.
  oomsnap_test::Process tracked({"/bin/sleep", "0.5"});
  const pid_t tracked_pid = tracked.pid();
  ASSERT_TRUE(src->track_pid(tracked_pid));
  ASSERT_TRUE(wait_for_comm(tracked_pid, "sleep"));
  int status = -1;
  ASSERT_TRUE(log.wait_until([&] {
    if (status == -1) status = tracked.try_wait();
    return !log.exits_of(tracked_pid).empty();
  }));
  auto ev = log.exits_of(tracked_pid);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].exit_code, 0u);
  EXPECT_EQ(comm_of(ev[0]), "sleep");
  EXPECT_EQ(ev[0].cgroup_id, own_memcg_inode());

  // The earlier exits would have been queued before the tracked one.
  EXPECT_TRUE(log.exits_of(quiet_pid).empty()) << "/bin/true exiting 0 was reported";
  EXPECT_TRUE(log.exits_of(untracked_pid).empty()) << "an untracked normal exit was reported";
  EXPECT_EQ(src->dropped(), 0u);
}

TEST(BpfEvents, TrackedExitStatusIsKept) {
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  oomsnap_test::Process p({"/bin/sh", "-c", "sleep 0.2; exit 3"});
  ASSERT_TRUE(log.source()->track_pid(p.pid()));
  ASSERT_TRUE(log.wait_until([&] { return !log.exits_of(p.pid()).empty(); }));
  EXPECT_EQ(log.exits_of(p.pid())[0].exit_code, 3u << 8);
}

TEST(BpfEvents, HandlerExceptionPropagatesFromConsume) {
  std::string error;
  int calls = 0;
  auto src = BpfEventSource::open({}, [&](const oomsnap_event& e) {
    ++calls;
    throw std::runtime_error("handler failed");
  }, error);
  ASSERT_NE(src, nullptr) << error;
  oomsnap_test::Process p({"/bin/sleep", "100"});
  ASSERT_TRUE(wait_for_comm(p.pid(), "sleep"));
  ASSERT_EQ(::kill(p.pid(), SIGKILL), 0);
  const auto end = std::chrono::steady_clock::now() + 10s;
  bool thrown = false;
  while (!thrown && std::chrono::steady_clock::now() < end) {
    pollfd pf{src->fd(), POLLIN, 0};
    poll(&pf, 1, 50);
    try {
      src->consume();
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "handler failed");
      thrown = true;
    }
  }
  EXPECT_TRUE(thrown);
  EXPECT_GE(calls, 1);
}

TEST(BpfEvents, WithoutPrivilegesTheErrorSaysRootIsNeeded) {
  // A child that gives up root (setresuid drops every capability) tries to open.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(2);
    std::string error;
    auto src = BpfEventSource::open({}, [](const oomsnap_event&) {}, error);
    if (src) _exit(3);
    ssize_t off = 0;
    while (off < ssize_t(error.size())) {
      ssize_t n = write(fds[1], error.data() + off, error.size() - off);
      if (n <= 0) break;
      off += n;
    }
    _exit(0);
  }
  close(fds[1]);
  std::string error;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) error.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "2: cannot drop root, 3: opened without privileges";
  EXPECT_NE(error.find("needs root (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN)"), std::string::npos) << error;
  EXPECT_NE(error.find("raw_tp: "), std::string::npos) << error;
  EXPECT_NE(error.find("tracepoint: "), std::string::npos) << "the fallback was tried too: " << error;
  EXPECT_NE(error.find("Operation not permitted"), std::string::npos) << error;
  EXPECT_NE(error.find("libbpf: "), std::string::npos) << "libbpf's own words are included: " << error;
}

TEST(BpfEvents, RejectsMissingHandler) {
  std::string error;
  EXPECT_EQ(BpfEventSource::open({}, nullptr, error), nullptr);
  EXPECT_NE(error.find("handler"), std::string::npos) << error;
}

namespace {

// A process in `cgroup_dir` that touches `mib` MiB of its own heap and waits.
std::unique_ptr<oomsnap_test::Process> toucher(const std::string& cgroup_dir, int mib) {
  auto p = std::make_unique<oomsnap_test::Process>(
      std::vector<std::string>{"/usr/bin/python3", "-c",
                               "import sys, time\nb = b'x' * (" + std::to_string(mib) +
                                   " << 20)\nprint('ready', flush=True)\ntime.sleep(120)\n"},
      std::vector<std::string>{}, cgroup_dir);
  return p;
}

std::vector<oomsnap_event> thresholds_of(const EventLog& log, uint64_t memcg) {
  return log.matching(OOMSNAP_EV_USAGE_THRESHOLD, [memcg](const oomsnap_event& e) { return e.cgroup_id == memcg; });
}

constexpr uint64_t kMiB = 1ull << 20;

}  // namespace

// The usage threshold kept in BPF: a process in a child of the container
// charges it past the threshold, and the event names the container, once,
// with the usage the kernel counted; a process that stays below another
// container's threshold is never reported.
TEST(BpfEvents, UsageThresholdNamesTheContainerOncePerCrossing) {
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  ASSERT_TRUE(log.source()->usage_thresholds()) << log.source()->description();
  oomsnap_test::TestMemcg box("usage", 512 * kMiB), quiet("usage-quiet", 512 * kMiB);
  oomsnap_test::TestMemcg inner(box, "inner");
  std::string error;
  const std::vector<oomsnap::UsageWatch> watches = {
      {box.inode(), box.inode(), 0, 48 * kMiB, 40 * kMiB},
      {inner.inode(), box.inode(), 1, 48 * kMiB, 40 * kMiB},
      {quiet.inode(), quiet.inode(), 0, 200 * kMiB, 190 * kMiB},
  };
  ASSERT_EQ(log.source()->set_usage_watches(watches, error), 3u) << error;

  auto p = toucher(inner.dir(), 64);
  auto q = toucher(quiet.dir(), 64);
  ASSERT_EQ(p->read_line(30s), "ready");
  ASSERT_EQ(q->read_line(30s), "ready");
  ASSERT_TRUE(log.wait_until([&] { return !thresholds_of(log, box.inode()).empty(); }))
      << "no USAGE_THRESHOLD for the container " << box.inode();
  log.drain_for(500ms);  // still above: nothing more
  auto ev = thresholds_of(log, box.inode());
  ASSERT_EQ(ev.size(), 1u) << "one event per crossing";
  EXPECT_EQ(ev[0].tgid, uint32_t(p->pid())) << "the charging process";
  EXPECT_EQ(comm_of(ev[0]), "python3");
  EXPECT_EQ(ev[0].threshold_pages * 4096, 48 * kMiB);
  EXPECT_GE(ev[0].usage_pages * 4096, 48 * kMiB);
  EXPECT_LT(ev[0].usage_pages * 4096, 512 * kMiB);
  EXPECT_TRUE(thresholds_of(log, inner.inode()).empty()) << "the child is not a container";
  EXPECT_TRUE(thresholds_of(log, quiet.inode()).empty()) << "64 MiB stayed below the 200 MiB threshold";
  EXPECT_EQ(log.source()->dropped(), 0u);
}

// InKernelThreshold = false: the programs are not attached, the others are.
TEST(BpfEvents, UsageThresholdCanBeLeftOff) {
  BpfEventOptions opts = all_exits();
  opts.usage_threshold = false;
  EventLog log(opts);
  ASSERT_NE(log.source(), nullptr) << log.error();
  EXPECT_FALSE(log.source()->usage_thresholds());
  EXPECT_EQ(log.source()->description(), "raw_tp: mark_victim, mm_vmscan_memcg_reclaim_begin, sched_process_exit; "
                                         "usage threshold not checked in the kernel");
  std::string error;
  EXPECT_EQ(log.source()->set_usage_watches({{1, 1, 0, kMiB, 0}}, error), 0u);
  EXPECT_NE(error.find("not attached"), std::string::npos) << error;
}

// After usage fell below the re-arm level the next crossing is reported
// again; a container no longer watched is not.
TEST(BpfEvents, UsageThresholdRearmsBelowItsLevelAndStopsWhenUnwatched) {
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  ASSERT_TRUE(log.source()->usage_thresholds()) << log.source()->description();
  oomsnap_test::TestMemcg box("rearm", 512 * kMiB);
  std::string error;
  ASSERT_EQ(log.source()->set_usage_watches({{box.inode(), box.inode(), 0, 48 * kMiB, 40 * kMiB}}, error), 1u)
      << error;
  for (int round = 1; round <= 2; ++round) {
    auto p = toucher(box.dir(), 64);
    ASSERT_EQ(p->read_line(30s), "ready") << "round " << round;
    ASSERT_TRUE(log.wait_until([&] { return thresholds_of(log, box.inode()).size() == size_t(round); }))
        << "round " << round << ": " << thresholds_of(log, box.inode()).size() << " events";
    p.reset();  // killed: its heap is uncharged, below the re-arm level
  }
  // A memcg deeper below its container than BPF follows is refused, named.
  EXPECT_EQ(log.source()->set_usage_watches({{box.inode(), box.inode(), 0, 48 * kMiB, 40 * kMiB},
                                             {box.inode() + 1, box.inode(), OOMSNAP_MAX_WATCH_HOPS + 1, 48 * kMiB,
                                              40 * kMiB}},
                                            error),
            1u);
  EXPECT_NE(error.find("levels below its container"), std::string::npos) << error;
  // The same watches again keep the state: no event for what is already known.
  ASSERT_EQ(log.source()->set_usage_watches({{box.inode(), box.inode(), 0, 48 * kMiB, 40 * kMiB}}, error), 1u);
  ASSERT_EQ(log.source()->set_usage_watches({}, error), 0u) << error;
  auto p = toucher(box.dir(), 64);
  ASSERT_EQ(p->read_line(30s), "ready");
  log.drain_for(500ms);
  EXPECT_EQ(thresholds_of(log, box.inode()).size(), 2u) << "unwatched: no third event";
}

// A container that swings across its threshold and back below the re-arm
// level as fast as it can (hundreds of times a second) gets at most one event
// per threshold_min_interval (100 ms), each a real crossing.
TEST(BpfEvents, UsageThresholdSwingsAreRateLimitedPerContainer) {
  EventLog log;
  ASSERT_NE(log.source(), nullptr) << log.error();
  ASSERT_TRUE(log.source()->usage_thresholds()) << log.source()->description();
  oomsnap_test::TestMemcg box("swing", 512 * kMiB);
  oomsnap_test::Process p({"/usr/bin/python3", "-c",
                           "import time\nprint('ready', flush=True)\n"
                           "time.sleep(0.5)\nend = time.monotonic() + 1.5\nn = 0\n"
                           "while time.monotonic() < end:\n    b = b'x' * (16 << 20)\n    del b\n    n += 1\n"
                           "print(n, flush=True)\ntime.sleep(60)\n"},
                          {}, box.dir());
  ASSERT_EQ(p.read_line(30s), "ready");
  const uint64_t base = std::stoull(oomsnap_test::slurp(
      box.dir() + (box.fs().version == 1 ? "/memory.usage_in_bytes" : "/memory.current")));
  std::string error;
  ASSERT_EQ(log.source()->set_usage_watches({{box.inode(), box.inode(), 0, base + 8 * kMiB, base + 4 * kMiB}}, error),
            1u)
      << error;
  const std::string swings = p.read_line(30s);
  ASSERT_FALSE(swings.empty());
  log.drain_for(300ms);
  const auto ev = thresholds_of(log, box.inode());
  EXPECT_GE(std::stoi(swings), 20) << "the process swung too slowly to test the limit";
  EXPECT_GE(ev.size(), 2u) << "re-armed below its level: more than one crossing reported";
  EXPECT_LE(ev.size(), 17u) << swings << " swings in 1.5 s: at most one event per 100 ms";
  for (size_t i = 1; i < ev.size(); ++i)
    EXPECT_GE(ev[i].ktime_ns - ev[i - 1].ktime_ns, 100'000'000u) << "event " << i;
  for (const auto& e : ev) EXPECT_GE(e.usage_pages * 4096, base + 8 * kMiB);
}

// The capture process (capture/capture_sandbox.h) against real processes:
// locked down as documented, killed at its hard deadline whatever it is stuck
// on, and every way it can fail (crash, abort, memory cap, CPU, forbidden
// system call, garbage, oversize result, a stopped child, cancellation)
// reported as a failed snapshot with a reason that says which. Misbehaviour
// comes from tests/capture_hooks (a test-only build of the child), chosen by
// the target's comm.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/capability.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "record_schema.h"
#include "capture/capture_sandbox.h"
#include "capture/capture_child.h"
#include "go_versions.h"
#include "test_process.h"
#include "trap_targets.h"

using namespace std::chrono_literals;
using oomsnap::CaptureOptions;
using oomsnap::CaptureSandbox;
using oomsnap::SandboxOptions;
using oomsnap::SnapshotStatus;
using oomsnap_test::Process;
namespace fs = std::filesystem;

namespace {

const std::string kGoFixture = std::string(OOMSNAP_FIXTURES) + "/go/1.26/default/heapfixture";

CaptureOptions budget(std::chrono::milliseconds b) {
  CaptureOptions o;
  o.budget = b;
  return o;
}

SandboxOptions hooked(std::chrono::milliseconds max_budget = 2000ms) {
  return SandboxOptions{.helper_path = OOMSNAP_CAPTURE_HOOK_HELPER, .max_budget = max_budget};
}

// A sleeping process whose comm is `name` (started through a symlink of that name).
class NamedSleeper {
 public:
  explicit NamedSleeper(const std::string& name) {
    char tmpl[] = "/tmp/oomsnap-hook-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_symlink("/bin/sleep", dir_ + "/" + name);
    proc_ = std::make_unique<Process>(std::vector<std::string>{dir_ + "/" + name, "600"});
    // Wait until the exec happened (comm changed).
    for (int i = 0; i < 200; ++i) {
      std::string comm;
      oomsnap_test::read_file("/proc/" + std::to_string(proc_->pid()) + "/comm", comm);
      if (comm.rfind(name, 0) == 0) break;
      std::this_thread::sleep_for(5ms);
    }
  }
  ~NamedSleeper() {
    proc_.reset();
    fs::remove_all(dir_);
  }
  pid_t pid() const { return proc_->pid(); }

 private:
  std::string dir_;
  std::unique_ptr<Process> proc_;
};

struct Outcome {
  std::optional<oomsnap::CaptureRecord> rec;
  std::string error;
  std::chrono::milliseconds took{};
};

Outcome capture_with(CaptureSandbox& box, pid_t pid, const CaptureOptions& o) {
  Outcome out;
  auto t0 = std::chrono::steady_clock::now();
  out.rec = box.capture(pid, o, out.error);
  out.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  return out;
}

// A failed snapshot whose reason (and process_failure) contains `what`.
void expect_failed_with(const Outcome& o, const std::string& what) {
  ASSERT_TRUE(o.rec) << o.error;
  const auto& s = o.rec->result.snapshot;
  EXPECT_EQ(s.status, SnapshotStatus::kFailed) << s.reason;
  EXPECT_NE(s.reason.find(what), std::string::npos) << s.reason;
  EXPECT_EQ(o.rec->process_failure, s.reason);
}

std::map<std::string, std::string> status_of(pid_t pid) {
  std::string text;
  oomsnap_test::read_file("/proc/" + std::to_string(pid) + "/status", text);
  std::map<std::string, std::string> m;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto c = line.find(':');
    if (c == std::string::npos) continue;
    auto v = line.substr(c + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    m[line.substr(0, c)] = v;
  }
  return m;
}

}  // namespace

// What docs/agent.md promises about the capture process, read from /proc while
// a pre-started helper waits for its capture.
TEST(CaptureSandbox, HelperIsLockedDown) {
  CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY});
  std::string err;
  ASSERT_TRUE(box.prestart(err)) << err;
  const pid_t h = box.helper_pid();
  ASSERT_GT(h, 0);
  std::map<std::string, std::string> st;
  for (int i = 0; i < 400; ++i) {  // the filter is the last step before it waits
    st = status_of(h);
    if (st["Seccomp"] == "2") break;
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(st["Seccomp"], "2");
  EXPECT_EQ(st["NoNewPrivs"], "1");
  EXPECT_EQ(st["Name"], "oomsnap-capture");
  // A memcg OOM (the agent's cgroup holds both) takes the capture process first.
  std::string adj;
  oomsnap_test::read_file("/proc/" + std::to_string(h) + "/oom_score_adj", adj);
  EXPECT_EQ(adj, "1000\n");
  const uint64_t want = (1ull << CAP_SYS_PTRACE) | (1ull << CAP_DAC_READ_SEARCH) | (1ull << 40 /* CHECKPOINT_RESTORE */);
  for (const char* k : {"CapEff", "CapPrm", "CapBnd"})
    EXPECT_EQ(std::stoull(st[k], nullptr, 16), want) << k << " = " << st[k];
  EXPECT_EQ(std::stoull(st["CapInh"], nullptr, 16), 0u);
  EXPECT_EQ(std::stoull(st["CapAmb"], nullptr, 16), 0u);

  // Only stdin/stdout on /dev/null, stderr, and its socket: none of ours.
  std::set<int> fds;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(h) + "/fd")) fds.insert(std::stoi(e.path().filename()));
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(h) + "/fd/1"), "/dev/null");

  std::string limits;
  oomsnap_test::read_file("/proc/" + std::to_string(h) + "/limits", limits);
  auto limit_line = [&](const std::string& name) {
    auto at = limits.find(name);
    return at == std::string::npos ? std::string() : limits.substr(at, limits.find('\n', at) - at);
  };
  EXPECT_NE(limit_line("Max address space").find("1073741824"), std::string::npos) << limits;
  EXPECT_NE(limit_line("Max core file size").find(" 0 "), std::string::npos) << limits;
  EXPECT_NE(limit_line("Max file size").find(" 0 "), std::string::npos) << limits;
  EXPECT_NE(limit_line("Max cpu time").find(" 4 "), std::string::npos) << limits;  // 2 s + 1 s grace, rounded up, + 1
}

// A profile large enough that the pprof encoder compresses on a worker
// thread (> 64 KiB): the capture process may create threads (clone with
// CLONE_THREAD; clone3 answered ENOSYS), where it died by SIGSYS before.
TEST(CaptureSandbox, LargePprofIsEncodedOnAWorkerThread) {
  Process go({kGoFixture, "-rate", "1", "-stacks", "10000"});
  ASSERT_NE(go.read_line(60s).find("\"ready\":true"), std::string::npos);
  CaptureOptions o = budget(10000ms);
  o.max_entries = 10;
  o.want_pprof = true;
  std::string err;
  CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY, .max_budget = 10000ms});
  auto boxed = box.capture(go.pid(), o, err);
  ASSERT_TRUE(boxed) << err;
  EXPECT_TRUE(boxed->process_failure.empty()) << boxed->process_failure;
  EXPECT_EQ(boxed->result.snapshot.status, SnapshotStatus::kComplete) << boxed->result.snapshot.reason;
  ASSERT_TRUE(boxed->result.pprof);
  // Compressed: 10,000 stacks encode to well over the encoder's 64 KiB chunk.
  EXPECT_GT(boxed->result.pprof->size(), 32u << 10);
}

// A real capture through the sandbox equals the same capture in-process.
TEST(CaptureSandbox, SameResultAsInProcess) {
  Process go({kGoFixture, "-rate", "1"});
  ASSERT_NE(go.read_line(20s).find("\"ready\":true"), std::string::npos);
  CaptureOptions o = budget(5000ms);
  o.max_entries = 1000;
  o.want_pprof = true;
  std::string err;
  auto local = oomsnap::capture_process(go.pid(), o, err);
  ASSERT_TRUE(local) << err;
  CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY, .max_budget = 5000ms});
  auto boxed = box.capture(go.pid(), o, err);
  ASSERT_TRUE(boxed) << err;
  EXPECT_TRUE(boxed->process_failure.empty()) << boxed->process_failure;
  const auto &a = local->result.snapshot, &b = boxed->result.snapshot;
  EXPECT_EQ(b.status, SnapshotStatus::kComplete) << b.reason;
  EXPECT_EQ(boxed->result.language, "go");
  EXPECT_EQ(boxed->identity.start_time_ticks, local->identity.start_time_ticks);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    EXPECT_EQ(a.entries[i].name, b.entries[i].name);
    EXPECT_EQ(a.entries[i].bytes, b.entries[i].bytes);
    EXPECT_EQ(a.entries[i].objects, b.entries[i].objects);
    EXPECT_EQ(a.entries[i].stack, b.entries[i].stack);
  }
  ASSERT_TRUE(boxed->result.pprof);
  EXPECT_GT(boxed->result.pprof->size(), 100u);
  // The helper is used once: the next capture starts a fresh one.
  EXPECT_EQ(box.helper_pid(), -1);
}

TEST(CaptureSandbox, NoSuchProcessIsAnError) {
  CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY});
  Process p({"/bin/true"});
  while (p.try_wait() < 0) std::this_thread::sleep_for(5ms);
  std::string err;
  EXPECT_FALSE(box.capture(p.pid(), budget(1000ms), err));
  EXPECT_NE(err.find("no process"), std::string::npos) << err;
}

TEST(CaptureSandbox, CrashingChildIsReportedBySignal) {
  CaptureSandbox box(hooked());
  {
    NamedSleeper t("hook-segv");
    expect_failed_with(capture_with(box, t.pid(), budget(2000ms)), "capture process died: SIGSEGV");
  }
  {
    NamedSleeper t("hook-abort");
    expect_failed_with(capture_with(box, t.pid(), budget(2000ms)), "capture process died: SIGABRT");
  }
  {
    NamedSleeper t("hook-syscall");
    expect_failed_with(capture_with(box, t.pid(), budget(2000ms)), "SIGSYS (a system call outside its seccomp allow-list)");
  }
  // And the sandbox goes on serving: an ordinary target right after.
  NamedSleeper ok("plain-sleeper");
  auto o = capture_with(box, ok.pid(), budget(2000ms));
  ASSERT_TRUE(o.rec) << o.error;
  EXPECT_TRUE(o.rec->process_failure.empty()) << o.rec->process_failure;
  EXPECT_EQ(o.rec->result.snapshot.status, SnapshotStatus::kUnavailable);  // /bin/sleep has no runtime
}

TEST(CaptureSandbox, MemoryCapIsReported) {
  SandboxOptions so = hooked();
  so.memory_bytes = 256ull << 20;
  CaptureSandbox box(so);
  NamedSleeper t("hook-hog");
  auto o = capture_with(box, t.pid(), budget(5000ms));
  expect_failed_with(o, "capture process exceeded its 256 MiB memory cap");
}

TEST(CaptureSandbox, GarbageAndOversizeResultsAreRefused) {
  SandboxOptions so = hooked();
  so.result_max_bytes = 1 << 20;
  CaptureSandbox box(so);
  {
    NamedSleeper t("hook-garbage");
    expect_failed_with(capture_with(box, t.pid(), budget(2000ms)), "capture process wrote an invalid result");
  }
  {
    NamedSleeper t("hook-huge");
    expect_failed_with(capture_with(box, t.pid(), budget(2000ms)), "capture process result refused: more than its 1 MiB cap");
  }
}

// A child that cannot even run its watchdog (stopped) is killed at budget + grace.
TEST(CaptureSandbox, StoppedChildIsKilledAtTheHardDeadline) {
  SandboxOptions so = hooked(1000ms);
  so.grace = 500ms;
  CaptureSandbox box(so);
  NamedSleeper t("hook-stop");
  auto o = capture_with(box, t.pid(), budget(1000ms));
  expect_failed_with(o, "capture process killed after");
  EXPECT_NE(o.rec->result.snapshot.reason.find("(hard deadline 1.5 s): no result"), std::string::npos)
      << o.rec->result.snapshot.reason;
  EXPECT_GE(o.took, 1500ms);
  EXPECT_LT(o.took, 3000ms);
}

// Cancellation (the agent stopping) ends a capture at once.
TEST(CaptureSandbox, CancelEndsARunningCapture) {
  CaptureSandbox box(hooked(10000ms));
  NamedSleeper t("hook-stop");
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    box.cancel();
  });
  auto o = capture_with(box, t.pid(), budget(10000ms));
  canceller.join();
  expect_failed_with(o, "the agent is stopping");
  EXPECT_LT(o.took, 2000ms);
  // Cancelled for good: the next capture fails at once.
  auto again = capture_with(box, t.pid(), budget(10000ms));
  expect_failed_with(again, "the agent is stopping");
  EXPECT_LT(again.took, 500ms);
}

// A target killed right after the capture starts: failed or partial with
// "target exited" (or no process at all), never "unavailable", in every run.
TEST(CaptureSandbox, TargetKilledDuringCaptureSaysExited) {
  CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY});
  for (int run = 0; run < 10; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    Process go({kGoFixture, "-rate", "1"});
    ASSERT_NE(go.read_line(20s).find("\"ready\":true"), std::string::npos);
    std::string err;
    box.prestart(err);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(200 * run));
      go.kill_now();
    });
    auto rec = box.capture(go.pid(), budget(2000ms), err);
    killer.join();
    if (!rec) {
      EXPECT_NE(err.find("no process"), std::string::npos) << err;
      continue;
    }
    const auto& s = rec->result.snapshot;
    EXPECT_NE(s.status, SnapshotStatus::kUnavailable) << s.reason;
    if (s.status != SnapshotStatus::kComplete) {
      EXPECT_NE(s.reason.find("exited"), std::string::npos) << s.reason;
    }
  }
}

// A heap pointer into a userfaultfd page nobody serves: any read of it waits
// forever.
// - Default: the capture process reports the hung read after a quarter of
//   the budget; the capture runs again without the target's userfaultfd
//   mappings and returns a partial snapshot with the runtime's entries, naming
//   the range it did not read, within the budget.
// - With stall reports off (stall_after past the deadline): failed by budget +
//   grace, naming the hung read (the trap's address).
// Either way the sandbox serves the next capture.
namespace {

void expect_trap_reported(const oomsnap_test::TrapTarget& trap, const std::string& what, const std::string& entry) {
  SCOPED_TRACE(what);
  CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY, .grace = 1000ms, .max_budget = 2000ms});
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(trap.trap_addr));

  CaptureOptions all = budget(2000ms);
  all.max_entries = 100000;
  auto o = capture_with(box, trap.proc->pid(), all);
  ASSERT_TRUE(o.rec) << o.error;
  const auto& s = o.rec->result.snapshot;
  EXPECT_TRUE(o.rec->process_failure.empty()) << o.rec->process_failure;
  EXPECT_EQ(s.status, SnapshotStatus::kPartial) << s.reason;
  EXPECT_NE(s.reason.find(std::string("not read: ") + addr + "-"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("(userfaultfd)"), std::string::npos) << s.reason;
  bool found = false;
  for (const auto& e : s.entries) found |= e.name == entry;
  EXPECT_TRUE(found) << entry << " missing; reason: " << s.reason;
  EXPECT_LT(o.took, 2000ms);

  CaptureOptions no_stall_reports = budget(1000ms);
  no_stall_reports.stall_after = 10000ms;
  o = capture_with(box, trap.proc->pid(), no_stall_reports);
  expect_failed_with(o, "target read stalled");
  EXPECT_NE(o.rec->result.snapshot.reason.find(addr), std::string::npos) << o.rec->result.snapshot.reason;
  EXPECT_LT(o.took, 2000ms + 200ms);  // budget + grace, and some slack for a busy machine
  // The helper that hung is gone; the next capture works (the trap still stands).
  NamedSleeper plain("plain-sleeper");
  auto next = capture_with(box, plain.pid(), budget(1000ms));
  ASSERT_TRUE(next.rec) << next.error;
  EXPECT_TRUE(next.rec->process_failure.empty()) << next.rec->process_failure;
}

}  // namespace

TEST(CaptureSandbox, UserfaultfdTrapInCPythonHeap) {
  expect_trap_reported(oomsnap_test::start_python_uffd_trap(), "python 3.11 (host)", "__main__.Payload");
  const std::string rootfs = OOMSNAP_ROOTFS;
  expect_trap_reported(oomsnap_test::start_python_uffd_trap("/usr/bin/python3.13", rootfs + "/trixie"), "python 3.13",
                       "__main__.Payload");
  expect_trap_reported(oomsnap_test::start_python_uffd_trap("/usr/bin/python3.14", rootfs + "/sid"), "python 3.14",
                       "__main__.Payload");
}

TEST(CaptureSandbox, UserfaultfdTrapInGoBucketList) {
  for (const char* v : oomsnap_test::go_versions())
    expect_trap_reported(oomsnap_test::start_go_uffd_trap(v), std::string("go ") + v, "main.allocSmall");
}

// The goroutine census reads runtime.allgptr's array first: a trap there is
// reported like one in the bucket list, and the heap is still read (the
// retry skips the trapped range; the census says it could not read allgs).
TEST(CaptureSandbox, UserfaultfdTrapInGoAllgs) {
  for (const char* v : oomsnap_test::go_versions()) {
    auto trap = oomsnap_test::start_go_uffd_trap(v, 4, "allgs");
    expect_trap_reported(trap, std::string("go ") + v + " allgs", "main.allocSmall");
    CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY, .grace = 1000ms, .max_budget = 2000ms});
    auto o = capture_with(box, trap.proc->pid(), budget(2000ms));
    ASSERT_TRUE(o.rec) << o.error;
    const auto& g = o.rec->result.snapshot.goroutines;
    ASSERT_TRUE(g.has_value()) << v;
    EXPECT_EQ(g->status, SnapshotStatus::kFailed) << v << ": " << g->reason;
    EXPECT_NE(g->reason.find("allgs"), std::string::npos) << v << ": " << g->reason;
  }
}

// The same through `oomsnap snapshot`: exit 0 with a partial snapshot and the
// reason, within the budget.
TEST(CaptureSandbox, SnapshotCommandReturnsOnATrap) {
  auto trap = oomsnap_test::start_python_uffd_trap();
  auto t0 = std::chrono::steady_clock::now();
  Process cli({OOMSNAP_BINARY, "snapshot", "--pid", std::to_string(trap.proc->pid()), "--budget-ms", "1000",
               "--grace-ms", "1000"});
  const std::string line = cli.read_line(10s);
  int st = -1;
  while ((st = cli.try_wait()) < 0 && std::chrono::steady_clock::now() - t0 < 10s) std::this_thread::sleep_for(10ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
  EXPECT_EQ(st, 0);
  auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << line;
  EXPECT_EQ(oomsnap_test::record_schema_errors(line, true), "");
  EXPECT_EQ(j["snapshot"]["status"], "partial") << line;
  EXPECT_NE(j["snapshot"]["reason"].get<std::string>().find("(userfaultfd)"), std::string::npos) << line;
}

// Under a unit or pod that grants CAP_SYS_ADMIN but not
// CAP_CHECKPOINT_RESTORE (needed for /proc/PID/map_files), the capture
// process keeps SYS_ADMIN in its place, and nothing it was not given.
TEST(CaptureSandbox, KeepsSysAdminWhereCheckpointRestoreIsNotGranted) {
  char tmpl[] = "/tmp/oomsnap-capwrap-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string wrapper = dir + "/helper.sh";
  std::ofstream(wrapper) << "#!/bin/sh\nexec /usr/bin/setpriv --bounding-set -checkpoint_restore --inh-caps "
                            "-checkpoint_restore " OOMSNAP_BINARY " \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  {
    CaptureSandbox box(SandboxOptions{.helper_path = wrapper});
    std::string err;
    ASSERT_TRUE(box.prestart(err)) << err;
    std::map<std::string, std::string> st;
    for (int i = 0; i < 400; ++i) {
      st = status_of(box.helper_pid());
      if (st["Seccomp"] == "2") break;
      std::this_thread::sleep_for(5ms);
    }
    ASSERT_EQ(st["Seccomp"], "2");
    const uint64_t want = (1ull << CAP_SYS_PTRACE) | (1ull << CAP_DAC_READ_SEARCH) | (1ull << CAP_SYS_ADMIN);
    EXPECT_EQ(std::stoull(st["CapEff"], nullptr, 16), want) << st["CapEff"];
    EXPECT_EQ(std::stoull(st["CapBnd"], nullptr, 16), want) << st["CapBnd"];
  }
  fs::remove_all(dir);
}

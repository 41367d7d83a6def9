// The last gasp (bpf/last_gasp.bpf.c, agent/events/last_gasp_source.h,
// go/go_last_gasp.h): a live Go fixture is armed, then killed — by kill -9, or
// by the kernel's OOM killer in the middle of one huge allocation — and the
// heap profile read in its own context at the kill must equal the profile it
// wrote itself just before, as the live read's does (go_snapshot_test.cpp).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "agent/events/last_gasp_source.h"
#include "capture/capture_sandbox.h"
#include "core/target.h"
#include "go/go_last_gasp.h"
#include "go_matrix.h"
#include "go_profile_checks.h"
#include "pprof_summary.h"
#include "test_cgroup.h"
#include "trap_targets.h"

using namespace oomsnap;
namespace fs = std::filesystem;

namespace {

std::string scratch_dir() {
  std::string d = "/tmp/oomsnap-lg-" + std::to_string(getpid());
  fs::create_directories(d);
  return d;
}

// The walk of pid, once its END came (nullopt after `timeout`).
std::optional<LastGaspWalk> wait_walk(LastGaspSource& src, pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    for (LastGaspWalk& w : src.consume())
      if (w.pid == pid) return std::move(w);
    pollfd p{src.fd(), POLLIN, 0};
    poll(&p, 1, 50);
  }
  return std::nullopt;
}

std::unique_ptr<LastGaspSource> open_source(const LastGaspSource::Limits& limits = {}) {
  std::string why;
  auto src = LastGaspSource::open(limits, why);
  EXPECT_TRUE(src) << why;
  return src;
}

CaptureOptions exact_options() {
  CaptureOptions opts;
  opts.max_entries = 1000;
  opts.want_pprof = true;
  return opts;
}

// A fixture opened and armed; the target stays open (its exe too) after it dies.
struct ArmedFixture {
  oomsnap_test::StartedGoFixture fx;
  std::unique_ptr<Target> target;
  GoLastGaspPlan plan;
};

void arm_fixture(LastGaspSource& src, ArmedFixture& a, const CaptureOptions& opts) {
  std::string why;
  a.target = Target::open(a.fx.proc->pid(), why);
  ASSERT_TRUE(a.target) << why;
  auto plan = plan_go_last_gasp(*a.target, opts, why);
  ASSERT_TRUE(plan) << why;
  a.plan = std::move(*plan);
  auto identity = read_identity(a.fx.proc->pid());
  ASSERT_TRUE(identity);
  ASSERT_TRUE(src.arm(a.fx.proc->pid(), identity->start_time_ticks, a.plan.arm, why)) << why;
}

std::string go126() { return oomsnap_test::go_fixture_path("1.26", "default"); }

// The snapshot's reason for a walk that ended with `end`: and, when one of
// its buckets (the newest, first in the list) had its counters in a page
// never written (about 1 kill in 60), that too.
std::string snapshot_reason(const LastGaspWalk& walk, const std::string& end) {
  if (!walk.zero_tails) return end;
  return end + "; last gasp: " + std::to_string(walk.zero_tails) +
         " bucket(s) had counters in a page not present at the kill (never written, or swapped out), read as zeros";
}

// Starts the fixture bin with args, arms it, kills it with SIGKILL and waits
// for its walk (nullopt, with a failure recorded, when any step fails).
std::optional<LastGaspWalk> start_arm_and_kill(LastGaspSource& src, ArmedFixture& a, const std::string& bin,
                                               std::vector<std::string> args, const CaptureOptions& opts) {
  a.fx = oomsnap_test::start_go_fixture(bin, std::move(args));
  if (!a.fx.proc) return std::nullopt;
  arm_fixture(src, a, opts);
  if (::testing::Test::HasFatalFailure()) return std::nullopt;
  const pid_t pid = a.fx.proc->pid();
  if (::kill(pid, SIGKILL) != 0) {
    ADD_FAILURE() << "kill " << pid;
    return std::nullopt;
  }
  auto walk = wait_walk(src, pid, std::chrono::seconds(20));
  if (!walk) ADD_FAILURE() << "no last-gasp walk of " << pid;
  return walk;
}

// The in-use view equals the fixture's census exactly (rate 1) and its own
// profile on every stack through main.*.
void expect_equals_own_profile(const CaptureResult& r, const nlohmann::json& census, const std::string& own,
                               const std::string& ours) {
  const Snapshot& s = r.snapshot;
  oomsnap_test::expect_census_exact(s, census);
  ASSERT_TRUE(r.pprof);
  {
    std::ofstream f(ours, std::ios::binary);
    f << *r.pprof;
  }
  auto want = testutil::summarize_pprof_file(own);
  auto have = testutil::summarize_pprof_file(ours);
  EXPECT_EQ(have.sample_types, want.sample_types);
  for (const auto& d : testutil::compare_stacks(oomsnap_test::fixture_stacks(have),
                                                oomsnap_test::fixture_stacks(want), 0.005))
    ADD_FAILURE() << d;
  EXPECT_GE(oomsnap_test::fixture_stacks(have).size(), 4u);
  fs::remove(ours);
}

}  // namespace

class LastGasp : public ::testing::TestWithParam<oomsnap_test::GoMatrixParam> {};

// kill -9 of an armed fixture: the walk reaches the list's end in the dying
// process, and the snapshot from it equals the fixture's own profile.
TEST_P(LastGasp, AKillGivesTheHeapProfileTheProcessWroteItself) {
  auto [ver, mode] = GetParam();
  auto src = open_source();
  ASSERT_TRUE(src);
  const std::string dir = scratch_dir();
  const std::string own = dir + "/own-" + ver + "-" + mode + ".pb.gz";
  ArmedFixture a;
  const CaptureOptions opts = exact_options();
  auto walk =
      start_arm_and_kill(*src, a, oomsnap_test::go_fixture_path(ver, mode), {"-rate", "1", "-profile", own}, opts);
  ASSERT_TRUE(walk);
  EXPECT_EQ(walk->status, SnapshotStatus::kComplete) << walk->reason;
  EXPECT_GT(walk->buckets_sent, 4u);
  EXPECT_EQ(walk->buckets_received, walk->buckets_sent);
  EXPECT_EQ(src->armed(), 0u) << "a process whose walk ended stays armed";

  CaptureResult r = go_last_gasp_snapshot(*walk, a.plan, *a.target->exe_elf(), opts);
  const Snapshot& s = r.snapshot;
  ASSERT_EQ(s.status, SnapshotStatus::kComplete) << s.reason;
  EXPECT_EQ(r.language, "go");
  EXPECT_EQ(s.source, "last_gasp");
  EXPECT_EQ(s.runtime_version, a.fx.census["go_version"].get<std::string>());
  EXPECT_EQ(s.sample_rate.value_or(-1), 1);
  EXPECT_EQ(s.read_syscalls, 0u) << "the process is gone: nothing may be read from it";
  // The newest bucket's counters may lie in a page nothing wrote yet (not
  // present, so the probe read cannot read it): zeros, and said so.
  if (walk->zero_tails) {
    EXPECT_NE(s.reason.find("read as zeros"), std::string::npos) << s.reason;
    std::cout << walk->zero_tails << " bucket tail(s) read as zeros\n";
  }
  expect_equals_own_profile(r, a.fx.census, own, dir + "/ours-" + ver + "-" + mode + ".pb.gz");
  fs::remove(own);
}

INSTANTIATE_TEST_SUITE_P(Go, LastGasp,
                         ::testing::Combine(::testing::ValuesIn(oomsnap_test::go_versions()),
                                            ::testing::Values("default", "pie-stripped")),
                         oomsnap_test::go_matrix_name);

// As the agent does it: the plan and the snapshot each in a capture process
// (nothing of the target parsed in the caller), the executable held as an
// O_PATH descriptor from the arming on (the process is gone at the decode).
TEST(LastGaspSandboxed, PlanAndSnapshotInTheCaptureProcessEqualTheOwnProfile) {
  auto src = open_source();
  ASSERT_TRUE(src);
  const std::string dir = scratch_dir();
  const std::string own = dir + "/own-sandboxed.pb.gz";
  auto fx = oomsnap_test::start_go_fixture(oomsnap_test::go_fixture_path("1.26", "pie-stripped"),
                                           {"-rate", "1", "-profile", own});
  ASSERT_TRUE(fx.proc);
  const pid_t pid = fx.proc->pid();
  CaptureOptions opts = exact_options();
  opts.budget = std::chrono::milliseconds(10000);
  CaptureSandbox box(SandboxOptions{.helper_path = OOMSNAP_BINARY, .max_budget = opts.budget});
  std::string why;
  auto plan = box.plan_last_gasp(pid, opts, why);
  ASSERT_TRUE(plan) << why;
  UniqueFd exe(::open(("/proc/" + std::to_string(pid) + "/exe").c_str(), O_PATH | O_CLOEXEC));
  ASSERT_GE(exe.get(), 0);
  auto identity = read_identity(pid);
  ASSERT_TRUE(identity);
  ASSERT_TRUE(src->arm(pid, identity->start_time_ticks, plan->arm, why)) << why;
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto walk = wait_walk(*src, pid, std::chrono::seconds(10));
  ASSERT_TRUE(walk);

  LastGaspDecodeRequest req{*plan, *identity, *walk};
  CaptureRecord rec = box.decode_last_gasp(req, *walk->image, exe.get(), opts);
  EXPECT_EQ(rec.process_failure, "");
  EXPECT_EQ(rec.identity.pid, pid);
  EXPECT_EQ(rec.identity.start_time_ticks, identity->start_time_ticks);
  ASSERT_EQ(rec.result.snapshot.status, SnapshotStatus::kComplete) << rec.result.snapshot.reason;
  EXPECT_EQ(rec.result.snapshot.source, "last_gasp");
  expect_equals_own_profile(rec.result, fx.census, own, dir + "/ours-sandboxed.pb.gz");
  fs::remove(own);

  // Not a Go program: no plan, and why.
  oomsnap_test::Process sleeper({"/bin/sleep", "30"});
  EXPECT_FALSE(box.plan_last_gasp(sleeper.pid(), opts, why));
  EXPECT_NE(why.find("not a Go binary"), std::string::npos) << why;
}

// The cap on buckets per kill holds in the kernel: the snapshot is partial
// and says so, with what was read before the cap.
TEST(LastGaspLimits, TheBucketCapEndsTheWalkAndTheSnapshotSaysSo) {
  LastGaspSource::Limits limits;
  limits.max_buckets = 3;
  auto src = open_source(limits);
  ASSERT_TRUE(src);
  ArmedFixture a;
  const CaptureOptions opts = exact_options();
  auto walk = start_arm_and_kill(*src, a, go126(), {"-rate", "1"}, opts);
  ASSERT_TRUE(walk);
  EXPECT_EQ(walk->status, SnapshotStatus::kPartial);
  EXPECT_EQ(walk->buckets_sent, 3u);
  EXPECT_EQ(walk->reason, "bucket cap reached after 3 buckets");
  CaptureResult r = go_last_gasp_snapshot(*walk, a.plan, *a.target->exe_elf(), opts);
  EXPECT_EQ(r.snapshot.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.snapshot.reason, snapshot_reason(*walk, "last gasp: bucket cap reached after 3 buckets"));
}

// A bucket list that leads into a page nobody serves (userfaultfd): a read
// from outside would wait forever (capture_sandbox_test.cpp); the probe read
// in the dying process cannot fault the page in, so the walk ends at it at
// once, and the snapshot keeps the buckets before it and says where it ended.
TEST(LastGaspHostile, AListIntoAPageNobodyServesEndsThereAtOnce) {
  auto src = open_source();
  ASSERT_TRUE(src);
  auto trap = oomsnap_test::start_go_uffd_trap("1.26");
  const pid_t pid = trap.proc->pid();
  std::string why;
  auto target = Target::open(pid, why);
  ASSERT_TRUE(target) << why;
  const CaptureOptions opts = exact_options();
  auto plan = plan_go_last_gasp(*target, opts, why);
  ASSERT_TRUE(plan) << why;
  ASSERT_TRUE(src->arm(pid, 0, plan->arm, why)) << why;
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto walk = wait_walk(*src, pid, std::chrono::seconds(10));
  ASSERT_TRUE(walk) << "no walk: the dying process hung in the trap";
  EXPECT_EQ(walk->status, SnapshotStatus::kPartial);
  EXPECT_NE(walk->reason.find("unreadable bucket at 0x"), std::string::npos) << walk->reason;
  CaptureResult r = go_last_gasp_snapshot(*walk, *plan, *target->exe_elf(), opts);
  EXPECT_EQ(r.snapshot.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.snapshot.reason, snapshot_reason(*walk, "last gasp: " + walk->reason));
  bool small = false;
  for (const auto& e : r.snapshot.entries) small |= e.name == "main.allocSmall";
  EXPECT_TRUE(small) << "the buckets before the trap are lost";
}

// The kernel side has no cycle check (only its cap): a list that loops comes
// in as buckets sent again. The image keeps one copy of each, and the live
// walker's cycle check ends the snapshot at the repeat.
TEST(LastGaspHostile, ABucketListThatLoopsIsCutAtTheRepeat) {
  auto src = open_source();
  ASSERT_TRUE(src);
  ArmedFixture a;
  const CaptureOptions opts = exact_options();
  auto walk = start_arm_and_kill(*src, a, go126(), {"-rate", "1"}, opts);
  ASSERT_TRUE(walk);
  ASSERT_EQ(walk->status, SnapshotStatus::kComplete) << walk->reason;
  // Point the last bucket's allnext back at the first one.
  uint64_t head = 0, addr = 0, last = 0;
  ASSERT_TRUE(walk->image->read(a.plan.arm.mbuckets, &head, 8));
  for (addr = head; addr != 0;) {
    last = addr;
    ASSERT_TRUE(walk->image->read(addr + 8, &addr, 8));
  }
  std::vector<uint8_t> bucket(48);
  ASSERT_TRUE(walk->image->read(last, bucket.data(), 48));
  uint64_t nstk = 0;
  std::memcpy(&nstk, bucket.data() + 40, 8);
  bucket.resize(48 + nstk * 8 + a.plan.arm.record_bytes);
  ASSERT_TRUE(walk->image->read(last, bucket.data(), bucket.size()));
  std::memcpy(bucket.data() + 8, &head, 8);
  ASSERT_TRUE(walk->image->add(last, bucket));  // the same start: replaces it
  CaptureResult r = go_last_gasp_snapshot(*walk, a.plan, *a.target->exe_elf(), opts);
  EXPECT_EQ(r.snapshot.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.snapshot.reason.find("cycle in bucket list"), std::string::npos) << r.snapshot.reason;
  oomsnap_test::expect_census_exact(r.snapshot, a.fx.census);
}

// The default cap bounds the dying task's time on a huge list, and the ring
// buffer holds a capped walk whole.
TEST(LastGaspLimits, TheDefaultCapBoundsAWalkOfAHugeList) {
  const LastGaspSource::Limits limits;
  auto src = open_source(limits);
  ASSERT_TRUE(src);
  ArmedFixture a;
  const CaptureOptions opts = exact_options();
  const std::vector<std::string> args = {"-rate", "1", "-stacks", std::to_string(limits.max_buckets + 5000),
                                         "-measure-runs", "0"};
  auto walk = start_arm_and_kill(*src, a, go126(), args, opts);
  ASSERT_TRUE(walk);
  EXPECT_EQ(walk->status, SnapshotStatus::kPartial);
  EXPECT_EQ(walk->reason, "bucket cap reached after " + std::to_string(limits.max_buckets) + " buckets");
  EXPECT_EQ(walk->buckets_received, limits.max_buckets);
  std::cout << "walk of " << walk->buckets_sent << " buckets (" << walk->image->bytes() << " bytes): "
            << walk->walk_ns / 1000 << " us in the dying task\n";
}

// The classic tracepoint (tracefs), for kernels whose raw tracepoint does not
// load: the same walk.
TEST(LastGaspAttach, TheTracepointFallbackReadsTheSame) {
  LastGaspSource::Limits limits;
  limits.attach = LastGaspSource::Limits::Attach::kTracepoint;
  auto src = open_source(limits);
  ASSERT_TRUE(src);
  EXPECT_EQ(src->description().rfind("tp/signal/signal_deliver", 0), 0u) << src->description();
  ArmedFixture a;
  const CaptureOptions opts = exact_options();
  auto walk = start_arm_and_kill(*src, a, go126(), {"-rate", "1"}, opts);
  ASSERT_TRUE(walk);
  EXPECT_EQ(walk->status, SnapshotStatus::kComplete) << walk->reason;
  CaptureResult r = go_last_gasp_snapshot(*walk, a.plan, *a.target->exe_elf(), opts);
  EXPECT_EQ(r.snapshot.status, SnapshotStatus::kComplete) << r.snapshot.reason;
  oomsnap_test::expect_census_exact(r.snapshot, a.fx.census);
}

// A process that is not armed is not read; one that is armed and exits
// without a SIGKILL sends nothing either; nor one killed under a pid armed
// for a process that started at another time.
TEST(LastGaspLimits, OnlyASigkillOfTheArmedProcessIsRead) {
  auto src = open_source();
  ASSERT_TRUE(src);
  auto plain = oomsnap_test::start_go_fixture(go126(), {"-rate", "1"});
  ASSERT_TRUE(plain.proc);
  ArmedFixture a;
  a.fx = oomsnap_test::start_go_fixture(go126(), {"-rate", "1"});
  ASSERT_TRUE(a.fx.proc);
  arm_fixture(*src, a, exact_options());
  if (HasFatalFailure()) return;
  // Armed for a process of the same pid that started at another time (the
  // pid reused before the agent's next scan disarmed it): not read.
  ArmedFixture reused;
  reused.fx = oomsnap_test::start_go_fixture(go126(), {"-rate", "1"});
  ASSERT_TRUE(reused.fx.proc);
  const pid_t reused_pid = reused.fx.proc->pid();
  std::string why;
  reused.target = Target::open(reused_pid, why);
  ASSERT_TRUE(reused.target) << why;
  auto plan = plan_go_last_gasp(*reused.target, exact_options(), why);
  ASSERT_TRUE(plan) << why;
  auto identity = read_identity(reused_pid);
  ASSERT_TRUE(identity);
  ASSERT_TRUE(src->arm(reused_pid, identity->start_time_ticks + 1, plan->arm, why)) << why;

  ASSERT_EQ(::kill(plain.proc->pid(), SIGKILL), 0);
  ASSERT_EQ(::kill(a.fx.proc->pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(reused_pid, SIGKILL), 0);
  EXPECT_FALSE(wait_walk(*src, plain.proc->pid(), std::chrono::milliseconds(500)));
  EXPECT_FALSE(wait_walk(*src, a.fx.proc->pid(), std::chrono::milliseconds(500)));
  EXPECT_FALSE(wait_walk(*src, reused_pid, std::chrono::milliseconds(500)));
}

// The kernel's OOM killer, in the middle of one allocation far above the
// limit (no threshold can be crossed in time for a read from outside): the
// profile read at the kill still equals the one the fixture wrote before the
// burst, and `recent` shows the allocation that killed it.
TEST(LastGaspOomKill, ALimitHitInOneAllocationStillGivesTheProfileBeforeIt) {
  auto src = open_source();
  ASSERT_TRUE(src);
  oomsnap_test::TestMemcg box("lastgasp", 256ull << 20);
  const std::string dir = scratch_dir();
  const std::string own = dir + "/own-burst.pb.gz";
  const std::string bin = go126();
  ArmedFixture a;
  a.fx = oomsnap_test::start_go_fixture(
      "/bin/sh", {"-c", "echo $$ > " + box.dir() + "/cgroup.procs && exec \"$@\"", "sh", bin, "-rate", "1",
                  "-profile", own, "-burst-mb", "1024"});
  ASSERT_TRUE(a.fx.proc);
  CaptureOptions opts = exact_options();
  arm_fixture(*src, a, opts);
  if (HasFatalFailure()) return;
  const pid_t pid = a.fx.proc->pid();

  ASSERT_EQ(::kill(pid, SIGUSR1), 0);  // the burst
  auto walk = wait_walk(*src, pid, std::chrono::seconds(30));
  ASSERT_TRUE(walk) << "no last-gasp walk of " << pid;
  int status = -1;
  for (int i = 0; i < 200 && (status = a.fx.proc->try_wait()) == -1; ++i) usleep(10000);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_NE(oomsnap_test::slurp(box.dir() + "/memory.oom_control").find("oom_kill 1"), std::string::npos)
      << "not killed by the OOM killer";
  EXPECT_EQ(walk->status, SnapshotStatus::kComplete) << walk->reason;

  CaptureResult r = go_last_gasp_snapshot(*walk, a.plan, *a.target->exe_elf(), opts);
  const Snapshot& s = r.snapshot;
  ASSERT_EQ(s.status, SnapshotStatus::kComplete) << s.reason;
  EXPECT_EQ(s.source, "last_gasp");
  expect_equals_own_profile(r, a.fx.census, own, dir + "/ours-burst.pb.gz");
  ASSERT_TRUE(s.recent);
  bool burst_seen = false;
  for (const auto& e : s.recent->entries)
    if (e.name == "main.burst") {
      burst_seen = true;
      EXPECT_EQ(e.objects, 1u);
      EXPECT_EQ(e.bytes, 1024ull << 20);
    }
  EXPECT_TRUE(burst_seen) << "the allocation that hit the limit is not in recent";
  fs::remove(own);
}

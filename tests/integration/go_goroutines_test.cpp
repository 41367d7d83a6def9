// The goroutine census against live Go targets, every toolchain × build mode:
// the fixture's -goroutines mode parks 16,000 goroutines at known sites and
// writes its own goroutine profile (runtime/pprof, debug=0) as the oracle;
// the census and our --profile goroutine pprof must agree with it by stack.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "pprof_summary.h"
#include "snapshot_checks.h"
#include "go_matrix.h"
#include "test_process.h"

using namespace oomsnap;
namespace fs = std::filesystem;
using oomsnap_test::Process;
using oomsnap_test::run_status;

namespace {

using oomsnap_test::go_fixture_path;
using oomsnap_test::kGoModes;
using oomsnap_test::go_versions;

std::string scratch_dir() {
  std::string d = "/tmp/oomsnap-gor-" + std::to_string(getpid());
  fs::create_directories(d);
  return d;
}

std::unique_ptr<Process> start(const std::string& bin, std::vector<std::string> args, nlohmann::json& ready) {
  auto s = oomsnap_test::start_go_fixture(bin, std::move(args));
  ready = std::move(s.census);
  return std::move(s.proc);
}

bool contains(const std::vector<std::string>& stack, const std::string& fn) {
  return std::find(stack.begin(), stack.end(), fn) != stack.end();
}

// The comparable part of a goroutine profile: stack -> count, without the
// main goroutine (it wrote the oracle, then went to sleep; a census right
// after the ready line can find it still running, without a stack: a sample
// of its start, runtime.main, alone) and the spinners (caught wherever they
// were), which are checked apart.
std::map<std::vector<std::string>, int64_t> parked(const testutil::StackMap& stacks) {
  std::map<std::vector<std::string>, int64_t> out;
  for (const auto& [stk, v] : stacks)
    if (!contains(stk, "main.main") && !contains(stk, "runtime.main") && !contains(stk, "main.spin"))
      out[stk] += v[0];
  return out;
}

int64_t count_with(const testutil::StackMap& stacks, const std::string& fn) {
  int64_t n = 0;
  for (const auto& [stk, v] : stacks)
    if (contains(stk, fn)) n += v[0];
  return n;
}

CaptureOptions census_options() {
  CaptureOptions o;
  o.max_entries = 1000;
  o.max_goroutine_groups = 1000;
  o.budget = std::chrono::milliseconds(20000);
  return o;
}

// One census of a -goroutines fixture against the profile it wrote: status
// complete, the parked stacks exactly the oracle's, states, wait reasons and
// creation sites per site, and the pprof the same. deep: -deep-park's count.
void expect_census_equals_own_profile(const std::string& ver, const std::string& mode, Process& fx,
                                      const nlohmann::json& ready, const std::string& own, uint64_t deep,
                                      uint64_t* stacks_reread) {
  const std::string dir = scratch_dir();
  CaptureOptions opts = census_options();
  opts.want_pprof = true;
  opts.profile = ProfileKind::kGoroutine;
  std::string err;
  auto rec = oomsnap_test::capture_sandboxed(fx.pid(), opts, err);
  ASSERT_TRUE(rec) << err;
  const Snapshot& s = rec->result.snapshot;
  ASSERT_TRUE(s.goroutines) << "no census";
  const GoroutineCensus& c = *s.goroutines;
  ASSERT_EQ(c.status, SnapshotStatus::kComplete) << c.reason;
  EXPECT_FALSE(c.groups_truncated);
  if (stacks_reread) *stacks_reread += c.stacks_reread;

  const auto want = testutil::summarize_pprof_file(own);
  ASSERT_EQ(want.sample_types, std::vector<std::string>{"goroutine"});
  int64_t want_total = 0;
  for (const auto& [stk, v] : want.stacks) want_total += v[0];
  EXPECT_EQ(c.total, static_cast<uint64_t>(want_total));
  EXPECT_EQ(c.total, ready["goroutines"].get<uint64_t>());

  // The census by stack: exactly the oracle's parked stacks.
  testutil::StackMap ours;
  uint64_t spinners = 0, mains = 0;
  for (const auto& g : c.groups) {
    if (g.start == "main.spin") spinners += g.count;
    if (contains(g.stack, "main.main") || g.start == "runtime.main") mains += g.count;
    if (!g.stack.empty()) ours[g.stack][0] += static_cast<int64_t>(g.count);
  }
  EXPECT_EQ(parked(ours), parked(want.stacks));
  EXPECT_EQ(spinners, static_cast<uint64_t>(count_with(want.stacks, "main.spin")));
  EXPECT_EQ(spinners, ready["spinners"].get<uint64_t>());
  EXPECT_EQ(mains, 1u);

  // States, wait reasons and creation sites of the parked groups.
  const std::string mutex_reason = ver == "1.19" ? "semacquire" : "sync.Mutex.Lock";
  std::map<std::string, std::pair<uint64_t, std::string>> sites = {
      {"main.parkChanRecv", {10000, "chan receive"}},
      {"main.parkSleep", {5000, "sleep"}},
      {"main.parkMutex", {1000, mutex_reason}},
      {"main.parkArg", {500, "chan receive"}}};
  if (deep) sites["main.parkDeep"] = {deep, "chan receive"};
  for (const auto& [site, expect] : sites) {
    uint64_t n = 0;
    for (const auto& g : c.groups) {
      if (!contains(g.stack, site)) continue;
      n += g.count;
      EXPECT_EQ(g.state, "waiting") << site;
      EXPECT_EQ(g.wait_reason, expect.second) << site;
      EXPECT_EQ(g.created_by, "main.runGoroutines") << site;
      // `go parkArg(i)` starts in the compiler's wrapper, which runs parkArg;
      // the stack (as the runtime's profile) leaves the wrapper out.
      if (site == "main.parkArg")
        EXPECT_EQ(g.start.rfind("main.runGoroutines.", 0), 0u) << g.start;
      else
        EXPECT_EQ(g.start, site) << site;
      EXPECT_EQ(g.stack.front(), "runtime.gopark") << site;
      EXPECT_EQ(g.stack.back(), site) << site;
    }
    EXPECT_EQ(n, expect.first) << site;
  }
  uint64_t by_state_sum = 0;
  for (const auto& [k, v] : c.by_state) by_state_sum += v;
  EXPECT_EQ(by_state_sum, c.total);

  // --profile goroutine: the same stacks in a profile.proto go tool pprof reads.
  ASSERT_TRUE(rec->result.pprof);
  const std::string path = dir + "/ours-" + ver + "-" + mode + ".pb.gz";
  {
    std::ofstream f(path, std::ios::binary);
    f << *rec->result.pprof;
  }
  const auto have = testutil::summarize_pprof_file(path);
  EXPECT_EQ(have.sample_types, want.sample_types);
  EXPECT_EQ(have.period_type, want.period_type);
  EXPECT_EQ(have.period, want.period);
  EXPECT_EQ(parked(have.stacks), parked(want.stacks));
  EXPECT_EQ(count_with(have.stacks, "main.spin"), count_with(want.stacks, "main.spin"));
  std::string out;
  const std::string go = std::string(OOMSNAP_GO_CACHE) + "/1.26/bin/go";
  int rc = run_status("GOTOOLCHAIN=local GOCACHE=" + std::string(OOMSNAP_GO_CACHE) + "/../gocache-1.26 " + go +
                          " tool pprof -traces " + path + " 2>&1",
                      &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("main.parkChanRecv"), std::string::npos) << out;
  fs::remove(path);
}

}  // namespace

class GoGoroutines : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(GoGoroutines, CensusEqualsOwnGoroutineProfile) {
  auto [ver, mode] = GetParam();
  const std::string own = scratch_dir() + "/own-" + ver + "-" + mode + ".pb.gz";
  nlohmann::json ready;
  auto fx = start(go_fixture_path(ver, mode), {"-goroutines", "-profile", own}, ready);
  if (!fx) return;
  expect_census_equals_own_profile(ver, mode, *fx, ready, own, 0, nullptr);
  fs::remove(own);
}

// The GC running through the census, as in any program that allocates: GC
// cycles back to back scan every parked stack, stop the spinners to scan
// theirs (_Gwaiting, "preempted", for a moment) and halve the deep-parked
// goroutines' stacks (copystack: same pc, new sp). No parked goroutine
// moves, so every census is complete and equal to the oracle, on every
// toolchain (the GC's part does not depend on the build mode). Failed before
// the census read moved stacks again and counted GC-stopped goroutines as
// running: "parked goroutines changed state while being read".
class GoGoroutinesUnderGc : public ::testing::TestWithParam<const char*> {};

TEST_P(GoGoroutinesUnderGc, CompleteAndEqualWhileTheGcRuns) {
  const std::string ver = GetParam();
  const std::string own = scratch_dir() + "/own-gc-" + ver + ".pb.gz";
  constexpr uint64_t kDeep = 100;
  nlohmann::json ready;
  auto fx = start(go_fixture_path(ver, "default"),
                  {"-goroutines", "-gc-loop", "-deep-park", std::to_string(kDeep), "-profile", own}, ready);
  if (!fx) return;
  ASSERT_TRUE(ready["gc_loop"].get<bool>());
  uint64_t reread = 0;
  for (int i = 0; i < 4 && !HasFatalFailure(); ++i) {
    SCOPED_TRACE("capture " + std::to_string(i));
    expect_census_equals_own_profile(ver, "default", *fx, ready, own, kDeep, &reread);
  }
  // Which captures met a moving stack depends on timing; say how many did.
  std::cout << "[ info ] go" << ver << ": " << reread << " stacks read again in 4 censuses\n";
  fs::remove(own);
}

INSTANTIATE_TEST_SUITE_P(AllToolchains, GoGoroutinesUnderGc, ::testing::ValuesIn(go_versions()),
                         [](const auto& i) {
                           std::string n = std::string("go") + i.param;
                           for (auto& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

INSTANTIATE_TEST_SUITE_P(AllToolchains, GoGoroutines,
                         ::testing::Combine(::testing::ValuesIn(go_versions()), ::testing::ValuesIn(kGoModes)),
                         oomsnap_test::go_matrix_name);

// Goroutines created and ended while we read: every capture finishes, the
// parked sites stay exact, and a census that saw the set change says partial.
TEST(GoGoroutinesChurn, NeverCrashesAndSaysPartial) {
  nlohmann::json ready;
  auto fx = start(go_fixture_path("1.26", "default"), {"-goroutines", "-spinners", "0", "-churn", "4"}, ready);
  if (!fx) return;
  int partial = 0;
  for (int i = 0; i < 12; ++i) {
    std::string err;
    auto rec = oomsnap_test::capture_sandboxed(fx->pid(), census_options(), err);
    ASSERT_TRUE(rec) << err;
    ASSERT_TRUE(rec->result.snapshot.goroutines);
    const GoroutineCensus& c = *rec->result.snapshot.goroutines;
    ASSERT_TRUE(c.status == SnapshotStatus::kComplete || c.status == SnapshotStatus::kPartial) << c.reason;
    if (c.status == SnapshotStatus::kPartial) {
      ++partial;
      EXPECT_FALSE(c.reason.empty());
    }
    uint64_t chanrecv = 0;
    for (const auto& g : c.groups)
      if (contains(g.stack, "main.parkChanRecv")) chanrecv += g.count;
    EXPECT_EQ(chanrecv, 10000u) << c.reason;
    EXPECT_GE(c.total, 16000u);
  }
  EXPECT_GT(partial, 0) << "4 churning goroutines never made a census inconsistent";
}

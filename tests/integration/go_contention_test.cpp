// Live Go targets, every toolchain × build mode: `--profile block|mutex` reads
// runtime.bbuckets / runtime.xbuckets from outside and equals the target's own
// runtime/pprof block and mutex profiles (per stack, contentions and delay
// within 0.5 %), and a program that never enabled them gets `unavailable`.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "pprof_summary.h"
#include "snapshot_checks.h"
#include "go_matrix.h"
#include "test_process.h"

using namespace oomsnap;
namespace fs = std::filesystem;
using oomsnap_test::Process;

namespace {

using oomsnap_test::go_fixture_path;
using oomsnap_test::kGoModes;
using oomsnap_test::go_versions;

using Started = oomsnap_test::StartedGoFixture;
Started start_fixture(const std::string& bin, std::vector<std::string> args) {
  return oomsnap_test::start_go_fixture(bin, std::move(args));
}

std::optional<CaptureRecord> capture(pid_t pid, ProfileKind kind, bool pprof, std::string& err) {
  CaptureOptions opts;
  opts.max_entries = 1000;
  opts.want_pprof = pprof;
  opts.profile = kind;
  opts.budget = std::chrono::milliseconds(10000);
  return oomsnap_test::capture_sandboxed(pid, opts, err);
}

bool stack_has(const std::vector<std::string>& stack, const std::string& fn) {
  return std::find(stack.begin(), stack.end(), fn) != stack.end();
}

// The stacks through the fixture's contention sites.
testutil::StackMap site_stacks(const testutil::StackMap& all) {
  testutil::StackMap out;
  for (const auto& [stack, v] : all)
    for (const char* site : {"main.blockOnChan", "main.contendMutex", "main.holdMutex"})
      if (stack_has(stack, site)) {
        out.emplace(stack, v);
        break;
      }
  return out;
}

}  // namespace

class GoContention : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

// Our block and mutex pprof equal the fixture's own, and the JSON agrees with them.
TEST_P(GoContention, BlockAndMutexMatchOwnProfiles) {
  auto [ver, mode] = GetParam();
  std::string dir = "/tmp/oomsnap-it-contention-" + std::to_string(getpid());
  fs::create_directories(dir);
  auto fx = start_fixture(go_fixture_path(ver, mode), {"-contention", "-profile-dir", dir});
  if (!fx.proc) return;
  ASSERT_EQ(fx.census["mode"], "contention");
  std::vector<testutil::PprofSummary> ours_by_kind;  // block, mutex

  for (ProfileKind kind : {ProfileKind::kBlock, ProfileKind::kMutex}) {
    const bool block = kind == ProfileKind::kBlock;
    SCOPED_TRACE(profile_kind_name(kind));
    std::string err;
    auto rec = capture(fx.proc->pid(), kind, true, err);
    ASSERT_TRUE(rec) << err;
    const Snapshot& s = rec->result.snapshot;
    ASSERT_EQ(rec->result.language, "go") << rec->result.snapshot.reason;
    const auto& p = block ? s.block : s.mutex;
    ASSERT_TRUE(p) << "no snapshot." << profile_kind_name(kind);
    EXPECT_FALSE(block ? s.mutex.has_value() : s.block.has_value());
    ASSERT_EQ(p->status, SnapshotStatus::kComplete) << p->reason;
    // The conversion runtime/pprof used, read out of the target.
    EXPECT_EQ(p->cycles_per_second, fx.census["cycles_per_second"].get<int64_t>());
    if (!block) {
      EXPECT_EQ(p->rate.value_or(-1), fx.census["mutex_fraction"].get<int64_t>());
    } else {
      EXPECT_GT(p->rate.value_or(0), 0);  // SetBlockProfileRate(1) stores >= 1 tick
    }

    // The oracle: the fixture's own profile, stack by stack.
    ASSERT_TRUE(rec->result.pprof);
    const std::string ours = dir + "/ours-" + profile_kind_name(kind) + "-" + ver + "-" + mode + ".pb.gz";
    std::ofstream(ours, std::ios::binary) << *rec->result.pprof;
    ours_by_kind.push_back(testutil::summarize_pprof_file(ours));
    fs::remove(ours);
    const auto& have = ours_by_kind.back();
    auto want = testutil::summarize_pprof_file(fx.census[block ? "block_profile" : "mutex_profile"].get<std::string>());
    EXPECT_EQ(have.period, want.period);
    EXPECT_EQ(have.period_type, "contentions");
    EXPECT_EQ(have.period_type, want.period_type);
    EXPECT_EQ(have.sample_types, want.sample_types);
    EXPECT_EQ(have.sample_units, want.sample_units);
    // The contention sites are quiescent (their goroutines have exited):
    // equal (0.5 %) to the fixture's profile. The rest of the stacks, where the
    // runtime may record contention on its own locks at any time (1.23+, e.g.
    // in the fixture's write of its ready line), are checked below.
    for (const auto& d : testutil::compare_stacks(site_stacks(have.stacks), site_stacks(want.stacks), 0.005))
      ADD_FAILURE() << d;
    EXPECT_FALSE(site_stacks(want.stacks).empty());
    ASSERT_FALSE(want.stacks.empty());

    // The JSON totals are our profile's totals.
    auto t = testutil::total(have.stacks);
    EXPECT_EQ(p->total_contentions, t[0]);
    EXPECT_EQ(p->total_delay_ns, t[1]);
    // The known sites are there, with their waits.
    const std::string site = fx.census[block ? "block_site" : "mutex_holder_site"].get<std::string>();
    bool found = false;
    for (const auto& e : p->entries) {
      if (!stack_has(e.stack, site)) continue;
      found = true;
      EXPECT_GT(e.contentions, 0);
      EXPECT_GT(e.delay_ns, 0);
      EXPECT_EQ(e.name, e.stack.front());
    }
    EXPECT_TRUE(found) << site << " not in snapshot." << profile_kind_name(kind);
    for (size_t i = 1; i < p->entries.size(); ++i) EXPECT_GE(p->entries[i - 1].delay_ns, p->entries[i].delay_ns);
    if (block) {
      // Every channel waiter blocked at main.blockOnChan, each once.
      int64_t chan = 0;
      for (const auto& e : p->entries)
        if (e.stack.size() >= 2 && e.stack[1] == "main.blockOnChan") chan += e.contentions;
      EXPECT_EQ(chan, fx.census["chan_waiters"].get<int64_t>());
    }
  }

  // Every stack, the runtime's own included (contention on runtime-internal
  // locks can be recorded at any time, 1.23+): ours lies between the profile
  // the fixture wrote before our reads and the one it writes after them.
  ASSERT_EQ(::kill(fx.proc->pid(), SIGUSR1), 0);
  ASSERT_EQ(fx.proc->read_line(std::chrono::seconds(30)), "rewritten");
  for (int k = 0; k < 2; ++k) {
    const std::string path = fx.census[k == 0 ? "block_profile" : "mutex_profile"].get<std::string>();
    SCOPED_TRACE(path);
    auto before = testutil::summarize_pprof_file(path);
    auto after = testutil::summarize_pprof_file(path + ".after");
    const auto& have = ours_by_kind[static_cast<size_t>(k)];
    for (const auto& [stack, v] : before.stacks) {
      auto it = have.stacks.find(stack);
      if (it == have.stacks.end()) {
        ADD_FAILURE() << "missing stack " << testutil::format_stack(stack);
        continue;
      }
      for (int i = 0; i < 2; ++i)
        EXPECT_GE(static_cast<double>(it->second[i]), static_cast<double>(v[i]) * 0.995) << testutil::format_stack(stack);
    }
    for (const auto& [stack, v] : have.stacks) {
      auto it = after.stacks.find(stack);
      if (it == after.stacks.end()) {
        ADD_FAILURE() << "stack in neither of the fixture's profiles: " << testutil::format_stack(stack);
        continue;
      }
      for (int i = 0; i < 2; ++i)
        EXPECT_LE(static_cast<double>(v[i]), static_cast<double>(it->second[i]) * 1.005) << testutil::format_stack(stack);
    }
    fs::remove(path);
    fs::remove(path + ".after");
  }
}

// A program that never enabled the profiles: unavailable, saying why; the heap
// snapshot beside it is unchanged.
TEST_P(GoContention, NeverEnabledIsUnavailable) {
  auto [ver, mode] = GetParam();
  auto fx = start_fixture(go_fixture_path(ver, mode), {"-rate", "1"});
  if (!fx.proc) return;
  for (ProfileKind kind : {ProfileKind::kBlock, ProfileKind::kMutex}) {
    SCOPED_TRACE(profile_kind_name(kind));
    std::string err;
    auto rec = capture(fx.proc->pid(), kind, false, err);
    ASSERT_TRUE(rec) << err;
    const Snapshot& s = rec->result.snapshot;
    EXPECT_EQ(s.status, SnapshotStatus::kComplete) << s.reason;
    EXPECT_FALSE(s.entries.empty());
    const auto& p = kind == ProfileKind::kBlock ? s.block : s.mutex;
    ASSERT_TRUE(p);
    EXPECT_EQ(p->status, SnapshotStatus::kUnavailable);
    EXPECT_NE(p->reason.find("never enabled"), std::string::npos) << p->reason;
    EXPECT_TRUE(p->entries.empty());
  }
}

// The command line: `--profile block|mutex --format pprof` writes a profile
// that `go tool pprof` reads, with the known sites in it.
TEST(GoContentionCli, PprofOutputReadByGoToolPprof) {
  std::string dir = "/tmp/oomsnap-it-contention-cli-" + std::to_string(getpid());
  fs::create_directories(dir);
  auto fx = start_fixture(go_fixture_path("1.27", "pie-stripped"), {"-contention", "-profile-dir", dir});
  if (!fx.proc) return;
  const std::string go = std::string(OOMSNAP_GO_CACHE) + "/1.26/bin/go";
  for (const char* kind : {"block", "mutex"}) {
    const std::string out = dir + "/cli-" + kind + ".pb.gz";
    const std::string cmd = std::string(OOMSNAP_BINARY) + " snapshot --pid " + std::to_string(fx.proc->pid()) +
                            " --profile " + kind + " --format pprof -o " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::string text;
    FILE* p = popen(("GOTOOLCHAIN=local GOCACHE=" + std::string(OOMSNAP_GO_CACHE) + "/../gocache-1.26 " + go +
                     " tool pprof -traces " + out + " 2>&1").c_str(),
                    "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << text;
    EXPECT_NE(text.find(std::string(kind) == "block" ? "main.blockOnChan" : "main.holdMutex"), std::string::npos)
        << text;
    EXPECT_NE(text.find("(inline)"), std::string::npos) << "inlined Lock/Unlock are one location: " << text;
    fs::remove(out);
  }
  fs::remove(fx.census["block_profile"].get<std::string>());
  fs::remove(fx.census["mutex_profile"].get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(AllToolchains, GoContention,
                         ::testing::Combine(::testing::ValuesIn(go_versions()), ::testing::ValuesIn(kGoModes)),
                         oomsnap_test::go_matrix_name);

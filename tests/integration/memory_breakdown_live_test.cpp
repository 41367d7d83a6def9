// process_memory.breakdown of live processes with a known truth, as
// `oomsnap snapshot` reports it (the capture process reads smaps and the
// runtime, the record crosses the wire and holds to the schema): a touched
// anonymous mmap is native, a touched tmpfs file is shmem and named, parked
// goroutines' grown stacks are stacks, a Go program's heap splits as its own
// runtime.ReadMemStats says; the kinds sum to VmRSS.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "breakdown_checks.h"
#include "go_fixture_util.h"
#include "go_matrix.h"
#include "test_process.h"

using namespace std::chrono_literals;
using nlohmann::json;
using oomsnap_test::Process;
using oomsnap_test::RemoveAtExit;
using oomsnap_test::check_breakdown;
using oomsnap_test::kMiB;
using oomsnap_test::names;
using oomsnap_test::snapshot_of;

namespace {

// A python3 that maps `m` as map_code says, touches each of its pages and
// sleeps: its snapshot.
json snapshot_of_python_touching(const std::string& map_code) {
  Process p({"/usr/bin/python3", "-c",
             "import mmap, os, time\n" + map_code +
                 "for i in range(0, len(m), 4096): m[i] = 1\nprint('ready', flush=True)\ntime.sleep(120)\n"});
  EXPECT_EQ(p.read_line(30s), "ready");
  return snapshot_of(p.pid());
}

}  // namespace

TEST(MemoryBreakdownLive, ATouchedAnonymousMmapIsNative) {
  json snap = snapshot_of_python_touching("m = mmap.mmap(-1, 200 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n");
  ASSERT_FALSE(snap.is_discarded());
  const json* b = nullptr;
  EXPECT_EQ(check_breakdown(snap, b), "native");
  const double native = b->at("native").get<double>();
  EXPECT_NEAR(native, 200.0 * kMiB, 0.15 * 200 * kMiB) << b->dump(1);
  // The mmap itself leads the detail, by its address range.
  EXPECT_TRUE(names(*b, "native", "anonymous mapping ")) << b->dump(1);
  EXPECT_GE(b->at("detail")[0].at("bytes").get<uint64_t>(), 200 * kMiB) << b->dump(1);
}

TEST(MemoryBreakdownLive, ATouchedTmpfsFileIsShmemAndNamed) {
  const std::string shm = "/dev/shm/oomsnap-test-breakdown-" + std::to_string(getpid());
  RemoveAtExit unlink_after{shm};
  json snap = snapshot_of_python_touching("fd = os.open('" + shm + "', os.O_RDWR | os.O_CREAT, 0o600)\n"
                                          "os.ftruncate(fd, 96 << 20)\n"
                                          "m = mmap.mmap(fd, 96 << 20, flags=mmap.MAP_SHARED)\n");
  ASSERT_FALSE(snap.is_discarded());
  const json* b = nullptr;
  EXPECT_EQ(check_breakdown(snap, b), "shmem");
  uint64_t named = 0;
  EXPECT_TRUE(names(*b, "shmem", shm, &named)) << b->dump(1);
  EXPECT_EQ(named, 96 * kMiB) << b->dump(1);
  // The kernel's own counter of shmem pages agrees.
  const double rss_shmem = snap.at("process_memory").at("rss_shmem_bytes").get<double>();
  EXPECT_NEAR(b->at("shmem").get<double>(), rss_shmem, 0.02 * rss_shmem);
}

// 300 goroutines parked on stacks grown to 1 MiB (the fixture's -deep-park),
// with the GC off (GOGC=off) so that no cycle shrinks them, next to the same
// program without them: what they add to VmRSS is the truth for what they
// add to `stacks` (a 1 MiB stack is not touched whole: pagemap says which
// pages are resident). The 6,500 other parked goroutines are in both.
TEST(MemoryBreakdownLive, ParkedGoroutinesGrownStacksAreStacks) {
  constexpr uint64_t kDeep = 300;
  const std::string bin = oomsnap_test::go_fixture_path("1.26", "default");
  ASSERT_TRUE(std::filesystem::exists(bin)) << bin << " is missing: run tools/build-go-fixtures.sh";
  struct Run {
    double rss = 0, stacks = 0;
  };
  auto run = [&](uint64_t deep, bool largest_is_stacks) {
    Run r;
    Process fx({bin, "-goroutines", "-park-chan", "0", "-spinners", "0", "-deep-park", std::to_string(deep)},
               {"GOGC=off"});
    const json ready = json::parse(fx.read_line(60s), nullptr, false);
    EXPECT_FALSE(ready.is_discarded());
    json snap = snapshot_of(fx.pid());
    if (snap.is_discarded()) return r;
    const json* b = nullptr;
    const std::string largest = check_breakdown(snap, b);
    if (largest_is_stacks) {
      EXPECT_EQ(largest, "stacks") << b->dump(1);
    }
    const std::string goroutines = std::to_string(ready.at("goroutines").get<uint64_t>());
    EXPECT_TRUE(names(*b, "stacks", "goroutine stacks (")) << b->dump(1);
    r.rss = snap.at("process_memory").at("rss_bytes").get<double>();
    r.stacks = b->at("stacks").get<double>();
    return r;
  };
  const Run base = run(0, false);
  const Run deep = run(kDeep, true);
  ASSERT_GT(deep.rss, base.rss + 100.0 * kMiB);  // the deep stacks are there
  const double truth = base.stacks + (deep.rss - base.rss);
  EXPECT_NEAR(deep.stacks, truth, 0.15 * truth);
  std::printf("[ info ] stacks %.1f MiB, truth %.1f MiB (base stacks %.1f MiB, rss %.1f -> %.1f MiB)\n",
              deep.stacks / kMiB, truth / kMiB, base.stacks / kMiB, base.rss / kMiB, deep.rss / kMiB);
}

namespace {

// tests/fixtures/go/memstats built with toolchain v (offline, the
// toolchain's cached GOCACHE) into a file removed with `keep`.
std::string build_memstats_fixture(const std::string& v, RemoveAtExit& keep) {
  namespace tu = oomsnap::testutil;
  keep.path = "/tmp/oomsnap-memstats-" + v + "-" + std::to_string(getpid());
  const std::string cmd = "env CGO_ENABLED=0 GOCACHE=" + tu::shell_quote(tu::cache_root() + "/gocache-" + v) +
                          " GOROOT=" + tu::shell_quote(tu::cache_root() + "/go/" + v) +
                          " GOTOOLCHAIN=local GOPROXY=off GO111MODULE=off GOFLAGS= GOENV=off " +
                          tu::shell_quote(tu::go_tool(v)) + " build -o " + tu::shell_quote(keep.path) + " " +
                          tu::shell_quote(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/go/memstats/main.go") +
                          " 2>&1";
  auto r = oomsnap_test::run_command(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.out;
  return keep.path;
}

// |got - want| within `share` of want, or within `slack` bytes.
bool near(double got, double want, double share, double slack = 0) {
  return std::abs(got - want) <= std::max(share * want, slack);
}

class GoMemAccountingLive : public ::testing::TestWithParam<const char*> {};

}  // namespace

// A Go program holding 200 MiB of live objects (every page written) and
// 64 MiB of collected garbage, with the GC then off so that nothing moves:
// `heap` is the largest kind and within 15 % of its own HeapInuse, heap_free
// of HeapIdle - HeapReleased (or 4 MiB), read before and after the snapshot.
TEST_P(GoMemAccountingLive, HeapSplitsAsReadMemStatsSays) {
  const std::string v = GetParam();
  RemoveAtExit keep;
  const std::string bin = build_memstats_fixture(v, keep);
  ASSERT_TRUE(std::filesystem::exists(bin));
  Process fx({bin, "-live-mb", "200", "-garbage-mb", "64"});
  const json before = json::parse(fx.read_line(120s), nullptr, false);
  ASSERT_FALSE(before.is_discarded());
  json snap = snapshot_of(fx.pid());
  ASSERT_FALSE(snap.is_discarded());
  const json after = json::parse(fx.read_line(10s), nullptr, false);
  ASSERT_FALSE(after.is_discarded());
  const json* b = nullptr;
  EXPECT_EQ(check_breakdown(snap, b), "heap") << b->dump(1);
  EXPECT_TRUE(names(*b, "heap", "Go heap (in use)")) << b->dump(1);
  EXPECT_TRUE(names(*b, "heap_free", "Go heap (free, not returned to the OS)")) << b->dump(1);
  EXPECT_TRUE(names(*b, "runtime", "Go runtime metadata")) << b->dump(1);
  const double heap = b->at("heap").get<double>(), heap_free = b->at("heap_free").get<double>();
  auto inuse = [](const json& m) { return m.at("heap_inuse").get<double>(); };
  auto free_kept = [](const json& m) { return m.at("heap_idle").get<double>() - m.at("heap_released").get<double>(); };
  EXPECT_TRUE(near(heap, inuse(before), 0.15) || near(heap, inuse(after), 0.15))
      << "heap " << heap << ", HeapInuse " << inuse(before) << " / " << inuse(after) << "\n" << b->dump(1);
  EXPECT_TRUE(near(heap_free, free_kept(before), 0.15, 4.0 * kMiB) ||
              near(heap_free, free_kept(after), 0.15, 4.0 * kMiB))
      << "heap_free " << heap_free << ", HeapIdle - HeapReleased " << free_kept(before) << " / " << free_kept(after)
      << "\n" << b->dump(1);
  const double runtime_sys = after.at("mspan_sys").get<double>() + after.at("mcache_sys").get<double>() +
                             after.at("gc_sys").get<double>() + after.at("buckhash_sys").get<double>() +
                             after.at("other_sys").get<double>();
  EXPECT_LE(b->at("runtime").get<double>(), runtime_sys) << b->dump(1);
  std::printf("[ info ] go%s: heap %.1f MiB (HeapInuse %.1f), heap_free %.1f MiB (HeapIdle-HeapReleased %.1f), "
              "runtime %.1f MiB (of %.1f MiB sys), stacks %.1f MiB (StackInuse %.1f), native %.1f MiB, "
              "rss %.1f MiB\n",
              v.c_str(), heap / kMiB, inuse(after) / kMiB, heap_free / kMiB, free_kept(after) / kMiB,
              b->at("runtime").get<double>() / kMiB, runtime_sys / kMiB, b->at("stacks").get<double>() / kMiB,
              after.at("stack_inuse").get<double>() / kMiB, b->at("native").get<double>() / kMiB,
              snap.at("process_memory").at("rss_bytes").get<double>() / kMiB);
}

INSTANTIATE_TEST_SUITE_P(AllGo, GoMemAccountingLive, ::testing::ValuesIn(oomsnap_test::go_versions()),
                         [](const auto& i) {
                           std::string s = std::string("go") + i.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

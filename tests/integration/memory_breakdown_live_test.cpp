// process_memory.breakdown of live processes with a known truth, as
// `oomsnap snapshot` reports it (the capture process reads smaps and the
// runtime, the record crosses the wire and holds to the schema): a touched
// anonymous mmap is native, a touched tmpfs file is shmem and named, parked
// goroutines' grown stacks are stacks; the kinds sum to VmRSS.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "breakdown_checks.h"
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
    if (largest_is_stacks) EXPECT_EQ(largest, "stacks") << b->dump(1);
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

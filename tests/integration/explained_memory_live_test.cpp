// The record's explained charge (container.explained) on the agent's
// collection path, in a real memory cgroup whose truth the test knows: one
// process wrote a tmpfs file and closed it (shmem no process maps), another
// wrote and read back a file on disk (page cache no process maps), and the
// victim, a Go program, holds its heap. The record must name the tmpfs and
// the page cache within 15 % of what was written and explain at least 90 %
// of the usage; the victim's capture names the tmpfs file by its path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/incident/collect.h"
#include "agent/incident/explained_memory.h"
#include "capture/capture_sandbox.h"
#include "core/proc_info.h"
#include "test_cgroup.h"
#include "test_process.h"

using namespace oomsnap;
using namespace oomsnap_test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kTmpfsMiB = 100, kPageCacheMiB = 160;
const std::string kFixture = std::string(OOMSNAP_FIXTURES) + "/go/1.26/default/heapfixture";

CaptureFn sandboxed() {
  auto box = std::make_shared<CaptureSandbox>(SandboxOptions{.helper_path = OOMSNAP_BINARY, .max_budget = 5000ms});
  return [box](pid_t pid, const CaptureOptions& o, std::string& error) { return box->capture(pid, o, error); };
}

// A Python process that runs `body`, says ready and sleeps.
std::vector<std::string> python(const std::string& body) {
  return {"/usr/bin/python3", "-c", "import os, time\n" + body + "print('ready', flush=True)\ntime.sleep(120)\n"};
}

}  // namespace

TEST(ExplainedMemoryLive, TmpfsAndPageCacheAreNamedAndTheUsageExplained) {
  TestMemcg box("explained", 1024 * kMiB);
  TestMemcg child(box, "app");  // a container's processes may sit in child cgroups
  const std::string shm = "/dev/shm/oomsnap-test-explained-" + std::to_string(getpid());
  const std::string disk = std::string(testing::TempDir()) + "/oomsnap-test-explained-" + std::to_string(getpid());
  RemoveAtExit unlink_shm{shm}, unlink_disk{disk};

  // Written through write(2) and closed: charged to the writer's memcg,
  // mapped by nobody.
  Process tmpfs_writer(python("with open('" + shm + "', 'wb') as f:\n"
                              "    for _ in range(" + std::to_string(kTmpfsMiB) + "): f.write(b't' * (1 << 20))\n"),
                       {}, box.dir());
  Process cache_filler(python("with open('" + disk + "', 'wb') as f:\n"
                              "    for _ in range(" + std::to_string(kPageCacheMiB) + "): f.write(b'c' * (1 << 20))\n"
                              "    f.flush(); os.fsync(f.fileno())\n"
                              "with open('" + disk + "', 'rb') as f:\n"
                              "    while f.read(1 << 20): pass\n"),
                       {}, child.dir());
  Process go({kFixture, "-leak-mb-per-s", "400", "-leak-limit-mb", "120"}, {}, child.dir());
  ASSERT_EQ(tmpfs_writer.read_line(60s), "ready");
  ASSERT_EQ(cache_filler.read_line(60s), "ready");
  ASSERT_NE(go.read_line(20s).find("\"ready\":true"), std::string::npos);
  // The fixture says ready before it leaks (400 MiB/s, 0.3 s when idle, much
  // longer on a loaded machine): wait until its anon RSS holds the 120 MiB
  // and stops growing, or the memory.stat read at collection predates part
  // of the heap its capture then counts.
  uint64_t last_anon = 0;
  for (auto until = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < until;) {
    const uint64_t anon = read_process_memory(go.pid()).rss_anon_bytes.value_or(0);
    if (anon >= 120 * kMiB && anon == last_anon) break;
    last_anon = anon;
    std::this_thread::sleep_for(200ms);
  }

  // memory.stat folds in its per-CPU counters in batches and at least every
  // 2 s (memory_stat_live_test.cpp): wait until it shows what was written.
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    const MemoryStat s = read_memory_stat(box.fs(), box.rel_path());
    if (s.error.empty() && s.bytes.count("shmem") && s.bytes.at("shmem") >= kTmpfsMiB * kMiB &&
        s.bytes.at("file") >= (kTmpfsMiB + kPageCacheMiB) * kMiB)
      break;
    std::this_thread::sleep_for(200ms);
  }

  Incident inc;
  inc.container.cgroup_path = box.rel_path();
  inc.container.stats = read_memcg(box.fs(), box.rel_path());
  CaptureOptions options;
  options.budget = 5000ms;
  collect_incident(inc, box.fs(), options, sandboxed());
  ASSERT_TRUE(inc.victim) << inc.reason;
  EXPECT_EQ(inc.victim->pid, go.pid());
  ASSERT_EQ(inc.outcome, CollectionOutcome::kCollected) << inc.reason;

  const auto e = explain_incident(inc);
  ASSERT_TRUE(e);
  const std::string json = to_json(*e).dump(2) + "\nmemory.stat " + to_json(*inc.container.memory_stat).dump();
  ASSERT_TRUE(e->usage_bytes) << json;
  const double usage = static_cast<double>(*e->usage_bytes);
  EXPECT_NEAR(static_cast<double>(e->at(ChargeKind::kTmpfs)), kTmpfsMiB * kMiB, 0.15 * kTmpfsMiB * kMiB) << json;
  EXPECT_NEAR(static_cast<double>(e->at(ChargeKind::kPageCache)), kPageCacheMiB * kMiB, 0.15 * kPageCacheMiB * kMiB)
      << json;
  EXPECT_GE(static_cast<double>(e->explained_bytes), 0.9 * usage) << json;
  // The victim by its breakdown (the Go heap), the two writers by their RSS.
  EXPECT_EQ(e->processes_by_breakdown, 1u) << json;
  EXPECT_EQ(e->processes_by_rss, 2u) << json;
  EXPECT_GE(e->at(ChargeKind::kHeap) + e->at(ChargeKind::kHeapFree) + e->at(ChargeKind::kNative), 100 * kMiB) << json;
  // The tmpfs by file: the victim sees the same /dev/shm, and its capture
  // names the file that was written, by path, with its bytes.
  ASSERT_TRUE(e->tmpfs_files) << json;
  const auto& largest = e->tmpfs_files->largest;
  const auto named = std::find_if(largest.begin(), largest.end(), [&](const TmpfsFiles::File& f) { return f.path == shm; });
  ASSERT_NE(named, largest.end()) << json;
  EXPECT_EQ(named->bytes, kTmpfsMiB * kMiB) << json;
  EXPECT_GE(e->tmpfs_files->bytes, kTmpfsMiB * kMiB) << json;
  std::printf("usage %.1f MiB, explained %.1f%%: tmpfs %.1f MiB (wrote %llu), page cache %.1f MiB (wrote %llu), "
              "kernel %.1f MiB, unexplained %.1f MiB\n",
              usage / kMiB, 100.0 * static_cast<double>(e->explained_bytes) / usage,
              static_cast<double>(e->at(ChargeKind::kTmpfs)) / kMiB, static_cast<unsigned long long>(kTmpfsMiB),
              static_cast<double>(e->at(ChargeKind::kPageCache)) / kMiB, static_cast<unsigned long long>(kPageCacheMiB),
              static_cast<double>(e->at(ChargeKind::kKernel)) / kMiB, static_cast<double>(e->unexplained_bytes) / kMiB);
}

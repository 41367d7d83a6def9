// memory.stat of a real memory cgroup, read as the agent reads it, against
// what a process in it is known to hold: anonymous memory and a file in a
// tmpfs (shmem, which the kernel charges to the writer's cgroup and counts
// in the page cache), in a child cgroup, as a container's processes often sit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "agent/cgroup/memory_stat.h"
#include "test_cgroup.h"
#include "test_process.h"

using namespace oomsnap;
using namespace oomsnap_test;
using namespace std::chrono_literals;

namespace {
constexpr uint64_t kMiB = 1 << 20;
}  // namespace

TEST(MemoryStatLive, AnonAndTmpfsAreChargedWhereTheKernelCountsThem) {
  TestMemcg box("memstat", 512 * kMiB);
  TestMemcg child(box, "proc");
  const std::string shm = "/dev/shm/oomsnap-test-memstat-" + std::to_string(getpid());
  RemoveAtExit unlink_after{shm};
  // 96 MiB of anonymous memory, touched; 48 MiB written to a tmpfs file and closed.
  Process p({"/usr/bin/python3", "-c",
             "import time\nb = bytearray(96 << 20)\n"
             "with open('" + shm + "', 'wb') as f:\n    f.write(b'x' * (48 << 20))\n"
             "print('ready', flush=True)\ntime.sleep(120)\n"},
            {}, child.dir());
  ASSERT_EQ(p.read_line(30s), "ready");

  // memory.stat lags the charge: the kernel folds its per-CPU counters in
  // when they pass a batch or every 2 s (mm/memcontrol.c, rstat flushing),
  // while memory.usage_in_bytes is exact. Read until the flush has come.
  MemoryStat s;
  for (auto until = std::chrono::steady_clock::now() + 5s;;) {
    s = read_memory_stat(box.fs(), box.rel_path());
    ASSERT_TRUE(s.error.empty()) << s.error;
    if ((s.bytes.at("anon") >= 96 * kMiB && s.bytes.at("shmem") >= 48 * kMiB) ||
        std::chrono::steady_clock::now() > until)
      break;
    std::this_thread::sleep_for(100ms);
  }
  const auto json = to_json(s).dump(2);
  // The subtree's pages (the process sits in a child cgroup).
  EXPECT_GE(s.bytes.at("anon"), 96 * kMiB) << json;
  EXPECT_LT(s.bytes.at("anon"), 160 * kMiB) << json;
  EXPECT_GE(s.bytes.at("shmem"), 48 * kMiB) << json;
  EXPECT_LT(s.bytes.at("shmem"), 56 * kMiB) << json;
  EXPECT_GE(s.bytes.at("file"), s.bytes.at("shmem")) << json;  // the page cache holds the tmpfs pages
  ASSERT_TRUE(s.bytes.count("kernel")) << json;
  // The kinds account for the charge: usage is anon + page cache + kernel.
  const uint64_t usage = read_memcg(box.fs(), box.rel_path()).usage_bytes.value_or(0);
  const uint64_t sum = s.bytes.at("anon") + s.bytes.at("file") + s.bytes.at("kernel");
  EXPECT_NEAR(static_cast<double>(sum), static_cast<double>(usage), 0.05 * static_cast<double>(usage)) << json;

  // Gone: the reason, not a crash or zeros.
  MemoryStat gone = read_memory_stat(box.fs(), box.rel_path() + "/no-such-cgroup");
  EXPECT_FALSE(gone.error.empty());
  EXPECT_TRUE(gone.bytes.empty());
}

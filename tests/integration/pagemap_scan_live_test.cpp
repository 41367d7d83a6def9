// The breakdown's two ways of counting each mapping's resident bytes on live
// processes: /proc/PID/maps with the PAGEMAP_SCAN ioctl (Linux 6.7+) and
// /proc/PID/smaps, read back to back, agree within 1 % per kind (a Go
// program with grown goroutine stacks, a CPython with a touched anonymous
// mmap, a tmpfs mapping and thread stacks, a process with 10,000 mappings);
// smaps is taken when the ioctl is refused; the capture reads the heap
// before the breakdown.
#include <gtest/gtest.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "base/seccomp_filter.h"
#include "capture/capture.h"
#include "core/pagemap_scan.h"
#include "core/proc_info.h"
#include "go_matrix.h"
#include "test_process.h"

using namespace std::chrono_literals;
using namespace oomsnap;
using oomsnap_test::Process;
using oomsnap_test::RemoveAtExit;

namespace {

constexpr double kMiB = 1 << 20;

MemoryBreakdown breakdown_by(pid_t pid, BreakdownSource source, std::string& used) {
  SmapsLimits limits;
  limits.deadline = std::chrono::steady_clock::now() + 5s;
  const ProcessMemory status = read_process_memory(pid);
  const SmapsRead read = read_resident_by_mapping(ProcFiles(pid), limits, status, source);
  used = read.source;
  EXPECT_EQ(read.error, "");
  EXPECT_FALSE(read.cut) << read.reason;
  return build_breakdown(read, {}, status);
}

// Both ways on the same idle process, back to back: every kind within 1 %
// (and a page: a kind of a few pages moves by one when a timer thread wakes).
void expect_scan_agrees_with_smaps(pid_t pid, const char* what) {
  std::string scan_source, smaps_source;
  const MemoryBreakdown scan = breakdown_by(pid, BreakdownSource::kAuto, scan_source);
  const MemoryBreakdown smaps = breakdown_by(pid, BreakdownSource::kSmaps, smaps_source);
  EXPECT_EQ(scan_source, "pagemap_scan") << what << ": this kernel (6.7+) has PAGEMAP_SCAN; " << scan.reason;
  EXPECT_EQ(smaps_source, "smaps");
  EXPECT_EQ(scan.mappings, smaps.mappings) << what;
  for (size_t k = 0; k < kMemoryKinds; ++k) {
    const auto kind = static_cast<MemoryKind>(k);
    const double a = static_cast<double>(scan.at(kind)), b = static_cast<double>(smaps.at(kind));
    EXPECT_NEAR(a, b, std::max(0.01 * b, 4096.0)) << what << ": " << memory_kind_name(kind);
    if (a || b)
      std::printf("[ info ] %s %-6s scan %.3f MiB, smaps %.3f MiB (%+.3f %%)\n", what, memory_kind_name(kind),
                  a / kMiB, b / kMiB, b ? 100 * (a - b) / b : 0.0);
  }
}

// Python defining anon(n): n private anonymous mappings of two pages, one
// touched (alternate protections, so that none merge), kept alive.
const std::string kAnonMappings =
    "import mmap\n"
    "def anon(n):\n"
    "  out = []\n"
    "  for i in range(n):\n"
    "    m = mmap.mmap(-1, 8192, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,\n"
    "                  prot=mmap.PROT_READ | mmap.PROT_WRITE | (mmap.PROT_EXEC if i % 2 else 0))\n"
    "    m[0] = 1\n"
    "    out.append(m)\n"
    "  return out\n";

// A python3 that runs `code`, then says it is ready and sleeps.
std::unique_ptr<Process> python_running(const std::string& code) {
  auto p = std::make_unique<Process>(std::vector<std::string>{
      "/usr/bin/python3", "-c", code + "print('ready', flush=True)\nimport time\ntime.sleep(120)\n"});
  EXPECT_EQ(p->read_line(60s), "ready");
  return p;
}

}  // namespace

TEST(PagemapScanLive, AgreesWithSmapsOnPythonWithAnonTmpfsAndThreadStacks) {
  const std::string shm = "/dev/shm/oomsnap-test-scan-" + std::to_string(getpid());
  RemoveAtExit unlink_after{shm};
  auto p = python_running(
      "import mmap, os, threading\n"
      "a = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
      "for i in range(0, len(a), 4096): a[i] = 1\n"
      "fd = os.open('" + shm + "', os.O_RDWR | os.O_CREAT, 0o600)\n"
      "os.ftruncate(fd, 32 << 20)\n"
      "s = mmap.mmap(fd, 32 << 20, flags=mmap.MAP_SHARED)\n"
      "for i in range(0, len(s), 4096): s[i] = 1\n"
      "ev = threading.Event()\n"
      "ts = [threading.Thread(target=ev.wait) for _ in range(8)]\n"
      "for t in ts: t.start()\n");
  expect_scan_agrees_with_smaps(p->pid(), "python");
}

// Goroutine stacks grown to 1 MiB (the fixture's -deep-park), GC off.
TEST(PagemapScanLive, AgreesWithSmapsOnGoWithGrownGoroutineStacks) {
  const std::string bin = oomsnap_test::go_fixture_path("1.26", "default");
  ASSERT_TRUE(std::filesystem::exists(bin)) << bin << " is missing: run tools/build-go-fixtures.sh";
  Process fx({bin, "-goroutines", "-park-chan", "0", "-spinners", "0", "-deep-park", "300"}, {"GOGC=off"});
  ASSERT_NE(fx.read_line(60s), "");
  expect_scan_agrees_with_smaps(fx.pid(), "go");
}

// 10,000 anonymous mappings of two pages, one touched (alternate
// protections, so that none merge).
TEST(PagemapScanLive, AgreesWithSmapsOnTenThousandMappings) {
  auto p = python_running(kAnonMappings + "ms = anon(10000)\n");
  std::string used;
  EXPECT_GT(breakdown_by(p->pid(), BreakdownSource::kAuto, used).mappings, 10000u);
  expect_scan_agrees_with_smaps(p->pid(), "10,000 mappings");
}

// The scan asks the kernel which pages are file pages only outside long
// runs of private anonymous mappings (pagemap_scan.cpp, kMinAnonRun): a
// private file mapping between two such runs, half its pages read (file
// pages) and half written (copied: anonymous), is still split as smaps
// splits it.
TEST(PagemapScanLive, AgreesWithSmapsOnAFileMappingBetweenRunsOfAnonymousOnes) {
  const std::string file = "/var/tmp/oomsnap-test-scan-file-" + std::to_string(getpid());
  RemoveAtExit remove_after{file};
  auto p = python_running(
      kAnonMappings +
      "import os\n"
      "before = anon(64)\n"
      "with open('" + file + "', 'wb') as f: f.write(b'x' * (16 << 20))\n"
      "fd = os.open('" + file + "', os.O_RDWR)\n"
      "f = mmap.mmap(fd, 16 << 20, flags=mmap.MAP_PRIVATE)\n"
      "total = 0\n"
      "for i in range(0, 8 << 20, 4096): total += f[i]\n"
      "for i in range(8 << 20, 16 << 20, 4096): f[i] = 2\n"
      "after = anon(64)\n");
  expect_scan_agrees_with_smaps(p->pid(), "file mapping between anonymous runs");
}

// The maps text read at the capture's start (Target::open) is what the
// breakdown uses while it holds: the same mappings and kinds as a fresh
// read. When the process mapped more since (here 16 MiB, touched), the scan
// finds resident pages in none of its mappings and maps is read again: the
// new memory is counted and the kinds sum to the RSS.
TEST(PagemapScanLive, MapsReadBeforeAreUsedWhileTheyHoldAndReadAgainWhenStale) {
  const std::string go = "/tmp/oomsnap-test-known-maps-" + std::to_string(getpid());
  RemoveAtExit remove_after{go};
  Process p({"/usr/bin/python3", "-c",
             "import mmap, os, time\n"
             "print('ready', flush=True)\n"
             "while not os.path.exists('" + go + "'): time.sleep(0.01)\n"
             "b = mmap.mmap(-1, 16 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
             "for i in range(0, len(b), 4096): b[i] = 1\n"
             "print('mapped', flush=True)\n"
             "time.sleep(120)\n"});
  ASSERT_EQ(p.read_line(60s), "ready");
  auto read_with = [&](const std::string& known) {
    SmapsLimits limits;
    limits.deadline = std::chrono::steady_clock::now() + 5s;
    const ProcessMemory status = read_process_memory(p.pid());
    const SmapsRead r = read_resident_by_mapping(ProcFiles(p.pid()), limits, status, read_tmpfs_devices(ProcFiles(p.pid()), limits.deadline),
                                                 BreakdownSource::kAuto, {}, known);
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.source, "pagemap_scan") << r.reason;
    EXPECT_FALSE(r.cut) << r.reason;
    return std::make_pair(r, build_breakdown(r, {}, status));
  };
  std::string known;
  ASSERT_TRUE(read_text_file("/proc/" + std::to_string(p.pid()) + "/maps", known));
  // Still current: the kept text's mappings, every resident page in them.
  const auto [held, held_b] = read_with(known);
  const auto [fresh, fresh_b] = read_with("");
  EXPECT_EQ(held.resident_outside_mappings, 0u);
  EXPECT_EQ(held.mappings.size(), fresh.mappings.size());
  for (size_t k = 0; k < kMemoryKinds; ++k)
    EXPECT_NEAR(static_cast<double>(held_b.at(static_cast<MemoryKind>(k))),
                static_cast<double>(fresh_b.at(static_cast<MemoryKind>(k))), 8 * 4096.0)
        << memory_kind_name(static_cast<MemoryKind>(k));
  // Stale: 16 MiB mapped and touched after the text was taken.
  { std::ofstream(go) << "go\n"; }
  ASSERT_EQ(p.read_line(60s), "mapped");
  const auto [after, after_b] = read_with(known);
  const ProcessMemory status = read_process_memory(p.pid());
  ASSERT_TRUE(status.rss_bytes);
  EXPECT_GE(after_b.at(MemoryKind::kNative), held_b.at(MemoryKind::kNative) + (15u << 20))
      << "the 16 MiB mapped after the maps text was read are not counted";
  EXPECT_NEAR(static_cast<double>(after_b.total()), static_cast<double>(*status.rss_bytes), 0.02 * *status.rss_bytes);
}

// In a child whose seccomp filter answers ioctl with EPERM (as a runtime's
// profile without it would): the read falls back to smaps and says why,
// with maps read before (as the capture has them) or not.
class PagemapScanRefused : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(MapsReadBefore, PagemapScanRefused, ::testing::Bool());
TEST_P(PagemapScanRefused, SmapsIsTaken) {
  auto p = python_running("x = bytearray(8 << 20)\n");
  std::string known;
  if (GetParam()) {
    ASSERT_TRUE(read_text_file("/proc/" + std::to_string(p->pid()) + "/maps", known));
  }
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out[0]);
    SeccompFilter filter(SCMP_ACT_ALLOW);
    filter.add(SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl));
    std::string why, line;
    if (!filter.load(why)) {
      line = "filter: " + why;
    } else {
      SmapsLimits limits;
      limits.deadline = std::chrono::steady_clock::now() + 5s;
      const SmapsRead r = read_resident_by_mapping(ProcFiles(p->pid()), limits, read_process_memory(p->pid()),
                                                   read_tmpfs_devices(ProcFiles(p->pid()), limits.deadline),
                                                   BreakdownSource::kAuto, {}, known);
      line = r.source + "|" + std::to_string(r.mappings.size()) + "|" + r.reason;
    }
    (void)!write(out[1], line.data(), line.size());
    _exit(0);
  }
  close(out[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(got.substr(0, 6), "smaps|") << got;
  EXPECT_NE(got.find("read from smaps: PAGEMAP_SCAN"), std::string::npos) << got;
  EXPECT_NE(got.find("Operation not permitted"), std::string::npos) << got;
  EXPECT_EQ(got.find("|0|"), std::string::npos) << "smaps read no mappings: " << got;
}

// The heap before the breakdown: the collector has returned when the
// breakdown's read begins (the Go fixture: its collector reads the heap).
TEST(PagemapScanLive, TheCaptureReadsTheHeapBeforeTheBreakdown) {
  const std::string bin = oomsnap_test::go_fixture_path("1.26", "default");
  ASSERT_TRUE(std::filesystem::exists(bin)) << bin << " is missing: run tools/build-go-fixtures.sh";
  Process fx({bin});
  ASSERT_NE(fx.read_line(60s), "");
  CaptureProgress progress;
  CaptureOptions o;
  o.budget = 5000ms;
  o.progress = &progress;
  std::string err;
  auto rec = capture_process(fx.pid(), o, err);
  ASSERT_TRUE(rec) << err;
  EXPECT_EQ(rec->result.snapshot.status, SnapshotStatus::kComplete) << rec->result.snapshot.reason;
  const int64_t collected = progress.collector_done_ns.load(), breakdown = progress.breakdown_started_ns.load();
  EXPECT_GT(collected, 0);
  EXPECT_GE(breakdown, collected);
  ASSERT_TRUE(rec->process_memory.breakdown);
  EXPECT_EQ(rec->process_memory.breakdown->source, "pagemap_scan") << rec->process_memory.breakdown->reason;
  EXPECT_EQ(rec->process_memory.breakdown->status, "complete") << rec->process_memory.breakdown->reason;
}

// The scan's bounds: a page budget and the deadline cut it, the mappings not
// walked are left out (build_breakdown counts them from /proc/PID/status).
TEST(PagemapScanLive, TheScanIsCutAtItsPageBudgetAndDeadline) {
  auto p = python_running(
      "import mmap\n"
      "a = mmap.mmap(-1, 32 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
      "for i in range(0, len(a), 4096): a[i] = 1\n");
  const ProcessMemory status = read_process_memory(p->pid());
  SmapsLimits limits;
  limits.deadline = std::chrono::steady_clock::now() + 5s;
  PagemapScanLimits few;
  few.pages_per_call = 64;
  few.max_pages = 256;
  const SmapsRead cut = read_resident_by_mapping(ProcFiles(p->pid()), limits, status, BreakdownSource::kAuto, few);
  EXPECT_EQ(cut.source, "pagemap_scan");
  EXPECT_TRUE(cut.cut);
  EXPECT_NE(cut.reason.find("pagemap scan cut at 256 resident pages"), std::string::npos) << cut.reason;
  uint64_t counted = 0;
  for (const SmapsMapping& m : cut.mappings) counted += m.rss;
  EXPECT_LE(counted, 256u * 4096);
  const MemoryBreakdown b = build_breakdown(cut, {}, status);
  EXPECT_EQ(b.status, "partial");
  EXPECT_NEAR(static_cast<double>(b.total()), static_cast<double>(*status.rss_bytes), 0.02 * *status.rss_bytes);

  SmapsRead late;
  late.source = "pagemap_scan";
  late.mappings = cut.mappings;
  for (SmapsMapping& m : late.mappings) m.rss = m.anonymous = 0;
  std::string why;
  ASSERT_TRUE(scan_pagemap(ProcFiles(p->pid()), late, PagemapScanLimits{}, std::chrono::steady_clock::now(), why)) << why;
  EXPECT_TRUE(late.cut);
  EXPECT_NE(late.reason.find("pagemap scan cut at its deadline (0 of "), std::string::npos) << late.reason;
  EXPECT_TRUE(late.mappings.empty());
}

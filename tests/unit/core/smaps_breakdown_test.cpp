// The smaps reader and classifier on smaps text as the 6.18 kernel writes it
// (fs/proc/task_mmu.c, show_smap), and on text that is not.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "base/unique_fd.h"
#include "core/pagemap_residency.h"
#include "core/smaps_breakdown.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kKiB = 1024;

// One mapping's smaps text; sizes in kB.
std::string mapping(uint64_t start, uint64_t end, const std::string& perms, const std::string& dev, uint64_t inode,
                    const std::string& name, uint64_t rss_kb, uint64_t anon_kb) {
  char head[160];
  std::snprintf(head, sizeof head, "%012llx-%012llx %s 00000000 %s %llu", static_cast<unsigned long long>(start),
                static_cast<unsigned long long>(end), perms.c_str(), dev.c_str(),
                static_cast<unsigned long long>(inode));
  std::string s = head;
  if (!name.empty()) s += std::string(name.size() < 20 ? 26 : 1, ' ') + name;
  s += "\n";
  s += "Size:           " + std::to_string((end - start) / 1024) + " kB\n";
  s += "KernelPageSize:        4 kB\nMMUPageSize:           4 kB\n";
  s += "Rss:            " + std::to_string(rss_kb) + " kB\n";
  s += "Pss:            " + std::to_string(rss_kb) + " kB\nPss_Dirty:             0 kB\n";
  s += "Shared_Clean:          0 kB\nShared_Dirty:          0 kB\nPrivate_Clean:         0 kB\n";
  s += "Private_Dirty:         0 kB\nReferenced:            0 kB\n";
  s += "Anonymous:      " + std::to_string(anon_kb) + " kB\n";
  s += "KSM:                   0 kB\nLazyFree:              0 kB\nAnonHugePages:         0 kB\n";
  s += "ShmemPmdMapped:        0 kB\nFilePmdMapped:         0 kB\nShared_Hugetlb:        0 kB\n";
  s += "Private_Hugetlb:       0 kB\nSwap:                  0 kB\nSwapPss:               0 kB\n";
  s += "Locked:                0 kB\nTHPeligible:           0\nVmFlags: rd wr mr mw me ac \n";
  return s;
}

// A /dev/shm tmpfs on 0:26 (hex 00:1a in smaps), the root on 254:0 (fe:00).
const std::string kMountinfo =
    "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "30 22 0:26 / /dev/shm rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=65536k\n"
    "31 22 0:27 / /proc rw,nosuid - proc proc rw\n";

ProcessMemory status_of(uint64_t anon, uint64_t file, uint64_t shmem) {
  ProcessMemory m;
  m.rss_anon_bytes = anon;
  m.rss_file_bytes = file;
  m.rss_shmem_bytes = shmem;
  m.rss_bytes = anon + file + shmem;
  m.status = "ok";
  return m;
}

uint64_t kind(const MemoryBreakdown& b, MemoryKind k) { return b.at(k); }

}  // namespace

TEST(SmapsBreakdown, ClassifiesEveryMappingAsTheKernelCountsIt) {
  const uint64_t base = 0x7f0000000000;
  std::string text;
  // A library: 100 kB of file pages and 8 kB copied on write (anonymous: native).
  text += mapping(0x400000, 0x480000, "r-xp", "fe:00", 1234, "/usr/lib/libc.so.6", 108, 8);
  text += mapping(0x500000, 0x600000, "rw-p", "00:00", 0, "[heap]", 512, 512);
  // A file on the /dev/shm tmpfs (by its device, whatever its path).
  text += mapping(base, base + 0x100000, "rw-s", "00:1a", 99, "/somewhere/cache.bin", 1024, 0);
  text += mapping(base + 0x100000, base + 0x200000, "rw-s", "00:01", 5, "/memfd:arrow (deleted)", 256, 0);
  // A thread stack: a 4 kB PROT_NONE guard right below it.
  text += mapping(base + 0x200000, base + 0x201000, "---p", "00:00", 0, "", 0, 0);
  text += mapping(base + 0x201000, base + 0xa01000, "rw-p", "00:00", 0, "", 64, 64);
  // A malloc arena's tail (PROT_NONE above, not below): native.
  text += mapping(base + 0xb00000, base + 0xc00000, "rw-p", "00:00", 0, "", 300, 300);
  text += mapping(base + 0xc00000, base + 0x1000000, "---p", "00:00", 0, "", 0, 0);
  text += mapping(0x7ffd00000000, 0x7ffd00021000, "rw-p", "00:00", 0, "[stack]", 132, 132);
  auto read = parse_smaps(text, SmapsLimits{}, parse_tmpfs_devices(kMountinfo));
  ASSERT_TRUE(read.error.empty()) << read.error;
  EXPECT_EQ(read.mappings.size(), 9u);
  EXPECT_EQ(read.thread_stacks, 1u);
  auto b = build_breakdown(read, {}, status_of(0, 0, 0));
  EXPECT_EQ(b.status, "complete") << b.reason;
  EXPECT_EQ(kind(b, MemoryKind::kFile), 100 * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kShmem), (1024 + 256) * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kStacks), (64 + 132) * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kNative), (8 + 512 + 300) * kKiB);
  EXPECT_EQ(b.total(), (108 + 512 + 1024 + 256 + 64 + 300 + 132) * kKiB);
  ASSERT_FALSE(b.detail.empty());
  EXPECT_EQ(b.detail[0].what, "/somewhere/cache.bin");
  EXPECT_EQ(b.detail[0].kind, MemoryKind::kShmem);
  bool thread_stacks = false;
  for (const auto& d : b.detail) thread_stacks |= d.what == "thread stacks (1)" && d.bytes == 64 * kKiB;
  EXPECT_TRUE(thread_stacks) << to_json(b).dump();
}

// HotSpot commits metaspace in 64 KiB granules inside a PROT_NONE reservation:
// an uncommitted granule below a committed one is not a thread stack's guard.
TEST(SmapsBreakdown, A64KiBGapBelowCommittedMemoryIsNoGuard) {
  std::string text = mapping(0x100000, 0x110000, "---p", "00:00", 0, "", 0, 0) +
                     mapping(0x110000, 0x120000, "rw-p", "00:00", 0, "", 64, 64);
  auto read = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
  EXPECT_EQ(read.thread_stacks, 0u);
  EXPECT_EQ(build_breakdown(read, {}, status_of(0, 0, 0)).at(MemoryKind::kNative), 64 * kKiB);
}

TEST(SmapsBreakdown, WithoutAMountTableOnlyDevShmPathsAreTmpfs) {
  std::string text = mapping(0x1000, 0x2000, "rw-s", "00:1a", 9, "/dev/shm/x", 4, 0) +
                     mapping(0x2000, 0x3000, "rw-s", "00:1b", 9, "/data/x", 4, 0);
  auto b = build_breakdown(parse_smaps(text, SmapsLimits{}, TmpfsDevices{}), {}, status_of(0, 0, 0));
  EXPECT_EQ(kind(b, MemoryKind::kShmem), 4 * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kFile), 4 * kKiB);
}

TEST(SmapsBreakdown, AClaimMovesNativeBytesOfItsMappingsAndNoMore) {
  std::string text = mapping(0xc000000000, 0xc004000000, "rw-p", "00:00", 0, "", 8192, 8192) +
                     mapping(0xc004000000, 0xc008000000, "rw-p", "00:00", 0, "[anon:other]", 1024, 1024) +
                     mapping(0xd000000000, 0xd000100000, "r--p", "fe:00", 7, "/bin/x", 1024, 0);
  auto read = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
  ASSERT_TRUE(read.error.empty()) << read.error;
  MemoryClaim stacks{MemoryKind::kStacks, "goroutine stacks (3 goroutines)", {}};
  stacks.ranges = {{0xc000100000, 0xc000200000},   // 1 MiB
                   {0xc000000000, 0xc000010000},   // 64 kB, out of order
                   {0xc003ff0000, 0xc004010000},   // 64 kB in the first mapping, 64 kB in the second
                   {0xd000000000, 0xd000100000},   // a file: never native, not taken
                   {0x10, 0x20}};                  // nowhere
  MemoryClaim heap{MemoryKind::kHeap, "Java heap", {{0xc004000000, 0xc008000000}}};  // 64 MiB of range, 1 MiB resident
  auto b = build_breakdown(read, {stacks, heap}, status_of(0, 0, 0));
  EXPECT_EQ(kind(b, MemoryKind::kStacks), (1024 + 64 + 64 + 64) * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kHeap), (1024 - 64) * kKiB);  // clamped to what is resident and not claimed yet
  EXPECT_EQ(kind(b, MemoryKind::kNative), (8192 - 1024 - 128) * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kFile), 1024 * kKiB);
  EXPECT_EQ(b.total(), (8192 + 1024 + 1024) * kKiB);  // still every resident byte, once
  bool named = false;
  for (const auto& d : b.detail) named |= d.what == "goroutine stacks (3 goroutines)";
  EXPECT_TRUE(named) << to_json(b).dump();
  EXPECT_NE(b.reason.find("by address span"), std::string::npos) << b.reason;  // no residency was given

  // With what is resident: a quarter of each range, as pagemap would say.
  auto quarter = [](uint64_t start, uint64_t end) -> std::optional<uint64_t> { return (end - start) / 4; };
  auto r = build_breakdown(read, {stacks}, status_of(0, 0, 0), quarter);
  // Merged: [0xc000000000,+64k) and [+1M,+2M) and [0xc003ff0000,0xc004010000) cut at the mapping edge.
  EXPECT_EQ(kind(r, MemoryKind::kStacks), (16 + 256 + 16 + 16) * kKiB);
  EXPECT_EQ(r.total(), (8192 + 1024 + 1024) * kKiB);
  EXPECT_EQ(r.reason, "");

  // The same range claimed over and over (a crafted runtime structure) counts once.
  MemoryClaim twice{MemoryKind::kStacks, "twice", {}};
  for (int i = 0; i < 1000; ++i) twice.ranges.push_back({0xc000000000, 0xc000100000});
  EXPECT_EQ(kind(build_breakdown(read, {twice}, status_of(0, 0, 0)), MemoryKind::kStacks), 1024 * kKiB);
}

// A runtime that counts a part it cannot place (live objects in its heap's
// spans) claims it with max_bytes; a later claim of the same ranges takes the
// rest, and a count with no ranges comes out of the unnamed anonymous memory.
TEST(SmapsBreakdown, ClaimsWithACountTakeNoMoreThanItInOrder) {
  std::string text = mapping(0xc000000000, 0xc004000000, "rw-p", "00:00", 0, "", 8192, 8192) +
                     mapping(0xc004000000, 0xc004100000, "rw-p", "00:00", 0, "[anon:named]", 512, 512) +
                     mapping(0xe000000000, 0xe000100000, "rw-p", "00:00", 0, "", 1024, 1024);
  auto read = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
  auto with_brk = parse_smaps(mapping(0x500000, 0x600000, "rw-p", "00:00", 0, "[heap]", 256, 256) + text,
                              SmapsLimits{}, TmpfsDevices{});
  ASSERT_TRUE(read.error.empty()) << read.error;
  MemoryClaim live{MemoryKind::kHeap, "Go heap (in use)", {{0xc000000000, 0xc004000000}}, 3000 * kKiB};
  MemoryClaim free_heap{MemoryKind::kHeapFree, "Go heap (free)", {{0xc000000000, 0xc004000000}}};
  MemoryClaim runtime{MemoryKind::kRuntime, "Go runtime metadata", {}, 9000 * kKiB};  // more than there is
  auto b = build_breakdown(read, {live, free_heap, runtime}, status_of(0, 0, 0));
  EXPECT_EQ(kind(b, MemoryKind::kHeap), 3000 * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kHeapFree), (8192 - 3000) * kKiB);
  // What was left unnamed (the third mapping); the named mapping is not taken.
  EXPECT_EQ(kind(b, MemoryKind::kRuntime), 1024 * kKiB);
  EXPECT_EQ(kind(b, MemoryKind::kNative), 512 * kKiB);
  EXPECT_EQ(b.total(), (8192 + 512 + 1024) * kKiB);
  // malloc's brk heap is the unnamed memory's too (CPython's large objects).
  MemoryClaim large{MemoryKind::kHeap, "objects outside arenas (malloc)", {}, 20000 * kKiB};
  EXPECT_EQ(kind(build_breakdown(with_brk, {large}, status_of(0, 0, 0)), MemoryKind::kHeap), (256 + 8192 + 1024) * kKiB);
  // Without max_bytes a range-less claim takes nothing.
  MemoryClaim nothing{MemoryKind::kRuntime, "nothing", {}};
  EXPECT_EQ(kind(build_breakdown(read, {nothing}, status_of(0, 0, 0)), MemoryKind::kRuntime), 0u);
}

TEST(SmapsBreakdown, PagemapSaysWhatOfARangeIsResident) {
  const size_t page = 4096;
  void* p = mmap(nullptr, 16 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<char*>(p);
  for (size_t i : {0, 3, 4, 9, 15}) bytes[i * page] = 1;
  const auto start = reinterpret_cast<uint64_t>(p), end = start + 16 * page;
  const auto forever = std::chrono::steady_clock::time_point::max();
  PagemapResidency pm(ProcFiles(getpid()), PagemapResidency::kDefaultMaxPages, forever);
  EXPECT_EQ(pm.resident_anon(start, end), 5 * page) << pm.why();
  EXPECT_EQ(pm.resident_anon(start + page, start + 3 * page), 0u);
  // The page budget and the deadline stop it.
  PagemapResidency small(ProcFiles(getpid()), 20, forever);
  EXPECT_EQ(small.resident_anon(start, end), 5 * page);
  EXPECT_EQ(small.resident_anon(start + page, end), std::nullopt);
  EXPECT_NE(small.why().find("budget"), std::string::npos);
  // A range asked again is answered from the first read: it spends no
  // budget (the claims of one breakdown walk the same arenas in turn).
  EXPECT_EQ(small.resident_anon(start, end), 5 * page);
  PagemapResidency exact(ProcFiles(getpid()), 16, forever);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(exact.resident_anon(start, end), 5 * page) << i << ": " << exact.why();
  PagemapResidency late(ProcFiles(getpid()), 100, std::chrono::steady_clock::now());
  EXPECT_EQ(late.resident_anon(start, end), std::nullopt);
  PagemapResidency none(ProcFiles(0x7ffffff0), 100, forever);  // no such process
  EXPECT_EQ(none.resident_anon(start, end), std::nullopt);
  munmap(p, 16 * page);
}

TEST(SmapsBreakdown, HundredThousandMappingsAreCutWithAReasonAndStillSumToRss) {
  std::string text;
  const size_t n = 100'001;
  text.reserve(n * 800);
  for (size_t i = 0; i < n; ++i)
    text += mapping(0x10000000 + i * 0x2000, 0x10000000 + i * 0x2000 + 0x1000, "rw-p", "00:00", 0, "", 4, 4);
  SmapsLimits limits;
  auto t0 = std::chrono::steady_clock::now();
  auto read = parse_smaps(text, limits, TmpfsDevices{});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(read.error.empty()) << read.error;
  EXPECT_TRUE(read.cut);
  EXPECT_EQ(read.mappings.size(), limits.max_mappings);
  EXPECT_NE(read.reason.find("cut at 16384 mappings"), std::string::npos) << read.reason;
  auto b = build_breakdown(read, {}, status_of(n * 4 * kKiB, 0, 0));
  EXPECT_EQ(b.status, "partial");
  EXPECT_NE(b.reason.find("counted from /proc/PID/status"), std::string::npos) << b.reason;
  EXPECT_EQ(b.total(), n * 4 * kKiB);
  EXPECT_LE(b.detail.size(), MemoryBreakdown::kMaxDetail);
  // Informational: the parse alone, without the kernel's time to write it.
  std::printf("parsed %zu of %zu mappings in %.1f ms\n", read.mappings.size(), n, ms);
}

TEST(SmapsBreakdown, ADeadlineCutsTheParse) {
  std::string text;
  for (size_t i = 0; i < 2000; ++i)
    text += mapping(0x10000000 + i * 0x2000, 0x10000000 + i * 0x2000 + 0x1000, "rw-p", "00:00", 0, "", 4, 4);
  SmapsLimits limits;
  limits.deadline = std::chrono::steady_clock::now();
  auto read = parse_smaps(text, limits, TmpfsDevices{});
  EXPECT_TRUE(read.cut);
  EXPECT_EQ(read.mappings.size(), 255u);
  EXPECT_NE(read.reason.find("deadline"), std::string::npos) << read.reason;
}

TEST(SmapsBreakdown, GarbledTextIsRefusedWhole) {
  const std::string good = mapping(0x1000, 0x3000, "rw-p", "00:00", 0, "", 8, 8);
  const std::pair<const char*, std::string> cases[] = {
      {"a field before any mapping", "Rss: 4 kB\n" + good},
      {"a header that is not one", good + "zzzz-1000 rw-p 0 00:00 0\nRss: 0 kB\n"},
      {"a range that ends before it starts", good + "5000-4000 rw-p 00000000 00:00 0\nRss: 0 kB\n"},
      {"mappings out of order", good + mapping(0x2000, 0x4000, "rw-p", "00:00", 0, "", 0, 0)},
      {"Rss larger than the mapping", mapping(0x1000, 0x2000, "rw-p", "00:00", 0, "", 8, 0)},
      {"Anonymous larger than Rss", mapping(0x1000, 0x3000, "rw-p", "00:00", 0, "", 4, 8)},
      // Found by fuzz_memory_accounting: a second Rss below the Anonymous
      // checked against the first made rss - anonymous wrap.
      {"a second Rss under the Anonymous", mapping(0x1000, 0x3000, "rw-p", "00:00", 0, "", 8, 8) + "Rss: 0 kB\n"},
      {"a number that overflows", good + "5000-6000 rw-p 00000000 00:00 0\nRss: 99999999999999999999 kB\n"},
      {"Rss not in kB", good + "5000-6000 rw-p 00000000 00:00 0\nRss: 4 MB\n"},
      {"a key that is not a word", good + "Rs s: 4 kB\n"},
      {"a mapping without Rss", good + "5000-6000 rw-p 00000000 00:00 0\nSize: 4 kB\n"},
      {"a 17-digit address", good + "10000000000000000-10000000000001000 rw-p 00000000 00:00 0\nRss: 0 kB\n"},
      {"a device that is not one", good + "5000-6000 rw-p 00000000 0000 0\nRss: 0 kB\n"},
  };
  for (const auto& [what, text] : cases) {
    auto read = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
    EXPECT_FALSE(read.error.empty()) << what;
    EXPECT_TRUE(read.mappings.empty()) << what;
    auto b = build_breakdown(read, {}, status_of(8 * kKiB, 0, 0));
    EXPECT_EQ(b.status, "failed") << what;
    EXPECT_EQ(b.total(), 0u) << what;
    EXPECT_NE(b.reason.find("smaps line"), std::string::npos) << what << ": " << b.reason;
    EXPECT_LT(b.reason.size(), 200u) << what;
  }
  // The good text alone is read.
  EXPECT_TRUE(parse_smaps(good, SmapsLimits{}, TmpfsDevices{}).error.empty());
}

TEST(SmapsBreakdown, NamesAndTheDetailListAreBounded) {
  std::string text;
  const std::string long_name = "/" + std::string(5000, 'a');
  for (size_t i = 0; i < 100; ++i)
    text += mapping(0x100000 + i * 0x2000, 0x101000 + i * 0x2000, "r--p", "fe:00", 10 + i,
                    i == 0 ? long_name : "/lib/f" + std::to_string(i), 4, 0);
  auto read = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
  ASSERT_TRUE(read.error.empty()) << read.error;
  EXPECT_EQ(read.names[1].size(), SmapsLimits{}.max_name + 3);
  auto b = build_breakdown(read, {}, status_of(0, 400 * kKiB, 0));
  EXPECT_EQ(b.detail.size(), MemoryBreakdown::kMaxDetail);
  for (const auto& d : b.detail) EXPECT_LE(d.what.size(), MemoryBreakdown::kMaxDetailWhat);
}

// Only the largest unnamed anonymous mappings are named (by address range),
// largest first and, among equals, lowest address first; the rest still
// count in native.
TEST(SmapsBreakdown, TheLargestUnnamedAnonymousMappingsAreNamedByRange) {
  std::string text;
  uint64_t total_kb = 0;
  // 40 mappings of 16 pages: the i-th holds (i % 8 + 1) * 4 kB resident, so
  // the eight of 32 kB are the largest, then the five of 28 kB lowest first.
  for (uint64_t i = 0; i < 40; ++i) {
    const uint64_t kb = (i % 8 + 1) * 4;
    total_kb += kb;
    text += mapping(0x100000 + i * 0x20000, 0x110000 + i * 0x20000, "rw-p", "00:00", 0, "", kb, kb);
  }
  auto read = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
  ASSERT_TRUE(read.error.empty()) << read.error;
  auto b = build_breakdown(read, {}, status_of(total_kb * kKiB, 0, 0));
  EXPECT_EQ(kind(b, MemoryKind::kNative), total_kb * kKiB);
  ASSERT_EQ(b.detail.size(), MemoryBreakdown::kMaxDetail);
  auto range = [](uint64_t i) {
    char s[80];
    std::snprintf(s, sizeof s, "anonymous mapping 0x%llx-0x%llx", static_cast<unsigned long long>(0x100000 + i * 0x20000),
                  static_cast<unsigned long long>(0x110000 + i * 0x20000));
    return std::string(s);
  };
  const uint64_t expect[] = {7, 15, 23, 31, 39, 6, 14, 22, 30, 38, 5, 13};
  for (size_t k = 0; k < MemoryBreakdown::kMaxDetail; ++k) {
    EXPECT_EQ(b.detail[k].what, range(expect[k])) << k;
    EXPECT_EQ(b.detail[k].bytes, (expect[k] % 8 + 1) * 4 * kKiB) << k;
    EXPECT_EQ(b.detail[k].kind, MemoryKind::kNative) << k;
  }
}

TEST(SmapsBreakdown, MountTableIsBounded) {
  std::string text;
  for (size_t i = 0; i < kMaxMountEntries + 5; ++i)
    text += std::to_string(i) + " 1 0:" + std::to_string(i) + " / /m" + std::to_string(i) + " rw - tmpfs t rw\n";
  text += "garbage line\n";
  auto t = parse_tmpfs_devices(text);
  EXPECT_EQ(t.devices.size(), kMaxMountEntries);
  EXPECT_NE(t.reason.find("cut"), std::string::npos);
  EXPECT_TRUE(t.contains({0, 3}));
  EXPECT_FALSE(parse_tmpfs_devices(kMountinfo).contains({254, 0}));
}

TEST(SmapsBreakdown, JsonRoundTripsAndRefusesWhatItNeverWrites) {
  const std::string text = mapping(0x1000, 0x3000, "rw-s", "00:1a", 3, "/dev/shm/a", 8, 0) +
                           mapping(0x3000, 0x5000, "rw-p", "00:00", 0, "", 8, 8);
  auto b = build_breakdown(parse_smaps(text, SmapsLimits{}, parse_tmpfs_devices(kMountinfo)), {},
                           status_of(0, 0, 0));
  auto j = to_json(b);
  MemoryBreakdown back;
  std::string why;
  ASSERT_TRUE(memory_breakdown_from_json(j, back, why)) << why;
  EXPECT_EQ(back.bytes, b.bytes);
  ASSERT_EQ(back.detail.size(), b.detail.size());
  EXPECT_EQ(back.detail[0].what, b.detail[0].what);
  EXPECT_EQ(back.source, "smaps");

  auto bad_source = j;
  bad_source["source"] = "guess";
  EXPECT_FALSE(memory_breakdown_from_json(bad_source, back, why));
  EXPECT_NE(why.find("unknown source"), std::string::npos) << why;
  auto bad_kind = j;
  bad_kind["detail"][0]["kind"] = "swap";
  EXPECT_FALSE(memory_breakdown_from_json(bad_kind, back, why));
  auto too_many = j;
  for (int i = 0; i < 20; ++i) too_many["detail"].push_back(j["detail"][0]);
  EXPECT_FALSE(memory_breakdown_from_json(too_many, back, why));
  auto long_what = j;
  long_what["detail"][0]["what"] = std::string(MemoryBreakdown::kMaxDetailWhat + 1, 'x');
  EXPECT_FALSE(memory_breakdown_from_json(long_what, back, why));
  auto negative = j;
  negative["native"] = -1;
  EXPECT_FALSE(memory_breakdown_from_json(negative, back, why));
}

TEST(SmapsBreakdown, ReadsItsOwnSmapsAndCutsAtTheByteBoundOnAMappingEdge) {
  auto whole = read_smaps(ProcFiles(getpid()), SmapsLimits{});
  ASSERT_TRUE(whole.error.empty()) << whole.error;
  EXPECT_FALSE(whole.cut);
  ASSERT_GT(whole.mappings.size(), 4u);
  SmapsLimits small;
  small.max_bytes = 3000;  // two or three mappings' text
  auto cut = read_smaps(ProcFiles(getpid()), small);
  ASSERT_TRUE(cut.error.empty()) << cut.error;
  EXPECT_TRUE(cut.cut);
  EXPECT_GE(cut.mappings.size(), 1u);
  EXPECT_LT(cut.mappings.size(), whole.mappings.size());
  EXPECT_NE(cut.reason.find("of text"), std::string::npos) << cut.reason;
}

namespace {

// smaps text in a file, as read_smaps_fd reads /proc/PID/smaps.
int file_of(const std::string& text) {
  int fd = memfd_create("smaps", MFD_CLOEXEC);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) return -1;
  lseek(fd, 0, SEEK_SET);
  return fd;
}

}  // namespace

TEST(SmapsBreakdown, ReadInChunksAsParsedWhole) {
  std::string text;
  for (size_t i = 0; i < 500; ++i)  // ~400 KiB: many 64 KiB chunks, lines split across them
    text += mapping(0x10000000 + i * 0x2000, 0x10000000 + i * 0x2000 + 0x1000, "r--p", "fe:00", 5 + i,
                    "/lib/a-long-enough-name-" + std::to_string(i), 4, i % 2 ? 4 : 0);
  UniqueFd fd(file_of(text));
  ASSERT_GE(fd.get(), 0);
  auto chunked = read_smaps_fd(fd.get(), SmapsLimits{}, TmpfsDevices{});
  auto whole = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
  ASSERT_TRUE(chunked.error.empty()) << chunked.error;
  EXPECT_FALSE(chunked.cut);
  EXPECT_EQ(chunked.mappings.size(), 500u);
  EXPECT_EQ(build_breakdown(chunked, {}, status_of(0, 0, 0)).bytes, build_breakdown(whole, {}, status_of(0, 0, 0)).bytes);
  EXPECT_EQ(chunked.names, whole.names);

  // The byte bound cuts in the middle of a mapping: that one is left out.
  SmapsLimits bound;
  bound.max_bytes = text.size() / 2;
  UniqueFd fd2(file_of(text));
  auto cut = read_smaps_fd(fd2.get(), bound, TmpfsDevices{});
  ASSERT_TRUE(cut.error.empty()) << cut.error;
  EXPECT_TRUE(cut.cut);
  const size_t per_mapping = text.size() / 500;
  EXPECT_NEAR(static_cast<double>(cut.mappings.size()), 250.0, 2.0);
  EXPECT_LE(cut.mappings.size() * per_mapping, bound.max_bytes + per_mapping);
  EXPECT_NE(cut.reason.find("of text"), std::string::npos) << cut.reason;
}

TEST(SmapsBreakdown, ALineLongerThanTheBufferIsRefused) {
  const std::string text = mapping(0x1000, 0x3000, "r--p", "fe:00", 7, "/" + std::string(kSmapsChunk + 10, 'x'), 8, 0);
  UniqueFd fd(file_of(text));
  ASSERT_GE(fd.get(), 0);
  auto r = read_smaps_fd(fd.get(), SmapsLimits{}, TmpfsDevices{});
  EXPECT_NE(r.error.find("longer than"), std::string::npos) << r.error;
  EXPECT_TRUE(r.mappings.empty());
}

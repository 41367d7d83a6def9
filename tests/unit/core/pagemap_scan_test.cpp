// The page-scan breakdown's pure parts: /proc/PID/maps text read into
// mappings (as the 6.18 kernel writes it, show_map), PAGEMAP_SCAN regions
// (struct page_region images) joined to them, and the check against
// /proc/PID/status.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <vector>

#include "base/unique_fd.h"
#include "core/pagemap_scan.h"
#include "core/smaps_breakdown.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kPage = 4096;

SmapsRead maps_of(const std::string& text, const TmpfsDevices& tmpfs = {}, const SmapsLimits& limits = {}) {
  UniqueFd fd(memfd_create("maps", MFD_CLOEXEC));
  EXPECT_GE(fd.get(), 0);
  EXPECT_EQ(write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  lseek(fd.get(), 0, SEEK_SET);
  return read_maps_fd(fd.get(), limits, tmpfs);
}

// A process's maps: the executable, a heap, a thread stack above its guard,
// a tmpfs file, the main stack, the vDSO's data and code, vsyscall.
const char* const kMaps =
    "55d000000000-55d000002000 r-xp 00000000 fd:01 1234                       /usr/bin/app\n"
    "55d000100000-55d000200000 rw-p 00000000 00:00 0                          [heap]\n"
    "7f0000000000-7f0000001000 ---p 00000000 00:00 0 \n"
    "7f0000001000-7f0000801000 rw-p 00000000 00:00 0 \n"
    "7f0000900000-7f0000a00000 rw-s 00000000 00:1a 77                         /dev/shm/cache.bin\n"
    "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]\n"
    "7ffc00100000-7ffc00104000 r--p 00000000 00:00 0                          [vvar]\n"
    "7ffc00104000-7ffc00106000 r-xp 00000000 00:00 0                          [vdso]\n"
    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";

// kMaps's mappings with the regions of one scan call added.
SmapsRead scanned(const std::vector<PageRegion>& regions, uint64_t from, uint64_t walk_end) {
  SmapsRead r = maps_of(kMaps);
  size_t cursor = 0;
  std::string why;
  EXPECT_TRUE(add_page_regions(r, cursor, regions.data(), regions.size(), from, walk_end, why)) << why;
  return r;
}

uint64_t anon_of(const SmapsRead& r, size_t i) { return r.mappings.at(i).anonymous; }
uint64_t rest_of(const SmapsRead& r, size_t i) { return r.mappings.at(i).rss - r.mappings.at(i).anonymous; }

}  // namespace

TEST(MapsRead, HeadersAsSmapsWithNoResidentBytes) {
  TmpfsDevices tmpfs;
  tmpfs.devices = {{0, 0x1a}};
  SmapsRead r = maps_of(kMaps, tmpfs);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.mappings.size(), 9u);
  for (const SmapsMapping& m : r.mappings) EXPECT_EQ(m.rss, 0u);
  EXPECT_EQ(r.mappings[3].anon_kind, MemoryKind::kStacks);  // above its guard
  EXPECT_EQ(r.thread_stacks, 1u);
  EXPECT_EQ(r.mappings[4].rest_kind, MemoryKind::kShmem);
  EXPECT_EQ(r.mappings[5].anon_kind, MemoryKind::kStacks);
  EXPECT_TRUE(r.mappings[6].not_rss);
  EXPECT_FALSE(r.mappings[7].not_rss);
  EXPECT_TRUE(r.mappings[8].vsyscall);
  EXPECT_EQ(r.names[r.mappings[4].name], "/dev/shm/cache.bin");
  // Private memory of no file: the scan need not ask which pages are file
  // pages. Not a file, shared memory or the kernel's special mappings.
  std::vector<bool> anon_only;
  for (const SmapsMapping& m : r.mappings) anon_only.push_back(m.anon_only);
  EXPECT_EQ(anon_only, (std::vector<bool>{false, true, true, true, false, true, false, false, false}));
}

TEST(MapsRead, AFieldLineIsNotMaps) {
  SmapsRead r = maps_of(std::string(kMaps) + "Rss:                 4 kB\n");
  EXPECT_NE(r.error.find("maps line 10 is a field, not a mapping"), std::string::npos) << r.error;
  EXPECT_TRUE(r.mappings.empty());
}

TEST(MapsRead, CutAtItsMappingBound) {
  SmapsLimits limits;
  limits.max_mappings = 4;
  SmapsRead r = maps_of(kMaps, {}, limits);
  EXPECT_TRUE(r.cut);
  EXPECT_EQ(r.mappings.size(), 4u);
  EXPECT_EQ(r.reason, "maps cut at 4 mappings");
}

// The maps text Target::open keeps, parsed later: as the file read.
TEST(MapsRead, AKeptTextParsesAsTheFileReads) {
  TmpfsDevices tmpfs;
  tmpfs.devices = {{0, 0x1a}};
  const SmapsRead file = maps_of(kMaps, tmpfs), kept = parse_maps(kMaps, {}, tmpfs);
  ASSERT_EQ(kept.error, "");
  ASSERT_EQ(kept.mappings.size(), file.mappings.size());
  for (size_t i = 0; i < kept.mappings.size(); ++i) {
    const SmapsMapping &a = kept.mappings[i], &b = file.mappings[i];
    EXPECT_EQ(std::tie(a.start, a.end, a.anon_kind, a.rest_kind, a.not_rss, a.vsyscall),
              std::tie(b.start, b.end, b.anon_kind, b.rest_kind, b.not_rss, b.vsyscall))
        << i;
    EXPECT_EQ(kept.names[a.name], file.names[b.name]) << i;
  }
  EXPECT_EQ(kept.thread_stacks, 1u);
}

// Resident pages the maps do not hold (a mapping made after they were
// read): counted apart, so that a kept maps text is known stale.
TEST(PageRegions, ResidentPagesInNoMappingAreCountedApart) {
  const PageRegion vdso{0x7ffc00104000, 0x7ffc00106000, kPageIsPresent | kPageIsFile};
  const SmapsRead r = scanned({{0x55d0001ff000, 0x55d000203000, kPageIsPresent},  // the heap's last page and 3 past it
                               {0x7f0000801000, 0x7f0000811000, kPageIsPresent},  // 16 pages between two mappings
                               vdso},
                              0, kUserSpaceEnd);
  EXPECT_EQ(r.resident_outside_mappings, 19 * kPage);
  EXPECT_EQ(anon_of(r, 1), kPage);
  EXPECT_EQ(rest_of(r, 7), 2 * kPage);
  EXPECT_EQ(scanned({vdso}, 0, kUserSpaceEnd).resident_outside_mappings, 0u);
}

TEST(PageRegions, PresentPagesByCategoryIntoTheirMappings) {
  const SmapsRead r = scanned({
      {0x55d000000000, 0x55d000002000, kPageIsPresent | kPageIsFile},  // the executable's text
      {0x55d000100000, 0x55d000180000, kPageIsPresent},                 // half the heap
      {0x55d000180000, 0x55d000181000, kPageIsPresent | kPageIsPfnZero},  // the zero page: no RSS
      // One region over the guard's end and the stack: the kernel merges
      // equal neighbours across mappings.
      {0x7f0000000000, 0x7f0000003000, kPageIsPresent},
      {0x7f0000900000, 0x7f0000910000, kPageIsPresent | kPageIsFile},
      {0x7ffc00020000, 0x7ffc00021000, kPageIsPresent},
      {0x7ffc00100000, 0x7ffc00101000, kPageIsPresent},                // [vvar]: mapped by pfn
      {0x7ffc00104000, 0x7ffc00106000, kPageIsPresent | kPageIsFile},  // [vdso]
  }, 0x55d000000000, 0x7ffc00106000);
  EXPECT_EQ(rest_of(r, 0), 2 * kPage);
  EXPECT_EQ(anon_of(r, 0), 0u);
  EXPECT_EQ(anon_of(r, 1), 0x80000u);
  EXPECT_EQ(anon_of(r, 2), kPage);
  EXPECT_EQ(anon_of(r, 3), 2 * kPage);
  EXPECT_EQ(rest_of(r, 4), 16 * kPage);
  EXPECT_EQ(anon_of(r, 5), kPage);
  EXPECT_EQ(r.mappings[6].rss, 0u);
  EXPECT_EQ(rest_of(r, 7), 2 * kPage);
  // What build_breakdown makes of it.
  MemoryBreakdown b = build_breakdown(r, {}, ProcessMemory{});
  EXPECT_EQ(b.at(MemoryKind::kStacks), 3 * kPage);
  EXPECT_EQ(b.at(MemoryKind::kNative), 0x80000u + kPage);
  EXPECT_EQ(b.at(MemoryKind::kShmem), 16 * kPage);
  EXPECT_EQ(b.at(MemoryKind::kFile), 4 * kPage);
}

// A call that stopped early returns the region it was building, reaching
// past walk_end: the next call, from walk_end, returns those pages again.
TEST(PageRegions, PagesFromTheWalkEndOnCountInTheNextCall) {
  SmapsRead r = maps_of(kMaps);
  size_t cursor = 0;
  std::string why;
  const PageRegion first[] = {{0x55d000100000, 0x55d000140000, kPageIsPresent},
                              {0x55d000140000, 0x55d000141000, kPageIsPresent | kPageIsFile}};
  const PageRegion second[] = {{0x55d000120000, 0x55d000141000, kPageIsPresent}};
  ASSERT_TRUE(add_page_regions(r, cursor, first, 2, 0x55d000000000, 0x55d000120000, why)) << why;
  ASSERT_TRUE(add_page_regions(r, cursor, second, 1, 0x55d000120000, 0x7ffc00106000, why)) << why;
  EXPECT_EQ(anon_of(r, 1), 0x41000u);
  EXPECT_EQ(rest_of(r, 1), 0u);
}

TEST(PageRegions, CallsContinueWhereTheLastOneStopped) {
  SmapsRead r = maps_of(kMaps);
  size_t cursor = 0;
  std::string why;
  const PageRegion first[] = {{0x55d000100000, 0x55d000140000, kPageIsPresent}};
  const PageRegion second[] = {{0x55d000140000, 0x55d000200000, kPageIsPresent}};
  ASSERT_TRUE(add_page_regions(r, cursor, first, 1, 0x55d000000000, 0x55d000140000, why)) << why;
  ASSERT_TRUE(add_page_regions(r, cursor, second, 1, 0x55d000140000, 0x7ffc00106000, why)) << why;
  EXPECT_EQ(anon_of(r, 1), 0x100000u);
}

// Each guard: regions that are not the kernel's are refused, not counted.
TEST(PageRegions, RegionsNotTheKernelsAreRefused) {
  const std::vector<std::pair<const char*, PageRegion>> bad = {
      {"unaligned", {0x55d000100001, 0x55d000102000, kPageIsPresent}},
      {"empty", {0x55d000102000, 0x55d000102000, kPageIsPresent}},
      {"before the call's start", {0x55c000000000, 0x55c000001000, kPageIsPresent}},
  };
  for (const auto& [what, region] : bad) {
    SmapsRead r = maps_of(kMaps);
    size_t cursor = 0;
    std::string why;
    EXPECT_FALSE(add_page_regions(r, cursor, &region, 1, 0x55d000000000, 0x7ffc00106000, why)) << what;
    EXPECT_NE(why.find("out of order or before"), std::string::npos) << what << ": " << why;
  }
  SmapsRead r = maps_of(kMaps);
  size_t cursor = 0;
  std::string why;
  const PageRegion backwards[] = {{0x55d000110000, 0x55d000120000, kPageIsPresent},
                                  {0x55d000100000, 0x55d000101000, kPageIsPresent}};
  EXPECT_FALSE(add_page_regions(r, cursor, backwards, 2, 0x55d000000000, 0x7ffc00106000, why));
  EXPECT_NE(why.find("region 1 "), std::string::npos) << why;
}

TEST(PageRegions, AScanCountingMoreThanStatusIsNotUsed) {
  SmapsRead r = maps_of(kMaps);
  r.mappings[1].rss = r.mappings[1].anonymous = 64u << 20;  // 64 MiB scanned
  ProcessMemory status;
  status.rss_bytes = 60u << 20;  // within 1/16 + growth
  std::string why;
  EXPECT_TRUE(scan_agrees_with_status(r, status, why)) << why;
  status.rss_bytes = 32u << 20;  // hugetlb pages, say: status leaves them out
  EXPECT_FALSE(scan_agrees_with_status(r, status, why));
  EXPECT_NE(why.find("PAGEMAP_SCAN counted 65536 kB resident, /proc/PID/status 32768 kB"), std::string::npos) << why;
  status.rss_bytes.reset();  // nothing to hold it against
  EXPECT_TRUE(scan_agrees_with_status(r, status, why));
}

TEST(PageRegions, TheIoctlRequestIsTheKernels) {
  // _IOWR('f', 16, struct pm_scan_arg) as include/uapi/linux/fs.h (6.7) has it.
  EXPECT_EQ(kPagemapScanIoctl, 0xC0606610ul);
}

// Each mapping's resident bytes without smaps: /proc/PID/maps (no page walk)
// joined with the PAGEMAP_SCAN ioctl on /proc/PID/pagemap (Linux 6.7+), which
// returns the present pages as regions of equal categories in one call. The
// kernel spends ~2 µs per mapping writing smaps (20 ms for 10,000 mappings);
// the scan does the same page walk without the text.
//
// A present page is anonymous unless the scan says PAGE_IS_FILE (page cache
// and shmem pages), as smaps's `Anonymous` counts it; the category is not
// asked in long runs of private mappings of no file, where every page is
// anonymous (it costs the kernel a look at each page's struct page); the zero page
// (PAGE_IS_PFNZERO) and the vDSO data pages are in no RSS and left out. What
// is left out of smaps's and status's count besides (hugetlb pages, a
// driver's pfn mappings) the scan would count: a scan that counts more than
// /proc/PID/status says is resident is not used (scan_agrees_with_status).
//
// Where the ioctl is refused (an older kernel: ENOTTY or EINVAL; a seccomp
// filter without it) or fails, read_resident_by_mapping reads smaps instead
// and says why; SmapsRead::source says which way was taken.
#pragma once
#include <sys/types.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/proc_info.h"
#include "core/smaps_breakdown.h"

namespace oomsnap {

// The kernel's uapi (include/uapi/linux/fs.h, 6.7), not in older headers.
struct PageRegion {
  uint64_t start = 0, end = 0, categories = 0;
};
inline constexpr uint64_t kPageIsFile = 1u << 2;
inline constexpr uint64_t kPageIsPresent = 1u << 3;
inline constexpr uint64_t kPageIsPfnZero = 1u << 5;
// PAGEMAP_SCAN: _IOWR('f', 16, struct pm_scan_arg), 96 bytes. The capture
// process's seccomp filter allows ioctl with this request only.
inline constexpr unsigned long kPagemapScanIoctl = 0xC0606610ul;

// Adds regions (as one scan call returned them, scanned from `from` up to
// `walk_end`) to read's mappings, from mapping `cursor` on (advanced past the
// mappings the regions have passed); a region's pages from walk_end on are
// left for the next call. False, with why, for regions that are not the
// kernel's: unaligned, empty, out of order or before `from`.
bool add_page_regions(SmapsRead& read, size_t& cursor, const PageRegion* regions, size_t n, uint64_t from,
                      uint64_t walk_end, std::string& why);

// False, with why, when the scan counted more resident bytes than
// /proc/PID/status (read right before it) by more than a target's growth in
// between can explain: 1/16 of VmRSS and at least 4 MiB.
bool scan_agrees_with_status(const SmapsRead& read, const ProcessMemory& status, std::string& why);

struct PagemapScanLimits {
  size_t regions_per_call = 4096;          // 96 KiB of regions
  uint64_t pages_per_call = 1u << 18;      // 1 GiB: the deadline is checked between calls
  uint64_t max_pages = uint64_t{1} << 24;  // 64 GiB resident in all
  size_t max_calls = 65536;
  // Ask PAGE_IS_FILE of every page, long runs of private anonymous
  // mappings too (as before it was left out there): the benchmark's
  // baseline (tests/bench/breakdown_bench.cpp), never the capture's.
  bool file_everywhere = false;
};

enum class BreakdownSource { kAuto, kSmaps };

// The mappings with their resident bytes: maps and PAGEMAP_SCAN (kAuto),
// else smaps (kSmaps, or the ioctl refused or failed: reason says why).
// Bounded as read_smaps is: limits' mappings and deadline, and the scan's
// pages; a cut read has cut and reason set as read_smaps's.
// `tmpfs`: the process's tmpfs devices (tmpfs_devices_of its mount table);
// without it, the mount table is read here.
// `known_maps`: a /proc/PID/maps text read earlier in the capture
// (Target::maps_text). Used when the scan finds every resident page inside
// its mappings, else maps is read again: the kernel's second walk of every
// mapping to write the text was half the breakdown's cost, and more in a
// fresh capture process with the target's structures out of cache.
SmapsRead read_resident_by_mapping(const ProcFiles& proc, const SmapsLimits& limits, const ProcessMemory& status,
                                   const TmpfsDevices& tmpfs, BreakdownSource source = BreakdownSource::kAuto,
                                   const PagemapScanLimits& scan_limits = {}, std::string_view known_maps = {});
SmapsRead read_resident_by_mapping(const ProcFiles& proc, const SmapsLimits& limits, const ProcessMemory& status,
                                   BreakdownSource source = BreakdownSource::kAuto,
                                   const PagemapScanLimits& scan_limits = {});

// The scan alone: false, with why (errno's text), when the ioctl is refused
// or fails or its regions are not the kernel's; `read` holds maps' mappings.
// kMappings walks from the first mapping to the last; kUserSpace walks the
// whole user address space, so that resident pages outside the mappings
// (read.resident_outside_mappings) show a maps text gone stale.
enum class ScanRange { kMappings, kUserSpace };
// x86-64's user address space with 4-level page tables (TASK_SIZE_MAX);
// a mapping above it (5-level, asked for by address) extends the walk.
inline constexpr uint64_t kUserSpaceEnd = (uint64_t{1} << 47) - 4096;
bool scan_pagemap(const ProcFiles& proc, SmapsRead& read, const PagemapScanLimits& limits,
                  std::chrono::steady_clock::time_point deadline, std::string& why,
                  ScanRange range = ScanRange::kMappings);

}  // namespace oomsnap

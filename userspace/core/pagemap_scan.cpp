#include "core/pagemap_scan.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "base/text.h"
#include "base/unique_fd.h"

namespace oomsnap {
namespace {

constexpr uint64_t kPage = 4096;

// struct pm_scan_arg (include/uapi/linux/fs.h, 6.7).
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
      category_anyof_mask, return_mask;
};
static_assert(sizeof(PmScanArg) == 96 && sizeof(PageRegion) == 24, "the kernel's layout");
static_assert(kPagemapScanIoctl == ((3ul << 30) | (sizeof(PmScanArg) << 16) | ('f' << 8) | 16),
              "_IOWR('f', 16, struct pm_scan_arg)");

std::string kib(uint64_t bytes) { return std::to_string(bytes / 1024) + " kB"; }

// Where the scan may leave out PAGE_IS_FILE: the kernel answers it by
// looking at each present page's struct page (a cache miss each; about 30 %
// of a scan of 10,000 small anonymous mappings), and in a private mapping of
// no file every page is anonymous. Each part of the walk is one call or
// more, so only runs of at least kMinAnonRun such mappings get calls of
// their own: a process whose mappings alternate costs no more calls than
// before.
constexpr size_t kMinAnonRun = 16;

struct ScanPart {
  uint64_t start;  // the part ends where the next one starts
  bool anon_only;
};

std::vector<ScanPart> scan_parts(const SmapsRead& read, uint64_t begin) {
  std::vector<ScanPart> parts{{begin, false}};
  const auto& maps = read.mappings;
  for (size_t i = 0; i < maps.size();) {
    size_t j = i;
    while (j < maps.size() && maps[j].anon_only) ++j;
    if (j - i >= kMinAnonRun) {
      if (maps[i].start <= parts.back().start) parts.back().anon_only = true;
      else parts.push_back({maps[i].start, true});
      if (j < maps.size()) parts.push_back({maps[j].start, false});
    }
    i = j == i ? i + 1 : j;
  }
  return parts;
}

}  // namespace

bool add_page_regions(SmapsRead& read, size_t& cursor, const PageRegion* regions, size_t n, uint64_t from,
                      uint64_t walk_end, std::string& why) {
  uint64_t prev_end = from;
  for (size_t i = 0; i < n; ++i) {
    const PageRegion& g = regions[i];
    if (g.start % kPage || g.end % kPage || g.start >= g.end || g.start < prev_end) {
      why = "PAGEMAP_SCAN returned region " + std::to_string(i) + " " + hex(g.start) + "-" + hex(g.end) +
            " out of order or before " + hex(from);
      return false;
    }
    prev_end = g.end;
    // The kernel may return a region reaching past walk_end (6.18: when it
    // stops early, the region it was building); the next call walks from
    // walk_end and returns those pages again, so they count only then.
    if (g.start >= walk_end) continue;
    const PageRegion clipped{g.start, std::min(g.end, walk_end), g.categories};
    if (!(g.categories & kPageIsPresent) || (g.categories & kPageIsPfnZero)) continue;
    const bool anon = !(g.categories & kPageIsFile);
    auto& maps = read.mappings;
    while (cursor < maps.size() && maps[cursor].end <= clipped.start) ++cursor;
    // A region may span mappings (the kernel merges equal neighbours).
    uint64_t in_mappings = 0;
    for (size_t j = cursor; j < maps.size() && maps[j].start < clipped.end; ++j) {
      SmapsMapping& m = maps[j];
      const uint64_t bytes = std::min(clipped.end, m.end) - std::max(clipped.start, m.start);
      in_mappings += bytes;
      if (m.not_rss) continue;
      m.rss += bytes;
      if (anon) m.anonymous += bytes;
    }
    read.resident_outside_mappings += (clipped.end - clipped.start) - in_mappings;
  }
  return true;
}

bool scan_agrees_with_status(const SmapsRead& read, const ProcessMemory& status, std::string& why) {
  if (!status.rss_bytes) return true;  // nothing to hold it against
  uint64_t scanned = 0;
  for (const SmapsMapping& m : read.mappings) scanned += m.rss;
  const uint64_t rss = *status.rss_bytes;
  const uint64_t slack = std::max<uint64_t>(rss / 16, 4u << 20);
  if (scanned <= rss + slack) return true;
  why = "PAGEMAP_SCAN counted " + kib(scanned) + " resident, /proc/PID/status " + kib(rss) +
        " (hugetlb or device pages the RSS leaves out?)";
  return false;
}

bool scan_pagemap(const ProcFiles& proc, SmapsRead& read, const PagemapScanLimits& limits,
                  std::chrono::steady_clock::time_point deadline, std::string& why, ScanRange range) {
  // The address range to walk: every mapping but [vsyscall], which lies
  // above the user address space (the ioctl refuses it with EFAULT); or the
  // whole user address space, to find what was mapped since the maps read.
  uint64_t begin = 0, end = 0;
  size_t scanned_mappings = 0;
  for (const SmapsMapping& m : read.mappings) {
    if (m.vsyscall) continue;
    if (!end) begin = m.start;
    end = m.end;
    ++scanned_mappings;
  }
  if (range == ScanRange::kUserSpace) {
    begin = 0;
    end = std::max(end, kUserSpaceEnd);
  }
  if (!end) return true;  // nothing mapped
  const int fd = proc.fd(ProcFile::kPagemap);
  if (fd < 0) {
    why = "cannot open " + proc.path(ProcFile::kPagemap) + ": " + errno_text(errno);
    return false;
  }
  std::vector<PageRegion> regions(std::max<size_t>(limits.regions_per_call, 1));
  const std::vector<ScanPart> parts =
      limits.file_everywhere ? std::vector<ScanPart>{{begin, false}} : scan_parts(read, begin);
  size_t part = 0;
  size_t cursor = 0, calls = 0;
  uint64_t pages = 0;
  std::string cut_why;
  for (uint64_t at = begin; at < end;) {
    if (calls == limits.max_calls) cut_why = "after " + std::to_string(calls) + " calls";
    else if (pages >= limits.max_pages) cut_why = "at " + std::to_string(limits.max_pages) + " resident pages";
    else if (std::chrono::steady_clock::now() >= deadline) cut_why = "at its deadline";
    if (!cut_why.empty()) {
      // Mappings the walk did not finish are left out, as a cut smaps's
      // are; build_breakdown counts them from /proc/PID/status.
      while (!read.mappings.empty() && read.mappings.back().end > at) read.mappings.pop_back();
      read.cut = true;
      const std::string reason = "pagemap scan cut " + cut_why + " (" + std::to_string(read.mappings.size()) +
                                 " of " + std::to_string(scanned_mappings) + " mappings)";
      read.reason = read.reason.empty() ? reason : read.reason + "; " + reason;
      return true;
    }
    while (part + 1 < parts.size() && parts[part + 1].start <= at) ++part;
    const uint64_t part_end = part + 1 < parts.size() ? std::min(end, parts[part + 1].start) : end;
    PmScanArg arg{};
    arg.size = sizeof arg;
    arg.start = at;
    arg.end = part_end;
    arg.vec = reinterpret_cast<uintptr_t>(regions.data());
    arg.vec_len = regions.size();
    arg.max_pages = std::min(limits.pages_per_call, limits.max_pages - pages);
    arg.category_mask = kPageIsPresent;  // only present pages
    arg.return_mask = kPageIsPresent | kPageIsPfnZero | (parts[part].anon_only ? 0 : kPageIsFile);
    const int n = ::ioctl(fd, kPagemapScanIoctl, &arg);
    if (n < 0 && errno == EINTR) continue;
    ++calls;
    if (n < 0) {
      why = "PAGEMAP_SCAN " + hex(at) + "-" + hex(end) + ": " + errno_text(errno);
      return false;
    }
    // walk_end must move on (or end the walk), within what was asked.
    if (static_cast<size_t>(n) > regions.size() || arg.walk_end <= at || arg.walk_end > part_end) {
      why = "PAGEMAP_SCAN returned " + std::to_string(n) + " regions, walk end " + hex(arg.walk_end) +
            " for " + hex(at) + "-" + hex(part_end);
      return false;
    }
    if (!add_page_regions(read, cursor, regions.data(), static_cast<size_t>(n), at, arg.walk_end, why)) return false;
    for (int i = 0; i < n; ++i)
      if (regions[i].start < arg.walk_end) pages += (std::min(regions[i].end, arg.walk_end) - regions[i].start) / kPage;
    at = arg.walk_end;
  }
  return true;
}

SmapsRead read_resident_by_mapping(const ProcFiles& proc, const SmapsLimits& limits, const ProcessMemory& status,
                                   BreakdownSource source, const PagemapScanLimits& scan_limits) {
  return read_resident_by_mapping(proc, limits, status, read_tmpfs_devices(proc, limits.deadline), source,
                                  scan_limits);
}

SmapsRead read_resident_by_mapping(const ProcFiles& proc, const SmapsLimits& limits, const ProcessMemory& status,
                                   const TmpfsDevices& tmpfs, BreakdownSource source,
                                   const PagemapScanLimits& scan_limits, std::string_view known_maps) {
  auto with_tmpfs_reason = [&](SmapsRead r) {
    if (!tmpfs.reason.empty()) r.reason = r.reason.empty() ? tmpfs.reason : r.reason + "; " + tmpfs.reason;
    return r;
  };
  if (source == BreakdownSource::kSmaps) return read_smaps(proc, limits, tmpfs);
  // The fallback: smaps, with what refused the scan.
  auto from_smaps = [&](const std::string& why) {
    SmapsRead r = read_smaps(proc, limits, tmpfs);
    const std::string note = "read from smaps: " + why;
    r.reason = r.reason.empty() ? note : r.reason + "; " + note;
    return r;
  };
  std::string why;
  if (!known_maps.empty()) {
    // The maps read earlier (at Target::open), if they still hold: every
    // resident page the scan of the whole address space finds lies in one
    // of them. A process that mapped more since (a thread, a grown heap)
    // is read again below. What this cannot see, a mapping replaced by
    // another over the same range, is counted in the old one's name.
    SmapsRead r = parse_maps(known_maps, limits, tmpfs);
    r.source = "pagemap_scan";
    if (r.error.empty() && !r.cut) {
      // Refused (an older kernel, a filter) or counting what RSS does
      // not: so would a second try be.
      if (!scan_pagemap(proc, r, scan_limits, limits.deadline, why, ScanRange::kUserSpace)) return from_smaps(why);
      if (r.cut) return with_tmpfs_reason(std::move(r));  // no time left to read the maps again
      if (!r.resident_outside_mappings) {
        if (!scan_agrees_with_status(r, status, why)) return from_smaps(why);
        return with_tmpfs_reason(std::move(r));
      }
    }
  }
  const int fd = proc.fd_at_start(ProcFile::kMaps);
  if (fd < 0) {
    why = "cannot read " + proc.path(ProcFile::kMaps) + ": " + errno_text(errno);
  } else {
    SmapsRead r = read_maps_fd(fd, limits, tmpfs);
    r.source = "pagemap_scan";
    if (!r.error.empty()) return with_tmpfs_reason(std::move(r));  // smaps would hold the same lines
    if (scan_pagemap(proc, r, scan_limits, limits.deadline, why) && (r.cut || scan_agrees_with_status(r, status, why)))
      return with_tmpfs_reason(std::move(r));
  }
  return from_smaps(why);
}

}  // namespace oomsnap

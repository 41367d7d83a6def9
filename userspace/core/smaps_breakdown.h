// /proc/PID/smaps read into resident bytes per mapping and kind, and the
// process's RSS by kind built from them (memory_breakdown.h).
//
// Per mapping: its anonymous pages (smaps "Anonymous") are `stacks` for the
// main thread's [stack] and for a thread stack (an anonymous rw mapping right
// above a small PROT_NONE guard, as glibc and the JVM lay them out), else
// `native` until a runtime claims them; the rest of its Rss is `shmem` for a
// file on a tmpfs (its device is a tmpfs mount's in /proc/PID/mountinfo) or on
// the kernel's internal shm mount (memfd, SysV, shared anonymous), else `file`.
// That is the split the kernel's RssAnon / RssShmem / RssFile counters make.
//
// smaps comes from the kernel, but its names from the target (file names,
// prctl anon names): everything is bounded (mappings, bytes, a deadline, name
// length), and a line that is not smaps refuses the whole read.
#pragma once
#include <sys/types.h>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/huge_page_allocator.h"
#include "core/memory_breakdown.h"
#include "core/proc_info.h"

namespace oomsnap {

struct SmapsLimits {
  // ~730 bytes of smaps per mapping: 16 MiB holds ~22,000 mappings; the
  // kernel takes ~2 ms per 1,000 mappings to write them.
  size_t max_mappings = 16384;
  size_t max_bytes = 16u << 20;
  size_t max_name = 256;  // a longer name is cut (with "...")
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// Device numbers (major, minor) whose files are shmem: tmpfs and devtmpfs
// mounts of the process's mount namespace.
using DeviceNumber = std::pair<uint32_t, uint32_t>;
struct TmpfsDevices {
  std::vector<DeviceNumber> devices;  // sorted
  std::string reason;                 // set when the mount table was cut or unreadable
  bool contains(DeviceNumber d) const;
};
inline constexpr size_t kMaxMountEntries = 10000;
inline constexpr size_t kMaxMountinfoBytes = 2u << 20;
TmpfsDevices parse_tmpfs_devices(std::string_view mountinfo_text);

// The tmpfs mounts of a mount table, for naming their files (tmpfs_files.h).
struct TmpfsMount {
  std::string point;  // as the process sees it, unescaped
  DeviceNumber dev{};
};
struct TmpfsMountTable {
  std::vector<TmpfsMount> tmpfs;         // one per device (a bind mount of one is not walked again)
  std::vector<std::string> all_points;  // every mount point of any type, sorted
  std::string reason;                    // set when the table was cut
};
// The tmpfs mounts and every mount point of a /proc/PID/mountinfo text (at
// most kMaxMountEntries entries; octal escapes such as \040 undone).
TmpfsMountTable parse_tmpfs_mounts(std::string_view mountinfo_text);

struct SmapsMapping {
  uint64_t start = 0, end = 0;
  uint64_t rss = 0, anonymous = 0;  // bytes
  MemoryKind anon_kind = MemoryKind::kNative;  // of `anonymous`
  MemoryKind rest_kind = MemoryKind::kFile;    // of rss - anonymous
  uint32_t name = 0;                           // index into SmapsRead::names; 0: none
  // The kernel's [vvar] pages (mapped by pfn: present in the page tables,
  // in no RSS), and [vsyscall] (above the user address space): the pagemap
  // scan leaves them out, as smaps and /proc/PID/status do.
  bool not_rss = false, vsyscall = false;
  // Private and backed by no file (inode 0): every present page is
  // anonymous or the zero page, so the pagemap scan need not ask which.
  bool anon_only = false;
};

struct SmapsRead {
  ScratchVector<SmapsMapping> mappings;  // in address order (huge-page backed when large)
  std::vector<std::string> names{""};  // names[0] is "no name"
  uint64_t thread_stacks = 0;          // mappings taken as thread stacks
  // Resident bytes the pagemap scan found in no mapping read: the maps
  // were read before the process mapped more (pagemap_scan.h).
  uint64_t resident_outside_mappings = 0;
  bool cut = false;                    // a limit stopped the read: reason says which
  std::string reason;
  std::string error;                   // set: the text was not smaps (nothing else is valid)
  // How the resident bytes were counted: "smaps", or "pagemap_scan" (maps
  // plus the PAGEMAP_SCAN ioctl, pagemap_scan.h).
  std::string source = "smaps";
};

SmapsRead parse_smaps(std::string_view text, const SmapsLimits& limits, const TmpfsDevices& tmpfs);
// A /proc/PID/maps text: the mappings, kinds and names, no resident bytes.
SmapsRead parse_maps(std::string_view text, const SmapsLimits& limits, const TmpfsDevices& tmpfs);

// Resident anonymous bytes in [start, end) (PagemapResidency); nullopt when
// it cannot say.
using ResidentAnonFn = std::function<std::optional<uint64_t>(uint64_t start, uint64_t end)>;

// The breakdown of what was read, with the runtime's claims applied: a
// claim's ranges are merged, cut to the mappings they lie in and counted by
// their resident anonymous bytes (by their span when resident_anon is empty
// or cannot say; the reason then says so), never more than the mapping's
// native bytes left. When the read was cut, the mappings not read are counted
// from /proc/PID/status (RssAnon as native, RssFile, RssShmem), so the kinds
// still sum to the RSS.
MemoryBreakdown build_breakdown(const SmapsRead& read, const std::vector<MemoryClaim>& claims,
                                const ProcessMemory& status, const ResidentAnonFn& resident_anon = {});

// /proc/PID/mountinfo, read once per capture for both its uses: the tmpfs
// devices of the breakdown and the mount points of the tmpfs walk.
struct MountInfoText {
  std::string text;   // at most kMaxMountinfoBytes
  bool cut = false;   // longer than that
  std::string error;  // set: not read
};
MountInfoText read_mountinfo(const ProcFiles& proc, std::chrono::steady_clock::time_point deadline);
// Its tmpfs devices (reason set when it was cut or not read).
TmpfsDevices tmpfs_devices_of(const MountInfoText& mountinfo);
// The tmpfs devices of /proc/PID/mountinfo (bounded; reason set when cut).
TmpfsDevices read_tmpfs_devices(const ProcFiles& proc, std::chrono::steady_clock::time_point deadline);
// Reads /proc/PID/smaps (bounded by limits) and /proc/PID/mountinfo.
SmapsRead read_smaps(const ProcFiles& proc, const SmapsLimits& limits);
SmapsRead read_smaps(const ProcFiles& proc, const SmapsLimits& limits, const TmpfsDevices& tmpfs);
// The smaps part: from an open file, in chunks of one 64 KiB buffer, line by
// line (the text is never held whole); a line longer than the buffer is not
// smaps; a mapping the byte bound or the deadline cuts in two is left out.
inline constexpr size_t kSmapsChunk = 64 * 1024;
SmapsRead read_smaps_fd(int fd, const SmapsLimits& limits, const TmpfsDevices& tmpfs);
// /proc/PID/maps the same way: the mappings, kinds and names, no resident
// bytes (rss and anonymous 0: pagemap_scan.h adds them).
SmapsRead read_maps_fd(int fd, const SmapsLimits& limits, const TmpfsDevices& tmpfs);

}  // namespace oomsnap

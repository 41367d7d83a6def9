// The files a process's tmpfs mounts hold, by path (issue #24): a container
// whose tmpfs (emptyDir of medium Memory, /dev/shm) fills its limit shows a
// victim with a small RSS; memory.stat says how much shmem the memcg holds,
// and this says which files hold it.
//
// Run in the capture process. Every name on those mounts is the target's to
// choose, and so is the shape of the tree: a mount point is opened inside the
// target's root (openat2 RESOLVE_IN_ROOT, base/safe_open.h), and below it
// each directory is opened by its name relative to its parent's fd with
// O_NOFOLLOW and stat'ed with AT_SYMLINK_NOFOLLOW, so no symlink is ever
// followed and nothing outside the mount is reached. A directory on another
// device, or whose path is a mount point in the table (a FUSE mount's stat
// can block forever), is not entered or stat'ed. Bounded by entries, depth,
// open directories and a deadline; a cut says so in `reason`.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory_breakdown.h"
#include "core/smaps_breakdown.h"  // parse_tmpfs_mounts

namespace oomsnap {

struct TmpfsScanLimits {
  size_t max_entries = 100000;  // directory entries looked at, over all mounts
  size_t max_depth = 16;        // directories open at once below a mount point
  size_t max_mounts = 64;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// Walks the directory `dir` (an fd open for reading; not closed) of device
// `dev`, whose files are named `prefix` + "/" + their path below it, into
// `out`; `skip` are paths (sorted) not to enter. `entries` counts what was
// looked at, across calls. False when a limit cut the walk (out.reason says
// which).
bool walk_tmpfs_dir(int dir, dev_t dev, const std::string& prefix, const std::vector<std::string>& skip,
                    const TmpfsScanLimits& limits, size_t& entries, TmpfsFiles& out);

// The tmpfs files process `pid` sees: each tmpfs mount of its mount table
// (read_mountinfo) opened in /proc/PID/root and walked. Largest first;
// duration_ms is the walk's time.
TmpfsFiles scan_tmpfs_files(const ProcFiles& proc, const MountInfoText& mountinfo, const TmpfsScanLimits& limits);

}  // namespace oomsnap

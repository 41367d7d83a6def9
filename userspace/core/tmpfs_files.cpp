#include "core/tmpfs_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/safe_open.h"
#include "base/text.h"
#include "base/unique_fd.h"
#include "core/proc_info.h"

namespace oomsnap {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps the kMaxFiles largest, smallest first once full (a min-heap).
void keep_largest(TmpfsFiles& out, const std::string& path, uint64_t bytes) {
  auto smaller = [](const TmpfsFiles::File& a, const TmpfsFiles::File& b) { return a.bytes > b.bytes; };
  if (out.largest.size() == TmpfsFiles::kMaxFiles) {
    if (bytes <= out.largest.front().bytes) return;
    std::pop_heap(out.largest.begin(), out.largest.end(), smaller);
    out.largest.pop_back();
  }
  // File names are bytes: valid UTF-8 and within the bound before the JSON
  // encoder's replacements could lengthen them past what the parent accepts.
  out.largest.push_back({utf8_prefix(path, TmpfsFiles::kMaxPath), bytes});
  std::push_heap(out.largest.begin(), out.largest.end(), smaller);
}

void cut(TmpfsFiles& out, const std::string& why) {
  if (out.reason.find(why) == std::string::npos) out.reason += (out.reason.empty() ? "" : "; ") + why;
}

struct OpenDir {
  DIR* d;
  std::string path;
};

}  // namespace

bool walk_tmpfs_dir(int dir, dev_t dev, const std::string& prefix, const std::vector<std::string>& skip,
                    const TmpfsScanLimits& limits, size_t& entries, TmpfsFiles& out) {
  const int first = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
  DIR* top = first >= 0 ? ::fdopendir(first) : nullptr;
  if (!top) {
    if (first >= 0) ::close(first);
    cut(out, "cannot read the directory " + prefix);
    return true;
  }
  std::vector<OpenDir> stack{{top, prefix}};
  bool whole = true;
  while (!stack.empty() && whole) {
    OpenDir& cur = stack.back();
    errno = 0;
    const dirent* e = ::readdir(cur.d);
    if (!e) {
      ::closedir(cur.d);
      stack.pop_back();
      continue;
    }
    if (++entries > limits.max_entries) {
      cut(out, "tmpfs walk cut at " + std::to_string(limits.max_entries) + " entries");
      whole = false;
      break;
    }
    if ((entries & 255) == 0 && Clock::now() >= limits.deadline) {
      cut(out, "tmpfs walk cut at its deadline");
      whole = false;
      break;
    }
    const char* name = e->d_name;
    if (!std::strcmp(name, ".") || !std::strcmp(name, "..")) continue;
    std::string path = cur.path + "/" + name;
    // A mount point below this one: never stat'ed (a stalled FUSE mount's
    // stat does not return), never entered.
    if (std::binary_search(skip.begin(), skip.end(), path)) continue;
    struct stat st {};
    if (::fstatat(::dirfd(cur.d), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != dev) continue;
    if (S_ISREG(st.st_mode)) {
      const uint64_t bytes = static_cast<uint64_t>(st.st_blocks) * 512;
      out.bytes += bytes;
      ++out.files;
      if (bytes) keep_largest(out, path, bytes);
    } else if (S_ISDIR(st.st_mode)) {
      if (stack.size() > limits.max_depth) {
        cut(out, "tmpfs walk not below " + std::to_string(limits.max_depth) + " directories");
        continue;
      }
      // Relative to its parent and inside it (openat2 in the parent as the
      // root: the one directory open the capture process keeps), not
      // following a symlink swapped in since the stat; on another device (a
      // mount raced in): left alone.
      const int fd = open_directory_in_root(::dirfd(cur.d), name);
      if (fd < 0) continue;
      struct stat again {};
      DIR* d = ::fstat(fd, &again) == 0 && again.st_dev == dev ? ::fdopendir(fd) : nullptr;
      if (!d) {
        ::close(fd);
        continue;
      }
      stack.push_back({d, std::move(path)});
    }
  }
  for (OpenDir& o : stack) ::closedir(o.d);
  return whole;
}

namespace {

// The walk of every tmpfs mount in the table (scan_tmpfs_files).
TmpfsFiles scan_mounts(const ProcFiles& proc, const MountInfoText& mountinfo, const TmpfsScanLimits& limits) {
  TmpfsFiles out;
  if (!mountinfo.error.empty()) {
    out.reason = mountinfo.error;
    return out;
  }
  const TmpfsMountTable table = parse_tmpfs_mounts(mountinfo.text);
  if (!table.reason.empty()) cut(out, table.reason);
  if (mountinfo.cut) cut(out, "mount table cut at " + std::to_string(kMaxMountinfoBytes / 1024) + " kB");
  const int root = proc.fd(ProcFile::kRoot);
  if (root < 0) {
    const int err = errno;
    cut(out, "cannot open " + proc.path(ProcFile::kRoot) + ": " + errno_text(err));
    return out;
  }
  size_t entries = 0, mounts = 0;
  for (const TmpfsMount& m : table.tmpfs) {
    if (++mounts > limits.max_mounts) {
      cut(out, "tmpfs walk cut at " + std::to_string(limits.max_mounts) + " mounts");
      break;
    }
    UniqueFd dir(open_directory_in_root(root, m.point));
    if (dir.get() < 0 && errno == ENOSYS) {
      // No openat2, or a capture process that could not seal its argument
      // (mseal: Linux 6.10+): nothing is opened by a path the target chose.
      cut(out, "tmpfs mounts not walked: openat2 in the target's root is not available");
      break;
    }
    struct stat st {};
    if (dir.get() < 0 || ::fstat(dir.get(), &st) != 0 || major(st.st_dev) != m.dev.first ||
        minor(st.st_dev) != m.dev.second) {
      continue;  // covered by another mount, or gone: not the tmpfs the table names
    }
    if (!walk_tmpfs_dir(dir.get(), st.st_dev, m.point == "/" ? "" : m.point, table.all_points, limits, entries, out))
      break;
  }
  std::sort(out.largest.begin(), out.largest.end(), [](const TmpfsFiles::File& a, const TmpfsFiles::File& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.path < b.path;
  });
  return out;
}

}  // namespace

TmpfsFiles scan_tmpfs_files(const ProcFiles& proc, const MountInfoText& mountinfo, const TmpfsScanLimits& limits) {
  const auto start = std::chrono::steady_clock::now();
  TmpfsFiles out = scan_mounts(proc, mountinfo, limits);
  out.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace oomsnap

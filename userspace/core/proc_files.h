// The files of /proc/PID a capture reads, each opened once and kept open.
// The capture process opens them all (open_all) before its second seccomp
// filter takes file opens away (sandbox_policy.h: only the target's root is
// left to it), and reads them by descriptor after; anywhere else each opens
// on first use. A descriptor is bound to the process, not to its pid: once
// the process is gone its reads fail (ESRCH), they never read another
// process that was given the same pid.
// Not thread-safe: one capture thread uses it.
#pragma once
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <string>

#include "base/unique_fd.h"

namespace oomsnap {

enum class ProcFile : size_t {
  kStat,
  kStatus,
  kMaps,
  kSmaps,
  kPagemap,
  kMountinfo,
  kExe,   // the executable, read-only (/proc/PID/exe: across mount namespaces, even once replaced on disk)
  kRoot,  // the root it sees, O_PATH: a directory to resolve its paths in (base/safe_open.h), never read
  kCount
};

class ProcFiles {
 public:
  explicit ProcFiles(pid_t pid) : pid_(pid) {}
  ProcFiles(ProcFiles&&) = default;
  ProcFiles& operator=(ProcFiles&&) = default;

  pid_t pid() const { return pid_; }
  // Opens every file not yet open (one that cannot be opened is tried again
  // on its next use, and fails then with the same errno).
  void open_all() const;
  // The descriptor (opened now if it was not), or -1 with errno set to why
  // it could not be opened. Owned here: never closed by the caller.
  int fd(ProcFile f) const;
  // The same descriptor moved to the file's start, for a whole new read of
  // a file the kernel writes when read (maps, smaps, mountinfo).
  int fd_at_start(ProcFile f) const;
  std::string path(ProcFile f) const;
  // The file's text from its start: at most max_bytes, until the deadline
  // (cut says more was left). False when it cannot be opened or read.
  bool read(ProcFile f, std::string& out) const;
  bool read(ProcFile f, std::string& out, size_t max_bytes, std::chrono::steady_clock::time_point deadline,
            bool& cut) const;

 private:
  static constexpr size_t kFiles = static_cast<size_t>(ProcFile::kCount);
  pid_t pid_;
  mutable std::array<UniqueFd, kFiles> fds_;
};

// Reads fd from where it stands to its end: at most max_bytes, until the
// deadline (cut: more was left). False on a read error (errno kept).
bool read_fd_text(int fd, std::string& out, size_t max_bytes, std::chrono::steady_clock::time_point deadline,
                  bool& cut);

}  // namespace oomsnap

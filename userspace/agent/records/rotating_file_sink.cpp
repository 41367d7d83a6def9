// The rotating file sink: the record store (oomsnap.jsonl and its rotations),
// written under a bounded flock, never through a planted link or file.
#include "agent/records/sink.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "agent/records/sink_io.h"
#include "agent/records/store_dir.h"
#include "base/text.h"
#include "base/unique_fd.h"

namespace oomsnap {
namespace {

using namespace sink_io;  // the helpers every sink shares
using store_dir::lock_holder;
using store_dir::open_store_dir;

class RotatingFileSink final : public RecordSink {
 public:
  explicit RotatingFileSink(RotatingFileOptions o)
      : dir_(std::move(o.dir)),
        path_(dir_ + "/" + kRecordFileName),
        name_("file:" + path_),
        max_bytes_(o.max_bytes),
        max_files_(o.max_files),
        lock_timeout_(o.lock_timeout) {}

  ~RotatingFileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }

  std::string name() const override { return name_; }

  // Checks and creates the directory and opens the file, so configuration
  // mistakes and an unsafe store show at startup rather than at the first
  // incident. Takes no directory lock: another process holding it cannot
  // delay the start.
  bool open_now(std::string& error) {
    std::lock_guard<std::timed_mutex> lock(mu_);
    std::string err;
    UniqueFd dir;
    if (!open_store_dir(dir_, dir, err) || !ensure_open(dir.get(), err)) {
      error = name_ + ": " + err;
      return false;
    }
    return true;
  }

  WriteResult write_record(const std::string& json_line, const SinkDeadline& deadline) override {
    WriteResult r;
    std::string line;
    if (!prepare_or_reject(json_line, name_, line, r)) return r;
    const auto start = Clock::now();
    const auto own = start + lock_timeout_;
    std::vector<std::string> problems;
    // mu_ orders this process's threads; the directory flock orders agents
    // sharing the directory, so size check, rotation and append are one step.
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    if (!lock.try_lock_until(earliest(own, deadline)))
      return fail_unwritten("another thread's record is still being written", problems, r);
    std::string err, warning;
    UniqueFd dir;
    if (!open_store_dir(dir_, dir, err)) return fail_unwritten(err, problems, r);
    if (!lock_dir(dir.get(), start, own, deadline, err, warning)) return fail_unwritten(err, problems, r);
    if (!warning.empty()) problems.push_back(warning);
    if (!ensure_open(dir.get(), err)) return fail_unwritten(err, problems, r);

    uint64_t size = 0;
    bool terminate = false;
    inspect(size, terminate);
    const uint64_t need = line.size() + (terminate ? 1 : 0);
    // `size > 0`: an empty file is never rotated, which is what lets a line
    // longer than max_bytes go whole into a fresh file instead of looping.
    if (size > 0 && size + need > max_bytes_) {
      if (!rotate(dir.get(), err)) problems.push_back("rotate: " + err);
      // Reopen by name either way: after a good rotation it is a new file;
      // after a failed one it is whatever still has the name, and the record
      // goes there rather than nowhere.
      close_fd();
      if (!ensure_open(dir.get(), err)) return fail_unwritten(err, problems, r);
      inspect(size, terminate);
    }
    // A fragment left by a failed write (ours or another agent's) is ended
    // in the same write(2), so the record can't be glued to it.
    if (terminate) line.insert(line.begin(), '\n');

    WriteSignalGuard guard;
    ssize_t n;
    while ((n = ::write(fd_, line.data(), line.size())) < 0 && errno == EINTR) {
      // -1/EINTR: nothing was written, so repeating the whole write is safe.
    }
    if (n == static_cast<ssize_t>(line.size())) {
      if (problems.empty()) {
        r.status = WriteStatus::written;
        r.error.clear();
        return r;
      }
      r.status = WriteStatus::written_with_error;
      r.error = name_ + ": " + join(problems, "; ") + "; record written";
      return r;
    }
    if (n < 0) {
      const int e = errno;
      guard.discard(e);
      close_fd();  // EBADF, ESTALE, ...: start over from the name next time
      return fail_unwritten("write: " + errno_text(e), problems, r);
    }
    // Short write (a regular file does that only when full: ENOSPC, EFBIG).
    // The rest is NOT written with a second write(2): an unrelated appender
    // may have written in between and the tail would land after its bytes.
    // Instead end the fragment now; if even that fails, the next write's
    // inspect() finds the unterminated tail and ends it.
    close_fd_after_short_write(n, terminate ? 1 : 0, line.size(), guard, problems);
    r.status = WriteStatus::failed;
    r.error = name_ + ": " + join(problems, "; ");
    return r;
  }

 private:
  // flock(2) on the directory itself, so no extra lock file appears next to
  // the records; released when `dir_fd` is closed. LOCK_NB retried with a
  // backoff from 100 us to 5 ms until min(own, deadline). A failing flock
  // other than "held" is only a `warning`: the single O_APPEND write keeps
  // lines whole without it; only cross-process rotation loses coordination,
  // which is no reason to drop the record.
  bool lock_dir(int dir_fd, Clock::time_point start, Clock::time_point own, const SinkDeadline& deadline,
                std::string& error, std::string& warning) {
    auto pause = std::chrono::microseconds(100);
    for (;;) {
      if (::flock(dir_fd, LOCK_EX | LOCK_NB) == 0) return true;
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) {
        warning = "flock '" + dir_ + "': " + errno_text(errno) + " (writing unlocked)";
        return true;
      }
      const auto now = Clock::now();
      const auto end = earliest(own, deadline);
      if (now >= end) {
        error = "directory lock on '" + dir_ + "' held by " + lock_holder(dir_fd) + "; gave up after " +
                std::to_string(ms_since(start)) + " ms" +
                (own <= deadline.get() ? "" : " (the writer's deadline)");
        return false;
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, end - now));
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }

  void close_fd_after_short_write(ssize_t n, size_t prefix, size_t total, WriteSignalGuard& guard,
                                  std::vector<std::string>& problems) {
    const size_t written = static_cast<size_t>(n);
    std::string what;
    if (written <= prefix) {
      // Only the newline ending an older fragment got out: nothing to end.
      what = "record not written";
    } else {
      ssize_t t;
      while ((t = ::write(fd_, "\n", 1)) < 0 && errno == EINTR) {
      }
      what = "record cut after " + std::to_string(written - prefix) + " of " +
             std::to_string(total - prefix) + " bytes";
      if (t == 1) {
        what += ", fragment ended with a newline";
      } else {
        const int e = t < 0 ? errno : EIO;
        guard.discard(e);
        what += ", fragment left open (" + errno_text(e) + "), the next write ends it";
      }
    }
    close_fd();
    problems.push_back("short write: " + what);
  }

  WriteResult& fail_unwritten(const std::string& why, std::vector<std::string>& problems, WriteResult& r) {
    problems.push_back(why);
    r.status = WriteStatus::failed;
    r.error = name_ + ": " + join(problems, "; ") + "; record not written";
    return r;
  }

  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Why the entry `name` in the store is not something rotation may rename
  // or remove; empty when it is absent, a directory (rename(2) then fails on
  // its own, with its own error) or a record file of ours.
  std::string foreign_entry(int dir_fd, const std::string& name) const {
    struct stat st{};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
    if (S_ISDIR(st.st_mode)) return {};
    const std::string path = dir_ + "/" + name;
    if (!S_ISREG(st.st_mode))
      return "'" + path + "' is " + file_kind(st.st_mode) + ", not a record file of ours";
    if (st.st_uid != ::geteuid())
      return "'" + path + "' is owned by uid " + std::to_string(st.st_uid) + ", not a record file of ours";
    if (st.st_nlink != 1)
      return "'" + path + "' has " + std::to_string(st.st_nlink) + " hard links, not a record file of ours";
    return {};
  }

  // Keeps fd_ on the file that currently has the name: another agent (or
  // logrotate) may have rotated it away since our last write. Opens only a
  // regular file, owned by us, with one link, never through a symlink and
  // never blocking (a FIFO planted there).
  bool ensure_open(int dir_fd, std::string& error) {
    if (fd_ >= 0) {
      struct stat by_fd{}, by_name{};
      if (::fstat(fd_, &by_fd) != 0 ||
          ::fstatat(dir_fd, kRecordFileName, &by_name, AT_SYMLINK_NOFOLLOW) != 0 ||
          by_fd.st_dev != by_name.st_dev || by_fd.st_ino != by_name.st_ino)
        close_fd();
    }
    if (fd_ >= 0) return true;
    // O_RDWR (not O_WRONLY) so inspect() can read the last byte back.
    int fd = ::openat(dir_fd, kRecordFileName,
                      O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int e = errno;
      if (e == ELOOP)
        error = "'" + path_ + "' is a symbolic link; not following it (remove it)";
      else
        error = "open '" + path_ + "' for append: " + errno_text(e);
      return false;
    }
    UniqueFd opened(fd);
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
      error = "fstat '" + path_ + "': " + errno_text(errno);
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      error = "'" + path_ + "' is " + file_kind(st.st_mode) + ", not a regular file; not writing to it";
      return false;
    }
    if (st.st_uid != ::geteuid()) {
      error = "'" + path_ + "' is owned by uid " + std::to_string(st.st_uid) + ", not by us (uid " +
              std::to_string(::geteuid()) + "); not writing to it";
      return false;
    }
    if (st.st_nlink != 1) {
      error = "'" + path_ + "' has " + std::to_string(st.st_nlink) + " hard links; not writing to it";
      return false;
    }
    // A file from an older version (0644): records are for root only.
    if ((st.st_mode & 07777) != 0600) (void)::fchmod(fd, 0600);
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    fd_ = opened.release();
    return true;
  }

  // Current size (with other appenders' bytes) and whether the file ends in a
  // partial line that must be terminated before the next record.
  //
  // A file not ending in '\n' is either a fragment (a write cut short, ours
  // or another agent's) or a line another program is appending right now:
  // the kernel grows the file page by page during one write(2), so its tail
  // is briefly visible. Ending the latter would only add an empty line after
  // it (our write waits for theirs). To tell them apart, a zero-length
  // write(2) serves as a barrier: Linux file systems take the inode's write
  // lock for it too (checked on ext4 and tmpfs), so it returns only once a
  // write in progress has finished. A tail that is still unterminated and the
  // same size after that (and a short pause, for file systems where the
  // barrier might not wait) is a fragment. A tail that keeps changing is a
  // busy writer: our write lands after its current one, so nothing to end.
  void inspect(uint64_t& size, bool& terminate) const {
    size = 0;
    terminate = false;
    off_t prev = -1;
    for (int look = 0; look < kFragmentMaxLooks; ++look) {
      if (look > 0) {
        while (::write(fd_, "", 0) < 0 && errno == EINTR) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(kFragmentPauseMs));
      }
      struct stat st{};
      if (::fstat(fd_, &st) != 0 || st.st_size <= 0) return;
      size = static_cast<uint64_t>(st.st_size);
      char last = '\n';
      if (::pread(fd_, &last, 1, st.st_size - 1) != 1 || last == '\n') return;
      if (st.st_size == prev) {
        terminate = true;  // nobody was writing it: a fragment
        return;
      }
      prev = st.st_size;
    }
  }

  std::string numbered(int i) const { return std::string(kRecordFileName) + "." + std::to_string(i); }
  std::string full(const std::string& name) const { return dir_ + "/" + name; }

  // oomsnap.jsonl -> .1 -> .2 ... -> .(max_files-1); rename(2) replaces its
  // target, which is how the oldest file goes. Oldest first so every rename
  // has a free slot. Every name involved is checked first: a symlink, FIFO or
  // someone else's file there stops the rotation before anything moved.
  // Called with the directory lock held.
  bool rotate(int dir_fd, std::string& error) {
    const int last = max_files_ == 1 ? 0 : max_files_ - 1;
    for (int i = 0; i <= last; ++i) {
      const std::string name = i == 0 ? std::string(kRecordFileName) : numbered(i);
      if (auto why = foreign_entry(dir_fd, name); !why.empty()) {
        error = why + "; not rotating (remove it)";
        return false;
      }
    }
    if (max_files_ == 1) {
      // Only the live file is kept: rotation starts it over.
      if (::unlinkat(dir_fd, kRecordFileName, 0) != 0 && errno != ENOENT) {
        error = "unlink '" + path_ + "': " + errno_text(errno);
        return false;
      }
      return remove_beyond(dir_fd, 1, error);
    }
    for (int i = max_files_ - 2; i >= 1; --i) {
      if (::renameat(dir_fd, numbered(i).c_str(), dir_fd, numbered(i + 1).c_str()) != 0 && errno != ENOENT) {
        error = "rename '" + full(numbered(i)) + "' -> '" + full(numbered(i + 1)) + "': " + errno_text(errno);
        return false;
      }
    }
    if (::renameat(dir_fd, kRecordFileName, dir_fd, numbered(1).c_str()) != 0) {
      error = "rename '" + path_ + "' -> '" + full(numbered(1)) + "': " + errno_text(errno);
      return false;
    }
    return remove_beyond(dir_fd, max_files_, error);
  }

  // Files numbered past the limit (left by a run with a larger MaxFiles) would
  // otherwise stay forever; stop at the first gap, or at an entry that is not
  // ours (reported).
  bool remove_beyond(int dir_fd, int first, std::string& error) {
    for (int i = first;; ++i) {
      if (auto why = foreign_entry(dir_fd, numbered(i)); !why.empty()) {
        error = why + "; not removing it";
        return false;
      }
      if (::unlinkat(dir_fd, numbered(i).c_str(), 0) != 0) return true;
    }
  }

  static constexpr int kFragmentMaxLooks = 4;  // see inspect()
  static constexpr int kFragmentPauseMs = 1;

  const std::string dir_, path_, name_;
  const uint64_t max_bytes_;
  const int max_files_;
  const std::chrono::milliseconds lock_timeout_;
  std::timed_mutex mu_;
  int fd_ = -1;  // the live file, O_APPEND; -1 until opened or after an error
};

}  // namespace

std::unique_ptr<RecordSink> make_rotating_file_sink(RotatingFileOptions options, std::string& error) {
  const std::string what = "record file sink in '" + options.dir + "': ";
  if (options.dir.empty()) {
    error = "record file sink: empty directory path";
    return nullptr;
  }
  if (options.max_bytes == 0) {
    error = what + "max_bytes must be > 0";
    return nullptr;
  }
  if (options.max_files < 1) {
    error = what + "max_files must be >= 1, got " + std::to_string(options.max_files);
    return nullptr;
  }
  if (options.lock_timeout.count() < 0) {
    error = what + "lock_timeout must be >= 0";
    return nullptr;
  }
  // "/var/log/oomsnap/" and "/var/log/oomsnap" name the same file.
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
  auto sink = std::make_unique<RotatingFileSink>(std::move(options));
  if (!sink->open_now(error)) return nullptr;
  return sink;
}

std::unique_ptr<RecordSink> make_rotating_file_sink(std::string dir, uint64_t max_bytes,
                                                    int max_files, std::string& error) {
  RotatingFileOptions o;
  o.dir = std::move(dir);
  o.max_bytes = max_bytes;
  o.max_files = max_files;
  return make_rotating_file_sink(std::move(o), error);
}

}  // namespace oomsnap
